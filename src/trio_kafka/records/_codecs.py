"""Compression codecs of record batch v2, framed exactly as Kafka frames them.

Only the record section (everything after `recordsCount`) is compressed; the 61-byte
header stays in the clear. The framings, taken from Kafka's Java client and librdkafka:

- gzip: the gzip file format (RFC 1952), as Java's GZIPOutputStream writes it. We write
  one member with zlib (`wbits=31`) and read gzip or zlib (`wbits=47`), several members
  in a row too.
- snappy: Java's client writes the xerial snappy-java stream: an 8-byte magic
  `\\x82SNAPPY\\x00`, a big-endian int32 version (1) and compatible version (1), then
  blocks of [big-endian int32 length][raw snappy block], 32 KiB of input per block.
  librdkafka and snappy-java both read that framing and also a single raw snappy block;
  so do we. (The "snappy framing format" with the `sNaPpY` stream identifier is *not*
  what Kafka uses.)
- lz4: the LZ4 frame format (KIP-57 fixed the header checksum old Kafka versions got
  wrong). Java's reader refuses linked blocks, so we write independent blocks, 64 KiB
  maximum, with no content size and no content checksum.
- zstd: a standard zstd frame (KIP-110). Java's zstd-jni and librdkafka's streaming
  writers omit the content size, so we read with a streaming decompressor.

Snappy and lz4 come from `cramjam` (the optional extra `compression`): importing it lazily
means a missing library costs nothing until a batch actually uses the codec, and then
raises UnsupportedCodecError. Every codec failure on read becomes CorruptRecordError.
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import Any

import zstandard

from trio_kafka.errors import ConfigError, CorruptRecordError, UnsupportedCodecError


class Compression(enum.IntEnum):
    """The codec in bits 0-2 of a record batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Level ranges and defaults follow the Java producer's compression.<codec>.level configs
# (KIP-390): gzip -1 (zlib's default, 6) .. 9, lz4 1 .. 17 (default 9), zstd
# -131072 .. 22 (default 3). Snappy has no levels.
_LEVELS: dict[Compression, tuple[int, int, int]] = {
    Compression.GZIP: (-1, 9, -1),
    Compression.LZ4: (1, 17, 9),
    Compression.ZSTD: (-131072, 22, 3),
}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


def resolve_level(codec: Compression, level: int | None) -> int | None:
    """The level to compress with, checked against the codec's range."""
    if codec not in _LEVELS:
        if level is not None:
            raise ConfigError(f"compression {codec.name.lower()} takes no level, got {level}")
        return None
    low, high, default = _LEVELS[codec]
    if level is None:
        return default
    if not low <= level <= high:
        raise ConfigError(
            f"compression level {level} is outside {low}..{high} for {codec.name.lower()}",
        )
    return level


def _cramjam() -> Any:
    try:
        import cramjam
    except ImportError as exc:  # the optional extra is not installed
        raise UnsupportedCodecError(
            "snappy and lz4 need the cramjam library: pip install 'trio-kafka[compression]'",
        ) from exc
    return cramjam


def compress(codec: Compression, data: bytes, level: int | None) -> bytes:
    """Compress a record section; `level` comes from resolve_level()."""
    match codec:
        case Compression.NONE:
            return data
        case Compression.GZIP:
            assert level is not None
            compressor = zlib.compressobj(level, zlib.DEFLATED, 31)
            return compressor.compress(data) + compressor.flush()
        case Compression.ZSTD:
            assert level is not None
            return bytes(zstandard.ZstdCompressor(level=level).compress(data))
        case Compression.LZ4:
            lz4 = _cramjam().lz4
            compressor = lz4.Compressor(level=level, content_checksum=False, block_linked=False)
            compressor.compress(data)
            return bytes(compressor.finish())
        case Compression.SNAPPY:
            snappy = _cramjam().snappy
            parts = [_XERIAL_HEADER]
            for start in range(0, len(data), _XERIAL_BLOCK):
                block = bytes(snappy.compress_raw(data[start : start + _XERIAL_BLOCK]))
                parts.append(_INT32.pack(len(block)))
                parts.append(block)
            return b"".join(parts)
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


def decompress(codec: Compression, data: bytes) -> bytes:
    """Decompress a record section; any failure is CorruptRecordError (or Unsupported...)."""
    if codec in (Compression.SNAPPY, Compression.LZ4):
        cramjam = _cramjam()  # outside the try: a missing library is not corruption
    try:
        match codec:
            case Compression.NONE:
                return data
            case Compression.GZIP:
                return _gunzip(data)
            case Compression.ZSTD:
                return _unzstd(data)
            case Compression.LZ4:
                return bytes(cramjam.lz4.decompress(data))
            case Compression.SNAPPY:
                return _unsnappy(cramjam, data)
    except CorruptRecordError:
        raise
    except Exception as exc:  # zlib.error, ZstdError, cramjam errors, struct.error...
        raise CorruptRecordError(
            f"{codec.name.lower()} record data does not decompress: {exc}",
        ) from exc
    raise UnsupportedCodecError(f"unknown compression codec {codec}")


def _gunzip(data: bytes) -> bytes:
    out: list[bytes] = []
    while True:
        inflater = zlib.decompressobj(47)  # 32 + 15: gzip or zlib header, auto-detected
        out.append(inflater.decompress(data))
        if not inflater.eof:
            raise CorruptRecordError("gzip record data is truncated")
        data = inflater.unused_data
        if not data:
            return b"".join(out)


def _unzstd(data: bytes) -> bytes:
    decompressor = zstandard.ZstdDecompressor()
    out: list[bytes] = []
    while True:
        stream = decompressor.decompressobj()
        out.append(stream.decompress(data))
        if not stream.eof:
            raise CorruptRecordError("zstd record data is truncated")
        data = stream.unused_data
        if not data:
            return b"".join(out)


def _unsnappy(cramjam: Any, data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    position = len(_XERIAL_HEADER)
    if len(data) < position:
        raise CorruptRecordError("xerial snappy header is truncated")
    out: list[bytes] = []
    while position < len(data):
        if len(data) - position < 4:
            raise CorruptRecordError(f"xerial snappy block length at byte {position} is truncated")
        (length,) = _INT32.unpack_from(data, position)
        position += 4
        if length < 0 or position + length > len(data):
            raise CorruptRecordError(
                f"xerial snappy block at byte {position} claims {length} bytes,"
                f" {len(data) - position} remain",
            )
        out.append(bytes(cramjam.snappy.decompress_raw(data[position : position + length])))
        position += length
    return b"".join(out)
