"""Asking a partition's leader, safely repeated: the one leader call. Whatever sends to a
partition's leader outside the producer's own sender (the CAS gate, the CAS load, the
partition reader) goes through it.

`retrying` is the one "refresh the metadata, back off, try again" loop: an attempt that
another attempt may get past raises `Retry`, saying whether to refresh the metadata
first; the loop backs off with the one backoff (`ExponentialBackoff`, the selector's
`retry_backoff` and `retry_backoff_max`, jittered by its rng) until the attempt returns,
`timeout` passes or `attempts` have failed. `leader_node` is the one test of "the
partition has a leader we can reach"; `find_leader` waits for one, and `send_to_leader`
sends a request to it (the bulk loader's CAS writes). `CasGate` finds the leader it
checks with `find_leader`, and the partition reader runs its calls through `retrying`.

The partition reader's leader calls are here too: `leader_of` (waiting for the topic
first) and `ask` (send and wait; connection trouble is a `Retry`, since reads change
nothing). Which answer codes refresh and which only back off is the reader's
(client/_reader.py `check_code`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from trio_kafka.core import ExponentialBackoff
from trio_kafka.errors import (
    BrokerConnectionError,
    ConnectionLostError,
    ErrorCode,
    InvalidPartitionError,
    KafkaError,
    ReadTimeoutError,
    RequestTimeoutError,
    error_for_code,
)
from trio_kafka.net._clock import primitives
from trio_kafka.net._metadata import PartitionMetadata, TopicMetadata
from trio_kafka.net._selector import KafkaSelector

_T = TypeVar("_T")


class Retry(Exception):
    """This attempt failed in a way that another attempt may not (refresh the metadata
    first when `refresh`)."""

    def __init__(self, error: BaseException, *, refresh: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.refresh = refresh


async def retrying(
    selector: KafkaSelector,
    topic: str,
    attempt: Callable[[], Awaitable[_T]],
    *,
    what: str,
    timeout: float | None = None,
    attempts: int | None = None,
    backoff: ExponentialBackoff | None = None,
    exhausted: Callable[[str], KafkaError] = ReadTimeoutError,
) -> _T:
    """`attempt()` until it returns or raises for real. A `Retry` refreshes the metadata
    of `topic` when it asks to (a failed refresh is the next attempt's problem), backs
    off (`backoff`, default the selector's `retry_backoff`), and tries again. Gives up
    with `exhausted(message)` once `timeout` seconds have passed or `attempts` tries
    have failed (None: no such bound)."""
    if backoff is None:
        backoff = ExponentialBackoff.of(selector.config)
    deadline = selector.clock.now() + timeout if timeout is not None else float("inf")
    failures = 0
    last: BaseException | None = None
    with primitives().scope(deadline=deadline):
        while attempts is None or failures < attempts:
            try:
                return await attempt()
            except Retry as retry:
                last = retry.error
                refresh = retry.refresh
            if refresh:
                try:
                    await selector.refresh_metadata([topic])
                except KafkaError as exc:
                    last = exc
            await anyio.sleep(backoff.backoff(failures, selector.rng))
            failures += 1
    bound = f"no answer within {timeout} s" if failures != attempts else f"{failures} tries failed"
    raise exhausted(
        f"{what}: {bound}" + (f"; last error: {last}" if last is not None else "")
    ) from last


def leader_node(selector: KafkaSelector, topic: str, partition: int) -> int:
    """The partition's leader in the selector's metadata, a broker we know the address
    of; `Retry` (refresh first) when there is none."""
    meta = selector.metadata.partition(topic, partition)
    if meta is None or meta.leader < 0 or selector.metadata.leader_for(topic, partition) is None:
        raise Retry(
            error_for_code(
                ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader now"
            ),
            refresh=True,
        )
    return meta.leader


async def find_leader(
    selector: KafkaSelector,
    topic: str,
    partition: int,
    *,
    attempts: int = 10,
    backoff: ExponentialBackoff | None = None,
) -> int:
    """The partition's leader node, refreshing the metadata and backing off while it has
    none; `BrokerConnectionError` after `attempts` tries (nothing was sent)."""

    async def attempt() -> int:
        return leader_node(selector, topic, partition)

    return await retrying(
        selector,
        topic,
        attempt,
        what=f"finding the leader of {topic}-{partition}",
        attempts=attempts,
        backoff=backoff,
        exhausted=BrokerConnectionError,
    )


async def send_to_leader(
    selector: KafkaSelector,
    topic: str,
    partition: int,
    request: Any,
    *,
    timeout: float,
    attempts: int = 10,
    backoff: ExponentialBackoff | None = None,
) -> Any:
    """Send `request` to the leader of `topic`-`partition` without waiting for the answer
    (returns the pending response), finding the leader with `find_leader`. No leader
    after `attempts` tries, or a connection that cannot be made, raises
    `BrokerConnectionError` (nothing left: safe to resend)."""
    leader = await find_leader(selector, topic, partition, attempts=attempts, backoff=backoff)
    connection = await selector.connection(leader)
    return await connection.send(request, timeout=timeout)


async def leader_of(
    selector: KafkaSelector, topic: str, partition: int, timeout: float
) -> tuple[int, PartitionMetadata]:
    """The partition's leader node and metadata, waiting for the topic if needed."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"partition must be an int, not {type(partition).__name__} ({partition!r})")
    metadata = selector.metadata
    found: TopicMetadata | None = metadata.topic(topic)
    selector.touch([topic])  # read or written: its metadata is kept (metadata_max_idle)
    if found is None or not found.is_usable:
        try:
            found = await selector.wait_for_topic(topic, timeout=timeout)
        except BrokerConnectionError as exc:
            raise Retry(exc, refresh=False) from exc
    meta = selector.metadata.partition(topic, partition)
    if meta is None:  # added since our snapshot? Look once more before giving up.
        try:
            found = (await selector.refresh_metadata([topic])).topic(topic) or found
        except BrokerConnectionError as exc:
            raise Retry(exc, refresh=False) from exc
        meta = selector.metadata.partition(topic, partition)
    if meta is None:
        raise InvalidPartitionError(
            f"{topic} has no partition {partition} (it has {found.partition_count})"
        )
    return leader_node(selector, topic, partition), meta


async def ask(
    selector: KafkaSelector,
    node: int,
    request: Any,
    *,
    version: int | None = None,
    extra: float = 0.0,
) -> Any:
    """Send and wait; connection trouble becomes a retry (reads are safe to repeat)."""
    timeout = selector.config.request_timeout + extra
    try:
        return await selector.request(node, request, version=version, timeout=timeout)
    except (BrokerConnectionError, ConnectionLostError, RequestTimeoutError) as exc:
        raise Retry(exc, refresh=True) from exc
    except KeyError as exc:  # the node left the metadata between lookup and send
        raise Retry(KafkaError(str(exc)), refresh=True) from exc


__all__ = [
    "Retry",
    "ask",
    "find_leader",
    "leader_node",
    "leader_of",
    "retrying",
    "send_to_leader",
]
