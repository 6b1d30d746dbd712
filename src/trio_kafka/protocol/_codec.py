"""The generic Kafka wire codec: wire types, the schema DSL, headers and whole frames.

Every message of every API is read, written and sized here, at any supported version;
`messages/` declares them (one module per API) and the producer's Produce fast path
(`_produce.py`) writes and reads the same bytes for its one hot request.

Theory of operation, bottom up:

- **Wire types.** A wire type never interprets a schema at run time: `compile(version,
  flexible, nullable)` returns three small closures specialised for that combination (a
  `Reader`, a `Writer`, a `Sizer`). The closures do no bookkeeping of their own: a short
  buffer surfaces as `struct.error` or `IndexError`, a bad length as `Malformed`, and the
  struct reader that called them turns any of these into a `ProtocolError` that names the
  field and the byte offset (`DECODE_ERRORS`). Every length read from the wire (string,
  bytes, array, tagged field) is checked against the bytes that remain before anything is
  allocated, so hostile input cannot make us build a huge list or string, and every loop
  is bounded by the input's size.
- **The schema DSL.** A message or nested struct is an `@attrs.frozen` class deriving from
  `Struct` whose fields are declared with `field(TYPE, "versions", nullable=..., tag=...,
  tagged=..., default=...)`, close to Kafka's JSON definitions (same version strings, same
  order, snake_case names). `field` returns an ordinary attrs field carrying a `FieldSpec`
  in its metadata, so mypy and attrs see plain typed classes with defaults. The first time
  a (class, version, flexible) triple is encoded, sized or decoded, `codec()` builds its
  plan: the fields present at that version, each with the reader, writer and sizer of its
  wire type (nested structs get their own plans, recursively). Plans are cached forever
  (there are a few hundred at most), so a call never re-reads the declaration. Flexible
  versions (KIP-482) end every struct with tagged fields: known tags are written only when
  they differ from their default, and tags we do not know are kept in
  `unknown_tagged_fields` and written back, so a proxy or a newer peer loses nothing.
  Decoding failures surface as `ProtocolError` naming the message, the version, the field
  path (`topics[2].partitions[0].records`) and the byte offset where the field began.
- **Headers.** Request header v0-v2 and response header v0-v1 (RequestHeader.json,
  ResponseHeader.json), declared in the DSL. Header v2 / v1 are the flexible headers of
  KIP-482: they end with tagged fields. The client id stays a classic int16-length string
  even in header v2 (the JSON's `"flexibleVersions": "none"` on the field), so old brokers
  can always read who is asking.
- **Whole frames.** A frame is a size, a header and a body. The request header version
  follows the API's flexibility (v2 for a flexible request, v1 otherwise); the response
  header likewise (v1 / v0), except that ApiVersions responses always use header v0 so
  that a client that sent a version the broker does not know can still read the broker's
  answer (KIP-511). `encode_request_parts` gives a request frame as a list of buffers:
  records values of `GATHER_MIN` bytes or more (a Produce request's record batches) are
  parts of their own (`Gather`), referenced rather than copied, which is how the
  connection writes large requests (`coalesce` groups the parts into writes);
  `encode_request` joins those parts into one `bytes`. A request frame of an API not
  known in advance (what a broker reads) needs the registry of every API, so its reader,
  `decode_request`, lives with that registry in `messages/`.
- **Splitting a stream.** Every Kafka request and response travels as a 4-byte big-endian
  size followed by that many bytes. `FrameSplitter.feed` takes whatever the transport
  delivered (a byte, half a frame, ten frames) and returns the payloads it completed; the
  rest waits in its buffer for the next call. A size that is negative or over
  `max_frame_size` is reported as soon as its 4 bytes arrive, before any of the body is
  buffered, so a peer that lies about a frame's size cannot make us hold gigabytes.
"""

from __future__ import annotations

import operator
import struct
import uuid
from collections.abc import Callable
from typing import Any, ClassVar, Self

import attrs

from ..errors import ProtocolError

# === wire types ==========================================================================


#: `read(buf, pos) -> (value, new_pos)`; `buf` is always `bytes`.
Reader = Callable[[bytes, int], tuple[Any, int]]
#: `write(out, value)` appends the encoding of `value` to `out`.
Writer = Callable[[bytearray, Any], None]
#: `size(value)` is the number of bytes `write` would append.
Sizer = Callable[[Any], int]
Codec = tuple[Reader, Writer, Sizer]


class Malformed(Exception):
    """The bytes contradict the schema (a bad length, a null where none may be, a varint
    too long); the struct readers and the record batch decoder turn it into their error."""


#: What a reader may raise on bad input; struct readers turn these into `ProtocolError`.
DECODE_ERRORS = (Malformed, struct.error, IndexError, UnicodeDecodeError, ValueError)


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_unpack_i16 = _I16.unpack_from
_unpack_i32 = _I32.unpack_from
_pack_i16 = _I16.pack
_pack_i32 = _I32.pack


# --- variable-length integers (unsigned, and zigzag-signed as in record batches) ----------


def read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (Kafka's 32-bit unsigned varint)."""
    b = buf[pos]
    if b < 0x80:  # most lengths and counts: one byte, no call
        return b, pos + 1
    return _read_unsigned(buf, pos, 28, "unsigned varint longer than 5 bytes")


def read_uvarlong(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 10 bytes (the 64-bit form behind varlong)."""
    return _read_unsigned(buf, pos, 63, "varlong longer than 10 bytes")


def _read_unsigned(buf: bytes, pos: int, max_shift: int, too_long: str) -> tuple[int, int]:
    """Base-128, least significant group first; a byte with the high bit clear ends it,
    and a group past `max_shift` bits is `too_long`."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > max_shift:
            raise Malformed(too_long)


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"unsigned varint cannot hold {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint_size(value: int) -> int:
    if value < 0x80:
        return 1
    return (value.bit_length() + 6) // 7


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def _read_varlong(buf: bytes, pos: int) -> tuple[int, int]:
    raw, pos = read_uvarlong(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def _zigzag32(value: int) -> int:
    if not -(2**31) <= value < 2**31:
        raise ValueError(f"varint out of range: {value}")
    return (value << 1) ^ (value >> 31)


def _zigzag64(value: int) -> int:
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"varlong out of range: {value}")
    return (value << 1) ^ (value >> 63)


def _remaining_check(buf: bytes, pos: int, length: int, what: str) -> int:
    end = pos + length
    if end > len(buf):
        raise Malformed(f"{what} of length {length} but only {len(buf) - pos} bytes left")
    return end


# --- the wire types -----------------------------------------------------------------------


class WireType:
    """A type as a field declaration names it; `compile` specialises it per version."""

    #: The type's name in Kafka's JSON definitions ("int32", "[]Foo", "Foo").
    json_name: str = "?"

    def compile(self, version: int, flexible: bool, nullable: bool) -> Codec:
        raise NotImplementedError

    def default(self) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.json_name


class Fixed(WireType):
    """A fixed-width number (or bool) packed with `struct`."""

    def __init__(self, json_name: str, fmt: str, default: Any) -> None:
        self.json_name = json_name
        self._struct = struct.Struct(fmt)
        self._default = default

    def default(self) -> Any:
        return self._default

    def compile(self, version: int, flexible: bool, nullable: bool) -> Codec:
        unpack = self._struct.unpack_from
        pack = self._struct.pack
        width = self._struct.size

        def read(buf: bytes, pos: int) -> tuple[Any, int]:
            return unpack(buf, pos)[0], pos + width

        def write(out: bytearray, value: Any) -> None:
            out += pack(value)

        def size(value: Any) -> int:
            return width

        return read, write, size


class _Varint(WireType):
    def __init__(self, json_name: str, long: bool) -> None:
        self.json_name = json_name
        self._long = long

    def default(self) -> int:
        return 0

    def compile(self, version: int, flexible: bool, nullable: bool) -> Codec:
        zigzag = _zigzag64 if self._long else _zigzag32
        read = _read_varlong if self._long else _read_varint

        def write(out: bytearray, value: int) -> None:
            write_uvarint(out, zigzag(value))

        def size(value: int) -> int:
            return uvarint_size(zigzag(value))

        return read, write, size


class _UVarint(WireType):
    json_name = "uvarint"

    def default(self) -> int:
        return 0

    def compile(self, version: int, flexible: bool, nullable: bool) -> Codec:
        def write(out: bytearray, value: int) -> None:
            if value >= 2**32:
                raise ValueError(f"unsigned varint out of range: {value}")
            write_uvarint(out, value)

        return read_uvarint, write, uvarint_size


class _Uuid(WireType):
    json_name = "uuid"

    def default(self) -> uuid.UUID:
        return ZERO_UUID

    def compile(self, version: int, flexible: bool, nullable: bool) -> Codec:
        def read(buf: bytes, pos: int) -> tuple[uuid.UUID, int]:
            end = _remaining_check(buf, pos, 16, "uuid")
            return uuid.UUID(bytes=buf[pos:end]), end

        def write(out: bytearray, value: uuid.UUID) -> None:
            out += value.bytes

        def size(value: uuid.UUID) -> int:
            return 16

        return read, write, size


class _Sized(WireType):
    """What strings and bytes share: a length (int16 for a string, int32 for bytes; the
    length + 1 as an unsigned varint when flexible), -1 (0 when flexible) for null, then the
    bytes. A string is those bytes in UTF-8."""

    def __init__(self, json_name: str, *, text: bool, gather: bool = False) -> None:
        self.json_name = json_name
        #: `str` values (UTF-8 on the wire) rather than `bytes`.
        self.text = text
        #: Hand a large value to a `Gather` output as a part of its own (raw record
        #: batches) instead of copying it.
        self.gather = gather

    def default(self) -> str | bytes | None:
        return "" if self.text else b""

    def compile(self, version: int, flexible: bool, nullable: bool) -> Codec:
        # Everything that differs between string and bytes is decided here, once, so the
        # closures cost what the two separate ones did.
        text = self.text
        gather = self.gather
        what = "string" if text else "bytes"
        non_nullable = "a non-nullable string" if text else "non-nullable bytes"
        unpack, pack, width, limit = (
            (_unpack_i16, _pack_i16, 2, 0x7FFF) if text else (_unpack_i32, _pack_i32, 4, None)
        )
        null = b"\x00" if flexible else b"\xff" * width

        def read(buf: bytes, pos: int) -> tuple[str | bytes | None, int]:
            if flexible:
                n, pos = read_uvarint(buf, pos)
                n -= 1
            else:
                n = unpack(buf, pos)[0]
                pos += width
            if n < 0:
                if nullable:
                    return None, pos
                raise Malformed(f"null in {non_nullable}")
            end = _remaining_check(buf, pos, n, what)
            return (buf[pos:end].decode() if text else buf[pos:end]), end

        def write(out: bytearray, value: str | bytes | None) -> None:
            if value is None:
                if not nullable:
                    raise ValueError(f"None in {non_nullable}")
                out += null
                return
            data = value.encode() if isinstance(value, str) else value
            length = len(data)
            if flexible:
                write_uvarint(out, length + 1)
            else:
                if limit is not None and length > limit:
                    raise ValueError(f"{what} of {length} bytes is longer than {limit}")
                out += pack(length)
            if gather and length >= GATHER_MIN and out.__class__ is Gather:
                out.cut(data)
            else:
                out += data

        def size(value: str | bytes | None) -> int:
            if value is None:
                return 1 if flexible else width
            n = len(value.encode()) if isinstance(value, str) else len(value)
            return n + (uvarint_size(n + 1) if flexible else width)

        return read, write, size


#: A records value at least this long is not copied into a `Gather` frame: it becomes a
#: part of its own (the record batches of a large Produce request or Fetch response).
GATHER_MIN = 32 * 1024


class Gather(bytearray):
    """An output buffer that keeps large records values by reference.

    The writers append to it as to any bytearray; the records writer hands a large value
    to `cut` instead, which closes the bytes written so far as one part, adds the value
    as the next, and goes on empty. `parts()` is then the frame as a list of buffers
    whose concatenation is what a plain bytearray would have held.
    """

    def __init__(self) -> None:
        super().__init__()
        # Finished parts, in order; owned by this buffer until parts() hands them out.
        self.finished: list[bytes | bytearray | memoryview] = []

    def cut(self, value: bytes | bytearray | memoryview) -> None:
        self.finished.append(bytearray(self))
        self.finished.append(value)
        del self[:]

    def parts(self) -> list[bytes | bytearray | memoryview]:
        if not self.finished:
            return [self]
        # Handed out, and forgotten here: a list holding this buffer must not be this
        # buffer's own `finished`, or the two form a reference cycle that keeps the
        # frame's record batches alive until a full garbage collection (in a process
        # with many long-lived objects, hundreds of MiB of sent batches).
        parts, self.finished = self.finished, []
        if self:
            parts.append(self)
        return parts


class Array(WireType):
    """An array of `element` (a wire type, or a struct wrapped by the schema layer)."""

    def __init__(self, element: WireType) -> None:
        self.element = element
        self.json_name = "[]" + element.json_name

    def default(self) -> list[Any]:
        return []

    def compile(self, version: int, flexible: bool, nullable: bool) -> Codec:
        read_item, write_item, size_item = self.element.compile(version, flexible, False)
        return compile_array(read_item, write_item, size_item, flexible, nullable)


def compile_array(
    read_item: Reader, write_item: Writer, size_item: Sizer, flexible: bool, nullable: bool
) -> Codec:
    def read(buf: bytes, pos: int) -> tuple[list[Any] | None, int]:
        if flexible:
            n, pos = read_uvarint(buf, pos)
            n -= 1
        else:
            n = _unpack_i32(buf, pos)[0]
            pos += 4
        if n < 0:
            if nullable:
                return None, pos
            raise Malformed("null in a non-nullable array")
        if n > len(buf) - pos:
            raise Malformed(f"array of {n} elements but only {len(buf) - pos} bytes left")
        items: list[Any] = []
        append = items.append
        index = 0
        try:
            for index in range(n):  # noqa: B007 - index names the element on failure
                item, pos = read_item(buf, pos)
                append(item)
        except ElementFailure as failure:
            failure.path.insert(0, f"[{index}]")
            raise
        except DECODE_ERRORS as exc:
            raise ElementFailure(exc, pos, [f"[{index}]"]) from exc
        return items, pos

    def write(out: bytearray, value: list[Any] | None) -> None:
        if value is None:
            if not nullable:
                raise ValueError("None in a non-nullable array")
            out += b"\x00" if flexible else b"\xff\xff\xff\xff"
            return
        if flexible:
            write_uvarint(out, len(value) + 1)
        else:
            out += _pack_i32(len(value))
        for item in value:
            write_item(out, item)

    def size(value: list[Any] | None) -> int:
        if value is None:
            return 1 if flexible else 4
        n = len(value)
        total = uvarint_size(n + 1) if flexible else 4
        for item in value:
            total += size_item(item)
        return total

    return read, write, size


class ElementFailure(Exception):
    """Internal: decoding failed at `offset`; `path` is filled in on the way out."""

    def __init__(self, cause: BaseException, offset: int, path: list[str]) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.offset = offset
        self.path = path


ZERO_UUID = uuid.UUID(int=0)

INT8 = Fixed("int8", ">b", 0)
INT16 = Fixed("int16", ">h", 0)
INT32 = Fixed("int32", ">i", 0)
INT64 = Fixed("int64", ">q", 0)
UINT16 = Fixed("uint16", ">H", 0)
FLOAT64 = Fixed("float64", ">d", 0.0)
BOOL = Fixed("bool", ">?", False)
VARINT = _Varint("varint", long=False)
VARLONG = _Varint("varlong", long=True)
UVARINT = _UVarint()
UUID = _Uuid()
STRING = _Sized("string", text=True)
BYTES = _Sized("bytes", text=False)
#: Raw record batches: on the wire exactly `bytes` (decoding them is `records/`' job).
RECORDS = _Sized("records", text=False, gather=True)


#: Kafka's JSON uses these as defaults (MaxBytes, "authorized operations not requested").
INT32_MAX = 0x7FFFFFFF
INT32_MIN = -(2**31)

# === the schema DSL ======================================================================


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


# === headers =============================================================================


@attrs.frozen
class RequestHeader(Message):
    MIN_VERSION = 0
    MAX_VERSION = 2
    FLEXIBLE_VERSION = 2
    JSON_NAME = "RequestHeader"

    api_key: int = field(INT16)  # RequestApiKey
    api_version: int = field(INT16)  # RequestApiVersion
    correlation_id: int = field(INT32)
    client_id: str | None = field(STRING, "1+", nullable="1+", flexible="none")


@attrs.frozen
class ResponseHeader(Message):
    MIN_VERSION = 0
    MAX_VERSION = 1
    FLEXIBLE_VERSION = 1

    correlation_id: int = field(INT32)


# === whole frames ========================================================================


_SIZE = struct.Struct(">i")
_API_VERSIONS_KEY = 18


def request_header_version(request_class: type[Request], version: int) -> int:
    return 2 if request_class.is_flexible(version) else 1


def response_header_version(request_class: type[Request] | type[Response], version: int) -> int:
    if request_class.API_KEY == _API_VERSIONS_KEY:
        return 0
    return 1 if request_class.is_flexible(version) else 0


def encode_request(
    message: Request, *, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """The whole request frame, size prefix included."""
    return b"".join(
        encode_request_parts(
            message, version=version, correlation_id=correlation_id, client_id=client_id
        )
    )


def encode_request_parts(
    message: Request, *, version: int, correlation_id: int, client_id: str | None
) -> list[bytes | bytearray | memoryview]:
    """The whole request frame as a list of buffers to write one after the other.

    Large records values (a Produce request's record batches) are parts of their own,
    never copied; everything else is encoded into bytearrays between them. A frame with
    no large records value is one bytearray.
    """
    cls = type(message)
    header = RequestHeader(
        api_key=cls.API_KEY,
        api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    out = Gather()
    out += b"\x00\x00\x00\x00"  # the size, known at the end
    header.write_to(out, request_header_version(cls, version))
    message.write_to(out, version)
    parts = out.parts()
    first = parts[0]
    assert isinstance(first, bytearray)  # Gather.cut and parts() keep it one
    first[0:4] = _SIZE.pack(sum(map(len, parts)) - 4)
    return parts


def encode_response(message: Response, *, version: int, correlation_id: int) -> bytes:
    """The whole response frame, size prefix included."""
    out = bytearray(4)
    ResponseHeader(correlation_id=correlation_id).write_to(
        out, response_header_version(type(message), version)
    )
    message.write_to(out, version)
    out[0:4] = _SIZE.pack(len(out) - 4)
    return bytes(out)


def decode_response(
    request_class: type[Request], version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, Any]:
    """A response frame's payload (no size prefix) -> (correlation id, response body)."""
    data = bytes(frame)
    header, pos = ResponseHeader.read_from(
        data, 0, response_header_version(request_class, version), exact=False
    )
    body, _ = request_class.RESPONSE.read_from(data, pos, version, exact=True)
    return header.correlation_id, body


# === splitting a stream into frames ======================================================


# A frame part at least this big is written on its own; smaller neighbours are joined
# (one write of a few small buffers beats a system call each).
_WRITE_ALONE = 32 * 1024

Buffer = bytes | bytearray | memoryview

#: Kafka's default `socket.request.max.bytes` (100 MiB).
DEFAULT_MAX_FRAME_SIZE = 104_857_600


class FrameSplitter:
    """Feed it chunks of a stream; it hands back complete frame payloads, in order."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        # Bytes received but not yet returned as a frame; owned by this splitter.
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """How many bytes wait for the rest of their frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        buffer = self._buffer
        buffer += data
        frames: list[bytes] = []
        pos = 0
        available = len(buffer)
        # Frames are copied out through a view (one copy each, not a slice then bytes());
        # the view is released before the buffer shrinks.
        with memoryview(buffer) as view:
            while available - pos >= 4:
                (size,) = _SIZE.unpack_from(buffer, pos)
                if size < 0 or size > self.max_frame_size:
                    raise ProtocolError(
                        f"frame size {size} is outside 0..{self.max_frame_size}",
                        message_name="frame",
                        field="size",
                        offset=pos,
                    )
                end = pos + 4 + size
                if end > available:
                    break
                frames.append(bytes(view[pos + 4 : end]))
                pos = end
        if pos:
            del buffer[:pos]
        return frames

    def __repr__(self) -> str:
        return f"<FrameSplitter buffered={len(self._buffer)} max_frame_size={self.max_frame_size}>"


def coalesce(parts: list[Buffer]) -> list[Buffer]:
    """The frame's parts to write: large ones as they are (never copied), runs of
    small ones joined."""
    chunks: list[Buffer] = []
    small: list[Buffer] = []
    for part in parts:
        if len(part) >= _WRITE_ALONE:
            if small:
                chunks.append(small[0] if len(small) == 1 else b"".join(small))
                small = []
            chunks.append(part)
        elif part:
            small.append(part)
    if small:
        chunks.append(small[0] if len(small) == 1 else b"".join(small))
    return chunks
