"""The sender loop never spins at one instant: every pass makes progress or sleeps until
virtual time moves (simulator seeds 885, 1378, 1398 and 1532 of the idempotent lite
workload found the livelock this guards against).

The bug: `ready(now)` computed a queued batch's expiry as `created + delivery_timeout -
now` and `expire(now)` as `created <= now - delivery_timeout`. For some floats the two
disagree (the sum rounds up to `now`, the difference rounds below `created`), so ready
said "expires now" (delay 0) while expire kept the batch, and the sender, whose leader
was unreachable, went round its loop forever at that instant.
"""

from __future__ import annotations

import math
import random
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_kafka.client._sender import Sender
from trio_kafka.core import ClusterView, Failed, ProducerConfig, ProducerCore
from trio_kafka.core._accumulator import ReadyResult
from trio_kafka.errors import BrokerConnectionError, DeliveryTimeoutError
from trio_kafka.net import ClusterMetadata, TrioClock
from trio_kafka.net._metadata import BrokerMetadata, PartitionMetadata, TopicMetadata

# From seed 885: CREATED + TIMEOUT rounds to a float from which subtracting TIMEOUT
# lands below CREATED.
CREATED = 3.3248333550692775
TIMEOUT = 12.0
EXPIRES = CREATED + TIMEOUT


def make_core(**options: Any) -> ProducerCore:
    config = ProducerConfig.from_kwargs(
        enable_idempotence=False, delivery_timeout=TIMEOUT, request_timeout=1.0, **options
    )
    return ProducerCore(config, random.Random(7), cluster=ClusterView.from_leaders({"t": [0]}))


def test_the_seed_885_instant_is_the_rounding_case() -> None:
    assert EXPIRES - TIMEOUT < CREATED


def test_a_batch_ready_says_expires_now_is_expired_at_that_instant() -> None:
    core = make_core()
    core.append("t", b"v", partition=0, now=CREATED)
    assert core.ready(math.nextafter(EXPIRES, -math.inf)).next_check_delay > 0
    assert len(core.expire(EXPIRES)) == 1
    assert core.ready(EXPIRES).next_check_delay == math.inf


@settings(max_examples=200, deadline=None)
@given(
    created=st.floats(0.0, 1e6),
    timeout=st.floats(1.5, 1e4),
    linger=st.floats(0.0, 0.5),
    step=st.sampled_from([-1, 0, 1]),
)
def test_after_expire_the_next_check_is_strictly_later(
    created: float, timeout: float, linger: float, step: int
) -> None:
    config = ProducerConfig(  # virtual seconds: no unit warnings
        enable_idempotence=False, delivery_timeout=timeout, request_timeout=1.0, linger=linger
    )
    core = ProducerCore(config, random.Random(7), cluster=ClusterView.from_leaders({"t": [0]}))
    core.append("t", b"v", partition=0, now=created)
    for now in (created + linger, created + timeout):
        if step:
            now = math.nextafter(now, step * math.inf)
        core.expire(now)
        delay = core.ready(now).next_check_delay
        # Either nothing to wait for, or a deadline a float clock can actually reach.
        assert delay == math.inf or now + delay > now


# -- the sender against a node it cannot connect to -----------------------------------


@attrs.define(eq=False)
class UnreachableSelector:
    """The selector surface the sender uses, for one node that never connects: the
    attempt hangs (`refuse=False`) or fails at once without a backoff (`refuse=True`)."""

    refuse: bool = False
    metadata: ClusterMetadata = attrs.field(
        factory=lambda: ClusterMetadata(
            brokers={0: BrokerMetadata(0, "broker0", 9092)},
            topics={"t": TopicMetadata("t", (PartitionMetadata("t", 0, leader=0),))},
            updated_at=0.0,
        )
    )
    rng: random.Random = attrs.field(factory=lambda: random.Random(7))
    attempts: int = 0

    async def connection(self, node_id: int) -> Any:
        self.attempts += 1
        if self.refuse:
            raise BrokerConnectionError(f"node {node_id}: refused")
        await trio.sleep_forever()

    def is_ready(self, node_id: int) -> bool:
        return False

    def retry_at(self, node_id: int) -> float:
        return -math.inf  # no backoff at all: the sender must still not spin

    async def refresh_metadata(self, topics: Any = ()) -> ClusterMetadata:
        return self.metadata


class CountingCore(ProducerCore):
    """Counts `ready()` calls (one per sender pass) per instant; fails a spinning test
    instead of hanging it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.passes: dict[float, int] = {}

    def ready(self, now: float) -> ReadyResult:
        self.passes[now] = self.passes.get(now, 0) + 1
        assert self.passes[now] < 50, f"the sender loops at {now!r}"
        return super().ready(now)


async def run_sender_until_expired(selector: UnreachableSelector) -> CountingCore:
    config = ProducerConfig.from_kwargs(
        enable_idempotence=False, delivery_timeout=TIMEOUT, request_timeout=1.0
    )
    core = CountingCore(config, random.Random(7), cluster=ClusterView.from_leaders({"t": [0]}))
    async with trio.open_nursery() as nursery:
        sender = Sender(core, selector, TrioClock(), nursery, lambda: None)  # type: ignore[arg-type]
        nursery.start_soon(sender.run)
        await trio.sleep_until(CREATED)
        assert trio.current_time() == CREATED
        handle = core.append("t", b"v", partition=0, now=CREATED)
        assert handle is not None
        sender.wake()
        await trio.sleep_until(EXPIRES + 1.0)
        assert isinstance(handle.outcome, Failed)
        assert isinstance(handle.outcome.error, DeliveryTimeoutError)
        nursery.cancel_scope.cancel()
    return core


async def test_a_hanging_connection_and_an_expiring_batch_do_not_spin(
    autojump_clock: trio.testing.MockClock,
) -> None:
    core = await run_sender_until_expired(UnreachableSelector(refuse=False))
    assert core.passes[EXPIRES] <= 2
    assert max(core.passes.values()) <= 3


async def test_a_connection_refused_at_once_does_not_spin(
    autojump_clock: trio.testing.MockClock,
) -> None:
    selector = UnreachableSelector(refuse=True)
    core = await run_sender_until_expired(selector)
    assert max(core.passes.values()) <= 3
    # The selector set no backoff: attempts are spaced by reconnect_backoff (0.05 s).
    assert 2 <= selector.attempts <= TIMEOUT / 0.05 + 2
