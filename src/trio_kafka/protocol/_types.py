"""Wire types: how each primitive, string, bytes and array reads, writes and sizes itself.

Theory of operation. A wire type never interprets a schema at run time: `compile(version,
flexible, nullable)` returns three small closures specialised for that combination (a `Reader`, a
`Writer`, a `Sizer`), and the schema layer (`_schema.py`) strings them together into one
plan per (message class, version). The closures do no bookkeeping of their own: a short
buffer surfaces as `struct.error` or `IndexError`, a bad length as `Malformed`, and the
struct reader that called them turns any of these into a `ProtocolError` that names the
field and the byte offset (see `_schema.DECODE_ERRORS`).

Every length read from the wire (string, bytes, array, tagged field) is checked against
the bytes that remain before anything is allocated, so hostile input cannot make us build
a huge list or string, and every loop is bounded by the input's size.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

#: `read(buf, pos) -> (value, new_pos)`; `buf` is always `bytes`.
Reader = Callable[[bytes, int], tuple[Any, int]]
#: `write(out, value)` appends the encoding of `value` to `out`.
Writer = Callable[[bytearray, Any], None]
#: `size(value)` is the number of bytes `write` would append.
Sizer = Callable[[Any], int]
Codec = tuple[Reader, Writer, Sizer]


class Malformed(Exception):
    """Internal: the bytes contradict the schema (a bad length, a null where none may be)."""


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
