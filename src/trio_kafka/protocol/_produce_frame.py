"""A Produce request written straight from the producer's (topic -> [(partition,
records)]) data, without a message object per partition.

With many partitions the producer's batches hold a record or two, so what a request
costs per partition counts: the generic codec wants a `PartitionProduceData` per
partition (an attrs object) and writes each through its struct writer. `ProduceFrame`
holds the producer's own mapping and writes the same bytes (`encode_request_parts`
takes it as it takes a `ProduceRequest`: it has the class attributes and `write_to` the
codec uses); `request()` gives the `ProduceRequest` it stands for.
tests/unit/test_produce_frame.py checks the bytes against the codec's at every version.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Mapping, Sequence
from typing import ClassVar

import attrs

from ._types import RECORDS, STRING, Writer, write_uvarint
from .messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)

_ACKS_TIMEOUT = struct.Struct(">hi")
_INT32 = struct.Struct(">i")


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


__all__ = ["ProduceFrame"]
