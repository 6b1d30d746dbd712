"""The one leader call (net/_leader.py): find a partition's leader, refreshing the
metadata and backing off with the one backoff, for the CAS gate and the bulk loader's
sends alike; and the one idempotent InitProducerId loop (client/_producer_id.py)."""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from trio_kafka.client._cas import CasGate
from trio_kafka.client._producer_id import init_idempotent_producer_id
from trio_kafka.core import ExponentialBackoff
from trio_kafka.errors import BrokerConnectionError, CasNotSupportedError, KafkaError
from trio_kafka.net import SelectorConfig, send_to_leader
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdRequest

SEED = 5


class _Metadata:
    def __init__(self) -> None:
        self.leader = -1

    def partition(self, topic: str, partition: int) -> Any:
        return SimpleNamespace(leader=self.leader)

    def leader_for(self, topic: str, partition: int) -> Any:
        return object() if self.leader >= 0 else None


class _Selector:
    """What the leader call and InitProducerId use of a `KafkaSelector`: a partition
    whose leader appears after `leaderless` refreshes, the first `failing` of which
    raise."""

    def __init__(self, *, leaderless: int, failing: int = 0) -> None:
        self.config = SelectorConfig("b1:9092", retry_backoff=0.1, retry_backoff_max=1.0)
        self.rng = random.Random(SEED)
        self.clock = SimpleNamespace(now=trio.current_time)
        self.metadata = _Metadata()
        self.refreshes: list[float] = []
        self.leaderless, self.failing = leaderless, failing
        self.sent: list[Any] = []

    async def refresh_metadata(self, topics: Any = ()) -> None:
        self.refreshes.append(trio.current_time())
        if len(self.refreshes) <= self.failing:
            raise BrokerConnectionError("refresh failed")
        if len(self.refreshes) >= self.leaderless:
            self.metadata.leader = 1

    async def wait_for_topic(self, topic: str, timeout: float | None = None) -> Any:
        return SimpleNamespace(partition_count=1)

    async def connection(self, node: int) -> Any:
        return self

    def least_loaded_node(self) -> int:
        return 1

    def api_versions(self, node: int) -> Any:
        return SimpleNamespace(supports_cas=False, supported_features={})

    async def negotiated_versions(self, node: int | None = None) -> Any:
        return self.api_versions(1 if node is None else node)

    def node_address(self, node: int) -> str:
        return "b1:9092"

    async def send(self, request: Any, *, timeout: float) -> str:  # the connection's
        self.sent.append(request)
        return "pending"


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


async def test_a_cas_check_waits_for_a_leader_with_a_growing_jittered_backoff(
    autojump_clock: trio.testing.MockClock,
) -> None:
    selector = _Selector(leaderless=6)
    with pytest.raises(CasNotSupportedError):  # the leader was found, then checked
        await CasGate(selector).check("t", 0)  # type: ignore[arg-type]
    gaps = _gaps(selector.refreshes)
    first = ExponentialBackoff(0.1, 1.0).backoff(0, random.Random(SEED))
    assert len(gaps) == 5, f"seed {SEED}"
    assert gaps[0] == pytest.approx(first)
    assert gaps[-1] > 2 * gaps[0], f"seed {SEED}: not growing: {gaps}"


async def test_a_failed_refresh_while_finding_the_leader_is_tried_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    selector = _Selector(leaderless=3, failing=2)
    with pytest.raises(CasNotSupportedError):  # found after two failed refreshes
        await CasGate(selector).check("t", 0)  # type: ignore[arg-type]
    assert len(selector.refreshes) == 3


async def test_a_send_to_a_partition_that_never_gets_a_leader_is_refused_after_ten_tries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    selector = _Selector(leaderless=100)
    with pytest.raises(BrokerConnectionError, match="10 tries failed"):
        await send_to_leader(selector, "t", 0, "req", timeout=1.0)  # type: ignore[arg-type]
    assert len(selector.refreshes) == 10
    assert selector.sent == []


async def test_init_producer_id_sends_the_transaction_timeout_it_is_given(
    autojump_clock: trio.testing.MockClock,
) -> None:
    selector = _Selector(leaderless=0)

    async def request(request: Any, *, timeout: float) -> Any:
        selector.sent.append(request)
        return SimpleNamespace(error_code=0, producer_id=7, producer_epoch=0)

    connection = SimpleNamespace(
        api_versions={InitProducerIdRequest.API_KEY: 4}, request=request, host="b1", port=9092
    )

    async def connect(node: int) -> Any:
        return connection

    selector.connection = connect  # type: ignore[method-assign]
    got = await init_idempotent_producer_id(
        selector,  # type: ignore[arg-type]
        timeout=1.0,
        transaction_timeout=7.0,
        backoff=ExponentialBackoff(0.1, 1.0),
        attempts=20,
    )
    assert got == (7, 0)
    (request,) = selector.sent
    assert request.transactional_id is None
    assert request.transaction_timeout_ms == 7000


async def test_init_producer_id_gives_up_with_the_last_error_after_its_attempts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    selector = _Selector(leaderless=0)

    async def refused(node: int) -> Any:
        raise BrokerConnectionError("refused")

    selector.connection = refused  # type: ignore[method-assign]
    with pytest.raises(KafkaError, match="refused"):
        await init_idempotent_producer_id(
            selector,  # type: ignore[arg-type]
            timeout=1.0,
            transaction_timeout=60.0,
            backoff=ExponentialBackoff(0.1, 1.0),
            attempts=3,
        )
