"""A producer's waits for topic metadata: the one a send makes for a topic it does not
know yet (`_wait_for_topic`), and `Producer.wait_for_topics`, which learns many topics
in one Metadata request before the first sends to them (each first send would wait a
round trip of its own, queued behind the Produce requests on the same connection).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

import anyio

from trio_kafka.client._producer_base import ProducerBase
from trio_kafka.errors import BrokerConnectionError
from trio_kafka.errors import UnknownTopicError as TopicNotFoundError
from trio_kafka.net import check_topic_name


class TopicCallsMixin(ProducerBase):
    """`wait_for_topics`, and the wait of a send for its topic."""

    async def wait_for_topics(
        self, topics: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, int]:
        """Learn the metadata of `topics` before sending to them, in one Metadata request
        for all those not known yet, then wait for each as `send()` would, for at most
        `timeout` seconds in all (default `max_block`). Returns each topic's partition
        count. Raises what a first `send()` to the topic would: `InvalidTopicError`,
        `UnknownTopicError` (a topic the brokers say does not exist),
        `BrokerConnectionError` (no broker answers).

        For a producer about to write to many topics: a first send to a topic waits for
        its metadata, one round trip per topic (as the Java client's `send()` does);
        this asks once for all of them."""
        if isinstance(topics, str | bytes):
            raise TypeError(
                f"topics must be an iterable of topic names, not a {type(topics).__name__} "
                f"({topics!r}): wait_for_topics([{topics!r}])"
            )
        names = list(dict.fromkeys(topics))
        for name in names:
            if not isinstance(name, str):
                raise TypeError(f"a topic name must be a str, not {type(name).__name__}: {name!r}")
        if self._closing or self._closed or self._sender.fatal_error is not None:
            self._refuse()
        wait = self.config.max_block if timeout is None else timeout
        deadline = self._now() + wait
        metadata = self.selector.metadata
        unknown = []
        for name in names:
            known = metadata.topic(name)
            if known is None or not known.is_usable:
                check_topic_name(name)
                unknown.append(name)
        if unknown:
            with anyio.move_on_after(wait) as scope:
                self._metadata_waits.add(scope)  # closing cancels it
                try:
                    # A failure is reported by the waits below, topic by topic.
                    with contextlib.suppress(BrokerConnectionError):
                        await self.selector.refresh_metadata(unknown)
                finally:
                    self._metadata_waits.discard(scope)
            if self._closing or self._closed:
                self._refuse()
        for name in names:
            await self._wait_for_topic(name, deadline)
        found = self.selector.metadata
        return {name: found.topics[name].partition_count for name in names}

    async def _wait_for_topic(self, topic: str, deadline: float) -> None:
        """Wait as a send that cannot be kept does (CAS, `send_many`, a transaction):
        behind the records kept for the topic (`_pending.py`), then for its metadata."""
        waiting = self._waiting.get(topic)
        if waiting is not None:
            await waiting.placed.wait()
        await self._wait_for_metadata(topic, deadline)

    async def _wait_for_metadata(self, topic: str, deadline: float) -> None:
        timeout = max(deadline - self._now(), 0.0)
        try:
            # Closing cancels this wait (as Java's close wakes a send in waitOnMetadata).
            with anyio.CancelScope() as scope:
                self._metadata_waits.add(scope)
                try:
                    await self.selector.wait_for_topic(topic, timeout=timeout)
                finally:
                    self._metadata_waits.discard(scope)
            if scope.cancelled_caught:
                self._refuse()
        except TopicNotFoundError as exc:
            # A bootstrap address is often also a metadata broker's: name each once.
            tried = ", ".join(
                dict.fromkeys(self.selector.node_address(n) for n in self.selector.node_ids)
            )
            raise TopicNotFoundError(f"{exc}. Brokers known: {tried}", topic=topic) from None
        self._sender.sync_metadata()


__all__ = ["TopicCallsMixin"]
