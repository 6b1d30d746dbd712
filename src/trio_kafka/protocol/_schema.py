"""The schema DSL: declare a message once, read, write and size it at every version.

Theory of operation. A message or nested struct is an `@attrs.frozen` class deriving from
`Struct` whose fields are declared with `field(TYPE, "versions", nullable=..., tag=...,
tagged=..., default=...)`, close to Kafka's JSON definitions (same version strings, same
order, snake_case names). `field` returns an ordinary attrs field carrying a `FieldSpec`
in its metadata, so mypy and attrs see plain typed classes with defaults.

The first time a (class, version, flexible) triple is encoded, sized or decoded, `codec()`
builds its plan: the fields present at that version, each with a reader, writer and
sizer closure specialised for the version's flexibility and nullability (nested structs
get their own plans, recursively). Plans are cached forever (there are a few hundred at
most), so a call never re-reads the declaration. Flexible versions (KIP-482) end every
struct with tagged fields: known tags are written only when they differ from their
default, and tags we do not know are kept in `unknown_tagged_fields` and written back, so
a proxy or a newer peer loses nothing.

Decoding failures surface as `ProtocolError` naming the message, the version, the field
path (`topics[2].partitions[0].records`) and the byte offset where the field began.
"""

from __future__ import annotations

import operator
import struct
from typing import Any, ClassVar, Self

import attrs

from ..errors import ProtocolError
from ._types import (
    DECODE_ERRORS,
    Array,
    Codec,
    ElementFailure,
    Malformed,
    Reader,
    Sizer,
    WireType,
    read_uvarint,
    uvarint_size,
    write_uvarint,
)

_SPEC = "trio_kafka.protocol"
#: What a writer may raise on a value it cannot encode (wrong type, out of range).
_ENCODE_ERRORS = (ValueError, TypeError, AttributeError, OverflowError, Malformed, struct.error)


@attrs.frozen
class Versions:
    """A version range as Kafka's JSON writes it: "3+", "0-8", "5" or "none"."""

    low: int
    high: int | None  # None: open-ended

    @classmethod
    def parse(cls, text: str) -> Versions:
        if text == "none":
            return NO_VERSIONS
        if text.endswith("+"):
            return cls(int(text[:-1]), None)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: object) -> bool:
        return (
            isinstance(version, int)
            and self.low <= version
            and (self.high is None or version <= self.high)
        )

    def __str__(self) -> str:
        if self.high is not None and self.high < self.low:
            return "none"
        if self.high is None:
            return f"{self.low}+"
        return str(self.low) if self.low == self.high else f"{self.low}-{self.high}"


NO_VERSIONS = Versions(0, -1)


@attrs.frozen
class FieldSpec:
    """How one field sits on the wire (the attrs metadata of a declared field)."""

    type: WireType
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged: Versions
    #: A field-level override of the message's flexible versions (RequestHeader.ClientId).
    flexible: Versions | None
    default: Any


_MISSING: Any = object()


def field(
    type_: Any,
    versions: str = "0+",
    *,
    nullable: str = "none",
    tag: int | None = None,
    tagged: str | None = None,
    default: Any = _MISSING,
    flexible: str | None = None,
) -> Any:
    """Declare a field: its wire type, the versions it exists in, and so on.

    The default, unless given, is the type's zero value ("" for a nullable string too, as
    in Kafka); arrays default to a new empty list, structs to a new default instance.
    """
    wire = as_wire_type(type_)
    if default is _MISSING:
        default = wire.default()
    spec = FieldSpec(
        type=wire,
        versions=Versions.parse(versions),
        nullable=Versions.parse(nullable),
        tag=tag,
        tagged=Versions.parse(tagged or versions) if tag is not None else NO_VERSIONS,
        flexible=Versions.parse(flexible) if flexible is not None else None,
        default=default,
    )
    metadata = {_SPEC: spec}
    if isinstance(wire, StructType) and default is not None:
        return attrs.field(factory=wire.cls, metadata=metadata)
    if isinstance(default, list):
        if default:
            raise ValueError("a list default must be empty")
        return attrs.field(factory=list, metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


def field_specs(cls: type[Struct]) -> list[tuple[str, FieldSpec]]:
    """The declared fields of `cls`, in declaration order (for tests and tools)."""
    return [(a.name, a.metadata[_SPEC]) for a in attrs.fields(cls) if _SPEC in a.metadata]


@attrs.frozen
class Struct:
    """A struct of a message schema; messages and nested structs derive from it."""

    #: Tagged fields this version of the schema does not know, by tag, kept verbatim.
    unknown_tagged_fields: dict[int, bytes] = attrs.field(factory=dict, kw_only=True, repr=False)

    #: The struct's name in Kafka's JSON when it differs from the class name.
    JSON_NAME: ClassVar[str | None] = None


class StructType(WireType):
    """A struct class used as a field type."""

    def __init__(self, cls: type[Struct]) -> None:
        self.cls = cls
        self.json_name = cls.JSON_NAME or cls.__name__

    def default(self) -> Any:
        return self.cls()

    def compile(self, version: int, flexible: bool, nullable: bool) -> Codec:
        if nullable:
            raise NotImplementedError("nullable structs are not used by any declared API")
        return codec(self.cls, version, flexible)


_STRUCT_TYPES: dict[type[Struct], StructType] = {}


def as_wire_type(type_: Any) -> WireType:
    if isinstance(type_, WireType):
        return type_
    if isinstance(type_, type) and issubclass(type_, Struct):
        found = _STRUCT_TYPES.get(type_)
        if found is None:
            found = _STRUCT_TYPES[type_] = StructType(type_)
        return found
    raise TypeError(f"not a wire type or struct class: {type_!r}")


def array(element: Any) -> Array:
    """`array(INT32)`, `array(SomeStruct)`: an array of a wire type or of a struct."""
    return Array(as_wire_type(element))


# --- plans ---------------------------------------------------------------------------------

_CODECS: dict[tuple[type[Struct], int, bool], Codec] = {}


def codec(cls: type[Struct], version: int, flexible: bool) -> Codec:
    """The (read, write, size) of `cls` at `version`, built once and cached."""
    key = (cls, version, flexible)
    found = _CODECS.get(key)
    if found is None:
        found = _CODECS[key] = _build(cls, version, flexible)
    return found


def _build(cls: type[Struct], version: int, flexible: bool) -> Codec:
    regular: list[tuple[str, Reader, Any, Sizer]] = []
    # tag -> (name, reader, writer, sizer, default)
    tagged: dict[int, tuple[str, Reader, Any, Sizer, Any]] = {}
    for a in attrs.fields(cls):
        spec: FieldSpec | None = a.metadata.get(_SPEC)
        if spec is None or version not in spec.versions:
            continue
        field_flexible = flexible and (spec.flexible is None or version in spec.flexible)
        read, write, size = spec.type.compile(version, field_flexible, version in spec.nullable)
        if version in spec.tagged:
            if not flexible or spec.tag is None:
                raise TypeError(f"{cls.__name__}.{a.name}: tagged in a non-flexible version")
            default = a.default.factory() if isinstance(a.default, attrs.Factory) else a.default  # type: ignore[arg-type]
            tagged[spec.tag] = (a.name, read, write, size, default)
        else:
            regular.append((a.name, read, write, size))
    readers = [(name, read) for name, read, _, _ in regular]
    writers = [(name, write) for name, _, write, _ in regular]
    sizers = [(name, size) for name, _, _, size in regular]
    known_tags = sorted(tagged.items())

    def read_struct(buf: bytes, pos: int) -> tuple[Any, int]:
        values: dict[str, Any] = {}
        name = ""
        start = pos
        try:
            for name, read in readers:
                start = pos
                values[name], pos = read(buf, pos)
            if flexible:
                name = "(tagged fields)"
                start = pos
                count, pos = read_uvarint(buf, pos)
                if count > len(buf) - pos:
                    raise Malformed(f"{count} tagged fields but only {len(buf) - pos} bytes left")
                unknown: dict[int, bytes] = {}
                for _ in range(count):
                    start = pos
                    tag, pos = read_uvarint(buf, pos)
                    length, pos = read_uvarint(buf, pos)
                    end = pos + length
                    if end > len(buf):
                        raise Malformed(
                            f"tagged field {tag} of length {length} but only "
                            f"{len(buf) - pos} bytes left"
                        )
                    known = tagged.get(tag)
                    if known is None:
                        unknown[tag] = buf[pos:end]
                    else:
                        name = known[0]
                        values[name], after = known[1](buf, pos)
                        if after != end:
                            raise Malformed(
                                f"tagged field {tag} is {length} bytes but its value took "
                                f"{after - pos}"
                            )
                        name = "(tagged fields)"
                    pos = end
                if unknown:
                    values["unknown_tagged_fields"] = unknown
        except ElementFailure as failure:
            failure.path.insert(0, name)
            raise
        except DECODE_ERRORS as exc:
            raise ElementFailure(exc, start, [name]) from exc
        return cls(**values), pos

    def tag_entries(obj: Any) -> list[tuple[int, bytes]]:
        entries: list[tuple[int, bytes]] = []
        for tag, (name, _, write, _, default) in known_tags:
            value = getattr(obj, name)
            if value != default:
                data = bytearray()
                write(data, value)
                entries.append((tag, bytes(data)))
        if obj.unknown_tagged_fields:
            entries.extend(obj.unknown_tagged_fields.items())
            entries.sort(key=operator.itemgetter(0))
        return entries

    def write_struct(out: bytearray, obj: Any) -> None:
        name = ""
        try:
            for name, write in writers:
                write(out, getattr(obj, name))
            if flexible:
                name = "(tagged fields)"
                if not known_tags and not obj.unknown_tagged_fields:
                    out.append(0)
                    return
                entries = tag_entries(obj)
                write_uvarint(out, len(entries))
                for tag, data in entries:
                    write_uvarint(out, tag)
                    write_uvarint(out, len(data))
                    out += data
        except ElementFailure as failure:
            failure.path.insert(0, name)
            raise
        except _ENCODE_ERRORS as exc:
            raise ElementFailure(exc, len(out), [name]) from exc

    def size_struct(obj: Any) -> int:
        total = 0
        for name, size in sizers:
            total += size(getattr(obj, name))
        if flexible:
            if not known_tags and not obj.unknown_tagged_fields:
                return total + 1
            entries = tag_entries(obj)
            total += uvarint_size(len(entries))
            for tag, data in entries:
                total += uvarint_size(tag) + uvarint_size(len(data)) + len(data)
        return total

    return read_struct, write_struct, size_struct


def _field_path(path: list[str]) -> str:
    text = ""
    for part in path:
        if part.startswith("["):
            text += part
        elif part:
            text += f".{part}" if text else part
    return text


def _reason(cause: BaseException) -> str:
    if isinstance(cause, (struct.error, IndexError)):
        return "truncated: the data ends inside this field"
    if isinstance(cause, UnicodeDecodeError):
        return f"invalid UTF-8 in a string: {cause.reason}"
    return str(cause) or type(cause).__name__


# --- messages ------------------------------------------------------------------------------


@attrs.frozen
class Message(Struct):
    """A top-level schema: a request, a response or a header."""

    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    #: The first flexible version (compact types, tagged fields), or None.
    FLEXIBLE_VERSION: ClassVar[int | None]

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return cls.FLEXIBLE_VERSION is not None and version >= cls.FLEXIBLE_VERSION

    @classmethod
    def codec(cls, version: int) -> Codec:
        """This message's (read, write, size) at `version`; `version` must be supported."""
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise ProtocolError(
                f"version {version} is not supported "
                f"(supported: {cls.MIN_VERSION}-{cls.MAX_VERSION})",
                message_name=cls.__name__,
                version=version,
            )
        return codec(cls, version, cls.is_flexible(version))

    def encode(self, version: int) -> bytes:
        """The body (no header) at `version`."""
        out = bytearray()
        self.write_to(out, version)
        return bytes(out)

    def write_to(self, out: bytearray, version: int) -> None:
        """Append the body at `version` to `out`."""
        write = self.codec(version)[1]
        try:
            write(out, self)
        except ElementFailure as failure:
            raise ProtocolError(
                f"cannot encode: {failure.cause}",
                message_name=type(self).__name__,
                version=version,
                field=_field_path(failure.path),
            ) from failure.cause

    def size(self, version: int) -> int:
        """The length of `encode(version)`, computed without encoding."""
        return self.codec(version)[2](self)

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, version: int) -> Self:
        """Decode a body (no header) that must fill `data` exactly."""
        message, _ = cls.read_from(bytes(data), 0, version, exact=True)
        return message

    @classmethod
    def read_from(cls, buf: bytes, pos: int, version: int, *, exact: bool) -> tuple[Self, int]:
        """Decode from `buf[pos:]`; with `exact`, trailing bytes are an error."""
        read = cls.codec(version)[0]
        try:
            message, end = read(buf, pos)
        except ElementFailure as failure:
            raise ProtocolError(
                _reason(failure.cause),
                message_name=cls.__name__,
                version=version,
                field=_field_path(failure.path),
                offset=failure.offset,
            ) from failure.cause
        if exact and end != len(buf):
            raise ProtocolError(
                f"{len(buf) - end} bytes left over after the message",
                message_name=cls.__name__,
                version=version,
                offset=end,
            )
        return message, end


@attrs.frozen
class Request(Message):
    """A request body: `API_KEY` and the `RESPONSE` class that answers it."""

    API_KEY: ClassVar[int]
    RESPONSE: ClassVar[type[Response]]


@attrs.frozen
class Response(Message):
    """A response body."""

    API_KEY: ClassVar[int]
