"""`Producer.send_many`: many records in one call, through the core's bulk append
(`ProducerCore.append_many`, in chunks of `_BULK_CHUNK` values) when they are values for
one topic, else one `send()` each. What it returns is a `BulkDelivery` of batch spans.
Cancelling it: docs/asyncio.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import anyio.lowlevel

from trio_kafka.client._checks import as_bytes, check_extras, check_types
from trio_kafka.client._handles import BulkDelivery
from trio_kafka.client._producer_base import ProducerBase
from trio_kafka.errors import KafkaError, UnknownTopicError
from trio_kafka.producer import BatchSpan, ProducerRecord

_BYTES_OR_NONE = frozenset((bytes, type(None)))
_BULK_CHUNK = 8192
#: The size `_wait_for_room` is told when a chunk found no room (no one record's size).
RECORD_SIZE_UNKNOWN = -1


class SendManyMixin(ProducerBase):
    """`Producer.send_many` (and its one-`send()`-per-record form)."""

    async def send_many(
        self,
        records: Iterable[Any],
        *,
        topic: str | None = None,
        partition: int | None = None,
        keys: Sequence[bytes | None] | None = None,
    ) -> BulkDelivery:
        """Append many records in one call.

        With `topic`, `records` are values and go through the core's bulk append: far
        less work per record than `send()`. They are unkeyed and spread by the sticky
        partitioner, or with `partition=` all go to that partition, filling its batches
        to `batch_size` (then `keys=`, one key or None per value, gives them keys; they
        choose no partition). Without `topic`, `records` are `ProducerRecord`s. Returns a
        `BulkDelivery` (`await` it for the acknowledged count).
        """
        if topic is None:
            if partition is not None or keys is not None:
                raise TypeError("send_many: partition= and keys= go with topic= (values)")
            return await self._send_many_records(records, None)
        if keys is not None and partition is None:
            raise TypeError(
                "send_many: keys= needs partition= (without it, send keyed records with "
                "send() or as ProducerRecords, so the partitioner sees their keys)"
            )
        values = records if isinstance(records, list) else list(records)
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"send_many: {len(keys)} keys for {len(values)} values")
        if self._slow:
            return await self._send_many_records(values, topic, partition, keys)
        if self._txn is not None:
            self._txn.check_send()
        check_extras(None, partition, None)
        if not {*map(type, values)} <= _BYTES_OR_NONE:
            for value in values:
                check_types(value, None)
            values = as_bytes(values)  # bytearray, memoryview: copied, as send() does
        if keys is not None and not {*map(type, keys)} <= _BYTES_OR_NONE:
            for key in keys:
                check_types(b"", key)
            keys = as_bytes(keys)
        spans: list[BatchSpan] = []
        position = 0
        deadline = self._now() + self.config.max_block
        while position < len(values):
            if self._closing or self._sender.fatal_error is not None:
                self._refuse()
            end = position + _BULK_CHUNK
            chunk = values[position:end]
            try:
                new_spans, taken = self._core.append_many(
                    topic,
                    chunk,
                    self._now(),
                    partition=partition,
                    keys=None if keys is None else keys[position:end],
                )
            except UnknownTopicError:
                await self._wait_for_topic(topic, deadline)
                continue
            except KafkaError as exc:
                self._send_raised(topic, partition, exc)
                raise
            for span in new_spans:
                if span.start == 0:
                    self._opened(span.batch)
            spans.extend(new_spans)
            position += taken
            self._sender.wake()
            if taken < len(chunk):
                await self._wait_for_room(deadline, RECORD_SIZE_UNKNOWN, spans)
            else:
                # Shielded: the chunk is appended, and a trio cancellation here would
                # lose its spans (docs/asyncio.md: what cancelling send_many means).
                await anyio.lowlevel.cancel_shielded_checkpoint()
        return BulkDelivery(merge_spans(spans))

    async def _send_many_records(
        self,
        records: Iterable[Any],
        topic: str | None,
        partition: int | None = None,
        keys: Sequence[bytes | None] | None = None,
    ) -> BulkDelivery:
        spans: list[BatchSpan] = []
        for index, record in enumerate(records):
            if topic is None:
                if not isinstance(record, ProducerRecord):
                    raise TypeError(
                        f"send_many: record {index} is a {type(record).__name__}, not a "
                        "ProducerRecord: without topic=, records are ProducerRecords "
                        "(pass topic= to send values)"
                    )
                handle = await self.send(record)
            else:
                key = None if keys is None else keys[index]
                handle = await self.send(topic, record, key=key, partition=partition)
            if spans and spans[-1].batch is handle.batch and spans[-1].stop == handle.index:
                last = spans[-1]
                spans[-1] = BatchSpan(last.batch, last.start, handle.index + 1)
            else:
                spans.append(BatchSpan(handle.batch, handle.index, handle.index + 1))
        return BulkDelivery(spans)


def merge_spans(spans: list[BatchSpan]) -> list[BatchSpan]:
    """Join consecutive spans of the same batch (bulk chunks split them)."""
    merged: list[BatchSpan] = []
    for span in spans:
        if merged and merged[-1].batch is span.batch and merged[-1].stop == span.start:
            merged[-1] = BatchSpan(span.batch, merged[-1].start, span.stop)
        else:
            merged.append(span)
    return merged


__all__ = ["RECORD_SIZE_UNKNOWN", "SendManyMixin", "merge_spans"]
