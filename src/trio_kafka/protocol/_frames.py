"""Splitting a byte stream into size-prefixed frames.

Theory of operation. Every Kafka request and response travels as a 4-byte big-endian
size followed by that many bytes. `FrameSplitter.feed` takes whatever the transport
delivered (a byte, half a frame, ten frames) and returns the payloads it completed; the
rest waits in `_buffer` for the next call. A size that is negative or over
`max_frame_size` is reported as soon as its 4 bytes arrive, before any of the body is
buffered, so a peer that lies about a frame's size cannot make us hold gigabytes.

The other way, `coalesce` groups a frame's parts (`encode_request_parts`) into writes.
"""

from __future__ import annotations

import struct

from ..errors import ProtocolError

_SIZE = struct.Struct(">i")
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
