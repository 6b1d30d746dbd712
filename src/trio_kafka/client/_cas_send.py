"""`Producer.send(..., expected_offset=N)`: a CAS write, checked (`cas_gate`, see
`_cas.py`), then appended as a batch of its own that must land at offset N. `send()`
hands it over before its fast path; everything else is the producer's slow path with
the expectation passed to the core.
"""

from __future__ import annotations

from typing import Any

from trio_kafka.client._cas import cas_gate
from trio_kafka.client._checks import check_extras, check_types, record_fields
from trio_kafka.client._handles import RecordHandle
from trio_kafka.client._producer_base import ProducerBase
from trio_kafka.errors import ConfigError, UnknownTopicError
from trio_kafka.producer import Headers, ProducerRecord


class ConditionalSendMixin(ProducerBase):
    """The CAS form of `Producer.send` (`expected_offset=`)."""

    async def _send_conditional(
        self,
        topic: str | ProducerRecord,
        value: Any,
        key: Any,
        headers: Headers | None,
        partition: int | None,
        timestamp: int | None,
        expected_offset: int,
    ) -> RecordHandle:
        """`send(..., expected_offset=N)`: checked, then appended as a batch of its own
        that must land at offset N (see client/_cas.py)."""
        if topic.__class__ is not str:
            topic, value, key, headers, partition, timestamp = record_fields(
                topic, value, key, headers, partition, timestamp
            )
        if partition is None:
            raise ConfigError(
                f"expected_offset={expected_offset} needs partition=: an expected offset only "
                "means something within one partition (the partitioner cannot choose it)"
            )
        if isinstance(expected_offset, bool) or not isinstance(expected_offset, int):
            raise ConfigError(f"expected_offset must be an int, not {expected_offset!r}")
        if expected_offset < 0:
            raise ConfigError(
                f"expected_offset={expected_offset} is not an offset: pass the offset (>= 0) "
                "the record must land at, or leave expected_offset out"
            )
        if self._closing or self._sender.fatal_error is not None:
            self._refuse()
        if self._txn is not None:
            self._txn.check_send()  # a transactional producer: only inside a transaction
        if self._slow:
            topic, value, key, headers, _, timestamp = self._prepare(
                topic, value, key, headers, partition, timestamp
            )
        else:
            check_types(value, key)
        headers = check_extras(headers, partition, timestamp)
        deadline = self._now() + self.config.max_block
        await cas_gate(self.selector).check(
            topic, partition, timeout=max(deadline - self._now(), 0.0)
        )
        size = len(value or b"") + len(key or b"")
        await self._checkpoint()  # before the append (see the module doc)
        while True:
            if self._closing or self._sender.fatal_error is not None:
                self._refuse()
            try:
                handle = self._core.append(
                    topic, value, key, headers, partition, timestamp, self._now(), expected_offset
                )
            except UnknownTopicError:
                await self._wait_for_topic(topic, deadline)
                continue
            if handle is not None:
                break
            await self._wait_for_room(deadline, size, None)
        if handle.index == 0:
            self._opened(handle.batch)
        self._calls += 1
        return handle  # type: ignore[return-value]  # the core makes RecordHandles


__all__ = ["ConditionalSendMixin"]
