"""Apache Kafka 4.4 crashes: kill -9 and restart, one node behind the fault proxy and a
3-node cluster (replication factor 3, min.insync.replicas=2, acks=all).

One node: the idempotent workload through the proxy (its seeded schedule runs
meanwhile) while the node is killed with SIGKILL and started again on the same data
directory, twice (long tier: three times in 30 s) - what Tansu's restart test xfails
(a sequence gap across the restart, the fenced epoch bump) must pass here.

Cluster: the idempotent and the transactional workloads at once, the clients connected
straight to the nodes (the node kill is the fault). At 3 s the leader of the partitions
being written (Metadata: the leader of chaos-idem's partition 0) is killed, and started
again a second later; at 10 s the transaction coordinator of "tx-w0" (FindCoordinator),
mid-transaction, likewise. Nothing acknowledged may be lost or duplicated, per-key order
holds, committed transactions are whole and aborted ones invisible to read_committed,
and the idempotent producers stay alive (their epoch bump is accepted).

The transactional workloads run on transactions v1 (`KAFKA_TRANSACTION_VERSION`), as
they did when v2 could not commit on Kafka (Produce v11); v2 is shown by the short test
below and by the integration tier (tests/integration/test_transactions_real.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio

from tests.chaos._harness import (
    ChaosContext,
    ChaosReport,
    Target,
    assert_clean,
    chaos_run,
    kafka_target,
)
from tests.chaos._workloads import IDEMPOTENT_PARTITIONS, IDEMPOTENT_TOPIC, idempotent_keyed
from trio_kafka.client import create_topic, open_producer
from trio_kafka.net import KafkaSelector, open_selector
from trio_kafka.protocol.messages.find_coordinator import FindCoordinatorRequest
from trio_kafka.sim.workloads import transactional as sim_txn
from trio_kafka.testing import FaultProxy, KafkaNode, kafka_broker, kafka_cluster, run_schedule
from trio_kafka.testing import open_fault_proxy as open_proxy

#: See test_chaos.py: our producer's transactions work on Kafka's transactions v1 only.
KAFKA_TRANSACTION_VERSION = 1

IDEM_TOPICS = {IDEMPOTENT_TOPIC: IDEMPOTENT_PARTITIONS}
BOTH_TOPICS = {**IDEM_TOPICS, sim_txn.TOPIC: sim_txn.PARTITIONS}
LONG_SEEDS = list(range(101, 111))

#: One node: 10 s of faults, kill -9 at 2.5 s and 6 s (long: 30 s, three kills).
DURATION, KILLS = 10.0, (2.5, 6.0)
LONG_DURATION, LONG_KILLS = 30.0, (5.0, 13.0, 21.0)
#: The cluster: the leader killed at 3 s, the coordinator at 10 s, 16 s of workload
#: (long: 30 s, the leader again at 20 s).
CLUSTER_DURATION = 16.0
CLUSTER_LONG_DURATION = 30.0
DOWN = 1.0


async def _restart(node: KafkaNode, proxy: FaultProxy, why: str) -> None:
    """kill -9, `DOWN` s down, start again (waits until it is ready: about 5 s)."""
    proxy.note("kill-9", f"kafka node {node.node_id} ({why})")
    await trio.to_thread.run_sync(node.kill)
    await trio.sleep(DOWN)
    await trio.to_thread.run_sync(node.start)
    proxy.note("restart", f"kafka node {node.node_id}")


# -- one node behind the proxy -----------------------------------------------------------


def _kill_and_restart(
    node: KafkaNode, seed: int, duration: float, kills: tuple[float, ...]
) -> Callable[[FaultProxy], Awaitable[None]]:
    async def nemesis(proxy: FaultProxy) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: run_schedule(proxy, seed, duration=duration))
            elapsed = 0.0
            for at in kills:
                await trio.sleep(max(0.0, at - elapsed))
                started = trio.current_time()
                await _restart(node, proxy, "scheduled")
                elapsed = at + trio.current_time() - started

    return nemesis


def _node_restart_run(seed: int, duration: float, kills: tuple[float, ...], records: int) -> None:
    async def run() -> ChaosReport:
        async with kafka_target(seed, IDEM_TOPICS) as t:
            assert isinstance(t.kafka, KafkaNode)
            return await chaos_run(
                t,
                idempotent_keyed(records),
                name="idempotent-restart",
                seed=seed,
                duration=duration,
                topics=IDEM_TOPICS,
                nemesis=_kill_and_restart(t.kafka, seed, duration, kills),
                budget=120.0 + 2 * duration,
            )

    report = trio.run(run)
    assert report.faults.get("kill-9") == len(kills)
    assert report.result.counters.get("op.produce.ok", 0) > 0
    assert_clean(report)


# The long tier's: the quick tier's Kafka budget (about 90 s) goes to the cluster run,
# whose killed nodes restart from their data directories too.
@pytest.mark.chaos_long
@pytest.mark.parametrize("chaos_seed", [1], indirect=True)
def test_idempotent_across_kafka_kill_9_and_restart(chaos_seed: int) -> None:
    _node_restart_run(chaos_seed, DURATION, KILLS, 80)


@pytest.mark.chaos_long
@pytest.mark.parametrize("chaos_seed", LONG_SEEDS, indirect=True)
def test_idempotent_across_kafka_kill_9_and_restart_long(chaos_seed: int) -> None:
    _node_restart_run(chaos_seed, LONG_DURATION, LONG_KILLS, 300)


# -- the 3-node cluster ------------------------------------------------------------------


def _java_hash(text: str) -> int:
    """Java's String.hashCode (Kafka maps a transactional id to its coordinator's
    __transaction_state partition with it)."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h


async def _leader(selector: KafkaSelector, topic: str, partition: int) -> int:
    await selector.refresh_metadata([topic])
    meta = selector.metadata.partition(topic, partition)
    assert meta is not None, f"no metadata for {topic}-{partition}"
    return int(meta.leader)


async def _coordinator(selector: KafkaSelector, transactional_id: str) -> int:
    """The transaction coordinator of `transactional_id` (FindCoordinator v4)."""
    request = FindCoordinatorRequest(key_type=1, coordinator_keys=[transactional_id])
    for _ in range(50):
        try:
            node = selector.least_loaded_node()
            response = await selector.request(node, request, version=4, timeout=5.0)
        except Exception:  # a node just killed: ask another
            await trio.sleep(0.2)
            continue
        found = response.coordinators[0]
        if found.error_code == 0:
            return int(found.node_id)
        await trio.sleep(0.2)
    raise RuntimeError(f"no coordinator found for {transactional_id!r}")


def _cluster_nemesis(
    target: Target, kills: list[tuple[float, str]], done: trio.Event
) -> Callable[[FaultProxy], Awaitable[None]]:
    """At each (time, what): kill -9 and restart the leader of chaos-idem-0 ("leader")
    or the coordinator of tx-w0 ("coordinator"), one node down at a time (a kill waits
    for the previous node's restart); `done` is set after the last restart."""
    cluster = target.kafka
    assert cluster is not None and not isinstance(cluster, KafkaNode)

    async def nemesis(proxy: FaultProxy) -> None:
        async with open_selector(target.bootstrap, request_timeout=5.0) as selector:
            elapsed = 0.0
            for at, what in kills:
                await trio.sleep(max(0.0, at - elapsed))
                started = trio.current_time()
                if what == "leader":
                    node_id = await _leader(selector, IDEMPOTENT_TOPIC, 0)
                else:
                    node_id = await _coordinator(selector, "tx-w0")
                await _restart(cluster.node(node_id), proxy, what)
                elapsed = at + trio.current_time() - started
        done.set()

    return nemesis


def _both(records: int, nemesis_done: trio.Event) -> Callable[[ChaosContext], Awaitable[None]]:
    """Both workloads; the run ends once they are done and so are the kills (a restart
    on a loaded machine can take 15 s)."""
    idempotent = idempotent_keyed(records)

    async def run(ctx: ChaosContext) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(idempotent, ctx)
            nursery.start_soon(sim_txn.transactional, ctx)
        await nemesis_done.wait()

    return run


def _cluster_run(seed: int, duration: float, kills: list[tuple[float, str]]) -> ChaosReport:
    async def run() -> ChaosReport:
        with kafka_cluster(3, transaction_version=KAFKA_TRANSACTION_VERSION) as cluster:
            async with open_selector(cluster.bootstrap) as selector:
                for name, partitions in BOTH_TOPICS.items():
                    await create_topic(selector, name, partitions, cas=False)
            # Nobody connects through this proxy: it notes the kills for the report.
            async with open_proxy(cluster.nodes[0].bootstrap, seed=seed) as proxy:
                target = Target("kafka-3", proxy, kafka=cluster, direct=cluster.bootstrap)
                done = trio.Event()
                return await chaos_run(
                    target,
                    _both(int(duration * 10), done),
                    name="idempotent+transactional",
                    seed=seed,
                    duration=duration,
                    topics=BOTH_TOPICS,
                    profile="lite",
                    nemesis=_cluster_nemesis(target, kills, done),
                    budget=180.0 + 2 * duration,
                )

    report = trio.run(run)
    assert report.faults.get("kill-9") == len(kills), report.render()
    return report


@pytest.mark.parametrize("chaos_seed", [1], indirect=True)
def test_leader_and_coordinator_kill_9_on_a_3_node_cluster(chaos_seed: int) -> None:
    report = _cluster_run(chaos_seed, CLUSTER_DURATION, [(3.0, "leader"), (10.0, "coordinator")])
    assert report.result.counters.get("op.txn-commit.ok", 0) > 0
    assert_clean(report)


@pytest.mark.chaos_long
@pytest.mark.parametrize("chaos_seed", LONG_SEEDS, indirect=True)
def test_leader_and_coordinator_kill_9_on_a_3_node_cluster_long(chaos_seed: int) -> None:
    kills = [(3.0, "leader"), (11.0, "coordinator"), (20.0, "leader")]
    assert_clean(_cluster_run(chaos_seed, CLUSTER_LONG_DURATION, kills))


# -- transactions, minimal ---------------------------------------------------------------


async def _three_transactions(transaction_version: int) -> None:
    with kafka_broker(transaction_version=transaction_version) as node:
        async with open_selector(node.bootstrap) as selector:
            await create_topic(selector, "t", 1, cas=False)
        async with open_producer(node.bootstrap, transactional_id="x1") as producer:
            await producer.init_transactions()
            for n in range(3):
                async with producer.transaction():
                    await producer.send("t", b"v%d" % n, partition=0)


def test_a_producer_commits_transactions_in_a_row_on_kafka_transactions_v1() -> None:
    # Failed before EndTxn stayed at v4 on v1: Kafka bumped the epoch at the first
    # commit and answered the second transaction's AddPartitionsToTxn PRODUCER_FENCED.
    trio.run(_three_transactions, 1)


def test_a_producer_commits_transactions_on_kafka_transactions_v2() -> None:
    # Failed on every transactional write before Produce v12 (TRANSACTION_ABORTABLE: v11
    # is judged by v1 rules, so the partition was not in the transaction).
    trio.run(_three_transactions, 2)
