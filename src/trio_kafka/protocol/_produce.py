"""The Produce fast path: the producer's one hot request written, and its answer read,
without the generic codec's message object per partition.

With many partitions the producer's batches hold a record or two, so what a request and
its answer cost per partition counts. The generic codec (`_codec.py`) wants a
`PartitionProduceData` per partition (an attrs object) and writes each through its
struct writer; on the way back it builds a `PartitionProduceResponse` (nine attrs
fields, a default `LeaderIdAndEpoch`, a dict for unknown tags) and reads each field
through its own reader, which was a fifth of the producer's CPU. This module does both
ends in one pass each, byte for byte what the codec writes and reads:

- **The request.** `ProduceFrame` holds the producer's own (topic -> [(partition,
  records)]) mapping and writes the same bytes as `ProduceRequest` (`encode_request_parts`
  takes it as it takes a `ProduceRequest`: it has the class attributes and `write_to` the
  codec uses); `request()` gives the `ProduceRequest` it stands for.
- **The answer.** `read_produce_answer` reads the usual answer (no per-record errors, no
  tagged fields, which is every answer without an error and most with one) in one pass of
  fixed layouts, into `PartitionAnswer` tuples keyed by (topic, partition). Anything else
  (per-record errors, tagged fields such as KIP-951's leader hints, a frame that does not
  decode) goes to the generic codec, and its result is converted: so the answer is always
  what `decode_response` gives, field for field, and a bad frame fails with the generic
  codec's `ProtocolError`.

tests/unit/test_produce_frame.py and test_produce_answer.py check both against the codec
at every version (the answers over generated responses).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import attrs

from ._codec import (
    DECODE_ERRORS,
    RECORDS,
    STRING,
    Writer,
    decode_response,
    read_uvarint,
    write_uvarint,
)
from .messages.produce import (
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

#: Kafka's internal topics (`Topic.isInternal`): a Produce to one of them that exists is
#: answered INVALID_TOPIC_EXCEPTION (the mock broker too), whose own text only says "an
#: invalid topic" (the producer says which and why).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


# === the request =========================================================================

_ACKS_TIMEOUT = struct.Struct(">hi")


@attrs.frozen
class ProduceFrame:
    """A Produce request: the producer's data, written as `ProduceRequest` would be."""

    API_KEY: ClassVar[int] = ProduceRequest.API_KEY
    MIN_VERSION: ClassVar[int] = ProduceRequest.MIN_VERSION
    MAX_VERSION: ClassVar[int] = ProduceRequest.MAX_VERSION
    FLEXIBLE_VERSION: ClassVar[int | None] = ProduceRequest.FLEXIBLE_VERSION
    RESPONSE: ClassVar[type[ProduceResponse]] = ProduceResponse
    is_flexible = ProduceRequest.is_flexible

    transactional_id: str | None
    acks: int
    timeout_ms: int
    #: topic -> [(partition, record batch bytes)], in the order they are written.
    data: Mapping[str, Sequence[tuple[int, bytes]]]

    def request(self) -> ProduceRequest:
        """The `ProduceRequest` this frame writes."""
        return ProduceRequest(
            transactional_id=self.transactional_id,
            acks=self.acks,
            timeout_ms=self.timeout_ms,
            topic_data=[
                TopicProduceData(
                    name=topic,
                    partition_data=[
                        PartitionProduceData(index=p, records=records) for p, records in parts
                    ],
                )
                for topic, parts in self.data.items()
            ],
        )

    def write_to(self, out: bytearray, version: int) -> None:
        """The request body at `version` (what `ProduceRequest.write_to` writes)."""
        if not self.MIN_VERSION <= version <= self.MAX_VERSION:
            raise ValueError(f"ProduceRequest has no version {version}")
        flexible = self.is_flexible(version)
        write_string, write_nullable_string, write_records = _writers(version, flexible)
        if version >= 3:
            write_nullable_string(out, self.transactional_id)
        out += _ACKS_TIMEOUT.pack(self.acks, self.timeout_ms)
        pack_int32 = _INT32.pack
        if flexible:
            write_uvarint(out, len(self.data) + 1)
        else:
            out += pack_int32(len(self.data))
        for topic, parts in self.data.items():
            write_string(out, topic)
            if flexible:
                write_uvarint(out, len(parts) + 1)
                for partition, records in parts:
                    out += pack_int32(partition)
                    write_records(out, records)
                    out.append(0)  # the partition's tagged fields
                out.append(0)  # the topic's
            else:
                out += pack_int32(len(parts))
                for partition, records in parts:
                    out += pack_int32(partition)
                    write_records(out, records)
        if flexible:
            out.append(0)  # the request's


@functools.cache
def _writers(version: int, flexible: bool) -> tuple[Writer, Writer, Writer]:
    """A topic name's, the transactional id's and a records value's writers."""
    return (
        STRING.compile(version, flexible, False)[1],
        STRING.compile(version, flexible, True)[1],
        RECORDS.compile(version, flexible, True)[1],
    )


# === the answer ==========================================================================

#: What a partition's answer holds when it names no leader (the field's default).
NO_LEADER = LeaderIdAndEpoch()


class PartitionAnswer(NamedTuple):
    """One partition's answer: the fields the producer reads (`PartitionResponseLike`)."""

    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_errors: Sequence[Any]  # BatchIndexAndErrorMessage
    error_message: str | None
    current_leader: LeaderIdAndEpoch


class ProduceAnswer(NamedTuple):
    """A Produce response: each (topic, partition)'s answer (a partition answered twice
    keeps its last answer), the throttle, and KIP-951's node endpoints."""

    partitions: dict[tuple[str, int], PartitionAnswer]
    throttle_time_ms: int
    node_endpoints: Sequence[NodeEndpoint]


class _Unusual(Exception):
    """Not the usual answer: the generic codec reads it.

    A length past the frame's end needs no test of its own: the slice comes back short
    and the next read (there always is one) fails, and the codec names the fault."""


_PARTITION = {  # index, error code, base offset[, log append time[, log start offset]]
    0: struct.Struct(">ihq"),
    2: struct.Struct(">ihqq"),
    5: struct.Struct(">ihqqq"),
}
_new = tuple.__new__


def _partition_layout(version: int) -> struct.Struct:
    return _PARTITION[5 if version >= 5 else 2 if version >= 2 else 0]


def read_produce_answer(
    frame: bytes | bytearray | memoryview, version: int
) -> tuple[int, ProduceAnswer]:
    """A Produce response frame (no size prefix) at `version` -> (correlation id,
    answer). Raises `ProtocolError` for a frame that does not decode, as
    `decode_response(ProduceRequest, version, frame)` does."""
    data = frame if type(frame) is bytes else bytes(frame)
    try:
        if version >= ProduceResponse.FLEXIBLE_VERSION:
            return _read_flexible(data, version)
        return _read_classic(data, version)
    except (_Unusual, *DECODE_ERRORS):
        # Whatever a reader raises on bad bytes (`Malformed` from a varint longer than
        # 5 bytes too): the codec reads the frame again and refuses it as a ProtocolError.
        pass
    correlation_id, response = decode_response(ProduceRequest, version, data)
    return correlation_id, answer_of(response)


def answer_of(response: ProduceResponse) -> ProduceAnswer:
    """The answer the generic codec's response gives."""
    partitions: dict[tuple[str, int], PartitionAnswer] = {}
    for topic in response.responses:
        name = topic.name
        for p in topic.partition_responses:
            partitions[name, p.index] = PartitionAnswer(
                p.error_code,
                p.base_offset,
                p.log_append_time_ms,
                p.log_start_offset,
                tuple(p.record_errors),
                p.error_message,
                p.current_leader,
            )
    return ProduceAnswer(partitions, response.throttle_time_ms, tuple(response.node_endpoints))


def _read_classic(data: bytes, version: int) -> tuple[int, ProduceAnswer]:
    """v0-v8: int32 counts, int16 string lengths, no tagged fields."""
    layout = _partition_layout(version)
    unpack, size = layout.unpack_from, layout.size
    with_errors = version >= 8  # record_errors and error_message
    with_append_time, with_start = version >= 2, version >= 5
    read_int32, read_int16 = _INT32.unpack_from, _INT16.unpack_from
    partitions: dict[tuple[str, int], PartitionAnswer] = {}
    (correlation_id,) = read_int32(data, 0)
    (topics,) = read_int32(data, 4)
    pos = 8
    if topics < 0:
        raise _Unusual
    for _ in range(topics):
        (length,) = read_int16(data, pos)
        pos += 2
        if length < 0:
            raise _Unusual
        name = data[pos : pos + length].decode()
        pos += length
        (count,) = read_int32(data, pos)
        pos += 4
        if count < 0:
            raise _Unusual
        for _ in range(count):
            fields = unpack(data, pos)
            pos += size
            message = None
            if with_errors:
                if read_int32(data, pos)[0] != 0:  # per-record errors (or null)
                    raise _Unusual
                (length,) = read_int16(data, pos + 4)
                pos += 6
                if length >= 0:
                    message = data[pos : pos + length].decode()
                    pos += length
                elif length != -1:
                    raise _Unusual
            partitions[name, fields[0]] = _new(
                PartitionAnswer,
                (
                    fields[1],
                    fields[2],
                    fields[3] if with_append_time else -1,
                    fields[4] if with_start else -1,
                    (),
                    message,
                    NO_LEADER,
                ),
            )
    throttle = 0
    if version >= 1:
        (throttle,) = read_int32(data, pos)
        pos += 4
    if pos != len(data):
        raise _Unusual
    return correlation_id, _new(ProduceAnswer, (partitions, throttle, ()))


def _read_flexible(data: bytes, version: int) -> tuple[int, ProduceAnswer]:
    """v9+: compact counts and strings (length + 1, as uvarints), tagged fields."""
    layout = _partition_layout(version)
    unpack, size = layout.unpack_from, layout.size
    partitions: dict[tuple[str, int], PartitionAnswer] = {}
    (correlation_id,) = _INT32.unpack_from(data, 0)
    if data[4]:  # the header's tagged fields
        raise _Unusual
    topics, pos = _compact_count(data, 5)
    for _ in range(topics):
        length, pos = _compact_count(data, pos)
        name = data[pos : pos + length].decode()
        count, pos = _compact_count(data, pos + length)
        for _ in range(count):
            fields = unpack(data, pos)
            pos += size
            if data[pos] != 1:  # per-record errors (or a null array)
                raise _Unusual
            length = data[pos + 1]
            pos += 2
            message = None
            if length >= 0x80:
                # Read before the null test: 0x80 0x00 is a (padded) zero, a null.
                length, pos = read_uvarint(data, pos - 1)
            if length:
                end = pos + length - 1
                message = data[pos:end].decode()
                pos = end
            if data[pos]:  # tagged fields (KIP-951's current leader)
                raise _Unusual
            pos += 1
            partitions[name, fields[0]] = _new(
                PartitionAnswer,
                (fields[1], fields[2], fields[3], fields[4], (), message, NO_LEADER),
            )
        if data[pos]:  # the topic's tagged fields
            raise _Unusual
        pos += 1
    (throttle,) = _INT32.unpack_from(data, pos)
    if data[pos + 4] or pos + 5 != len(data):  # tagged fields (node endpoints), or more
        raise _Unusual
    return correlation_id, _new(ProduceAnswer, (partitions, throttle, ()))


def _compact_count(data: bytes, pos: int) -> tuple[int, int]:
    """A compact (flexible) count or length at `pos`, stored as n + 1 in a varint ->
    (n, where the next field starts); a null is unusual."""
    n = data[pos]
    if n >= 0x80:
        n, pos = read_uvarint(data, pos)
    else:
        pos += 1
    if not n:
        raise _Unusual
    return n - 1, pos
