"""One iteration over `[start, end)` of a partition: `PartitionReader.read`'s answer.

It fetches through its reader one step at a time and keeps what it has not handed out
yet; its position, the end it resolves from the first answer, and its timeout without
progress are described in `_reader.py`'s theory of operation. It knows its reader only
as a `Fetcher` (what it calls of it), so this module does not import the reader.
"""

from __future__ import annotations

import collections
from typing import Protocol

import attrs

from trio_kafka.client._fetch import FetchResult
from trio_kafka.errors import ReadTimeoutError
from trio_kafka.net import KafkaSelector, sleep_until
from trio_kafka.records import Record


class Fetcher(Protocol):
    """What a `PartitionRead` uses of its `PartitionReader`."""

    @property
    def selector(self) -> KafkaSelector: ...

    @property
    def max_wait(self) -> float: ...

    @property
    def read_committed(self) -> bool: ...

    async def log_start_offset(
        self, topic: str, partition: int, *, timeout: float | None = None
    ) -> int: ...

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        end: int | None = None,
        max_wait: float | None = None,
        timeout: float | None = None,
    ) -> FetchResult: ...


@attrs.define(eq=False)
class PartitionRead:
    """An iteration over `[start, end)` of one partition (see `PartitionReader.read`)."""

    reader: Fetcher
    topic: str
    partition: int
    #: Requested bounds; resolved (None -> log start / log end) on the first step.
    start: int | None
    end: int | None
    timeout: float
    #: The next offset to fetch (None until the first step resolves `start`).
    position: int | None = attrs.field(default=None, init=False)
    # Fetched records not handed out yet (owned by this iteration).
    _buffer: collections.deque[Record] = attrs.field(factory=collections.deque, init=False)

    def __aiter__(self) -> PartitionRead:
        return self

    async def __anext__(self) -> Record:
        while not self._buffer:
            await self._step()
        return self._buffer.popleft()

    async def _step(self) -> None:
        """Fetch once; raise StopAsyncIteration at the end, ReadTimeoutError when no
        progress came within `timeout`."""
        reader = self.reader
        clock = reader.selector.clock
        deadline = clock.now() + self.timeout
        if self.position is None:
            if self.start is None:
                self.start = await reader.log_start_offset(
                    self.topic, self.partition, timeout=self.timeout
                )
            self.position = self.start
        while True:
            if self.end is not None and self.position >= self.end:
                raise StopAsyncIteration
            remaining = deadline - clock.now()
            asked = clock.now()
            # Until the end is known, ask without a long poll: an empty partition must
            # not cost max_wait.
            wait = reader.max_wait if self.end is not None else 0.0
            try:
                if remaining <= 0:
                    raise ReadTimeoutError("no progress")
                result = await reader.fetch(
                    self.topic,
                    self.partition,
                    self.position,
                    end=self.end,
                    max_wait=wait,
                    timeout=remaining,
                )
            except ReadTimeoutError as exc:
                raise ReadTimeoutError(
                    f"reading {self.topic}-{self.partition}: stuck at offset {self.position} "
                    f"for {self.timeout} s before the end {self.end} (is the high watermark, "
                    f"or the last stable offset, below it?): {exc}"
                ) from exc
            records = result.records
            if self.end is None:
                self.end = result.log_end(reader.read_committed)
                if self.end is None:  # an answer without bounds: ask again
                    await sleep_until(min(asked + reader.max_wait, deadline))
                    continue
                records = [r for r in records if r.offset < self.end]
            moved = result.next_offset > self.position
            self.position = max(self.position, result.next_offset)
            self._buffer.extend(records)
            if self._buffer:
                return
            if moved:
                deadline = clock.now() + self.timeout  # control batches, aborted records
                continue
            # Nothing new: the broker long-polled, or answered at once; wait out the rest
            # of max_wait either way so an early empty answer does not become a busy loop.
            await sleep_until(min(asked + wait, deadline))

    def __repr__(self) -> str:
        end = "log end" if self.end is None else self.end
        at = "not started" if self.position is None else f"at {self.position}"
        return (
            f"<PartitionRead [{self.topic}-{self.partition} [{self.start}, {end}), {at}, "
            f"{len(self._buffer)} buffered]>"
        )


__all__ = ["Fetcher", "PartitionRead"]
