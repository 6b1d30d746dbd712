"""The broker-side fault kinds (9-12) of a simulated run, on a mock-broker `Cluster`.

Theory of operation
-------------------
`ClusterFaults` owns the simulated brokers' presence on the `SimNetwork` and asks the
run's one `FaultDecider` (the network's) whether a broker fault fires. Every decision has
a stable identity, so a minimizer's replay (`FaultPlan.restricted_to`) fires exactly the
faults it keeps:

- BROKER_CRASH, on ticks: every `tick` virtual seconds of the fault phase each node is
  asked `fires(BROKER_CRASH, "tick", node, tick_no)`. A crash takes the node off the
  network (connects refused, its connections reset), cuts what it was serving
  (`Cluster.crash_node`: requests in flight get no answer), optionally loses the
  producer state of the partitions it leads (a restart without producer snapshots: the
  state is rebuilt from the log, as Kafka does, see `_rebuild_producer_state`), and
  brings it back after a restart delay. The delay and the state loss are parameters of
  the fault's identity, so they replay too;
- LEADER_CHANGE, on ticks, per partition: the leader moves to another node (the leader
  epoch goes up); clients keep their stale metadata until a broker tells them
  NOT_LEADER_OR_FOLLOWER;
- COORDINATOR_MOVE, on ticks: the transaction coordinator moves to another node;
- INJECTED_ERROR, per Produce partition: keyed by (topic, partition, producer id, epoch,
  base sequence, n) where n counts the times the broker saw that batch, so a retry is a
  new decision. NOT_ENOUGH_REPLICAS_AFTER_APPEND is injected after the append (the data
  *is* in the log, the client is told it is not); the others before it (the partition is
  left out of the request the handler sees, so nothing is written there). An after-append
  fault of an acks=all request answers, as Kafka's DelayedProduce can, one of
  NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT (the wait for the replicas timed
  out) or NOT_LEADER_OR_FOLLOWER (the leader stepped down while waiting), chosen by a
  parameter of the fault's identity (`AFTER_APPEND_CODES`).

After the fault phase every crashed node comes back (`heal`): the run then only has to
converge.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import attrs
import trio

from trio_kafka.broker import Cluster, HookCall, RequestContext
from trio_kafka.broker.handlers import produce as produce_handler
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from trio_kafka.records import decode_batches, parse_control_record, read_batch_header
from trio_kafka.sim.faults import INJECTABLE_ERRORS, FaultDecider, FaultKind
from trio_kafka.sim.network import SimNetwork

BROKER_PORT = 9092
_AFTER_APPEND = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
#: What Kafka may answer for a batch it appended under acks=all (see the docstring).
AFTER_APPEND_CODES = (_AFTER_APPEND, "REQUEST_TIMED_OUT", "NOT_LEADER_OR_FOLLOWER")


def broker_host(node_id: int) -> str:
    return f"broker-{node_id}"


@attrs.frozen(slots=True)
class ClusterFaultConfig:
    """How broker faults are paced (virtual seconds)."""

    #: Seconds between fault ticks (crash, leader change, coordinator move decisions).
    tick: float = 1.0
    #: A crashed broker restarts after a delay uniform in this range.
    restart_delay: tuple[float, float] = (0.2, 3.0)
    #: Probability that a crash loses the producer state of the partitions it leads.
    lose_producer_state: float = 0.3


@attrs.define(eq=False)
class ClusterFaults:
    """Kinds 9-12 for one run: see the module doc."""

    cluster: Cluster
    net: SimNetwork
    decider: FaultDecider
    config: ClusterFaultConfig = ClusterFaultConfig()
    #: Nodes currently down (crashed, not yet restarted), in crash order.
    down: dict[int, None] = attrs.field(factory=dict)
    #: Times the broker saw each (topic, partition, pid, epoch, base sequence).
    _seen: dict[tuple[str, int, int, int, int], int] = attrs.field(factory=dict)
    #: Requests (by id, never rendered) whose partitions get an after-append error, and
    #: which (a name of `AFTER_APPEND_CODES`) by (topic, partition).
    _after: dict[int, dict[tuple[str, int], str]] = attrs.field(factory=dict)

    def start(self) -> None:
        for node in self.cluster.state.node_ids:
            self.cluster.state.endpoints[node] = (broker_host(node), BROKER_PORT)
            self._up(node)
        if self.decider.plan.may_fire(FaultKind.INJECTED_ERROR):
            self.cluster.add_hook(ProduceRequest, self._before)
            self.cluster.add_hook(ProduceRequest, self._after_append, after=True)
        # Ticks are the network's timers, not a task: whether a tick fault can fire
        # changes no task's schedule, so a replay with a restricted fault set schedules
        # its tasks like the run it replays.
        self.net.call_at(self.config.tick, self._tick, 1)

    def _up(self, node: int) -> None:
        self.net.add_server(
            broker_host(node), BROKER_PORT, functools.partial(self.cluster.serve_stream, node)
        )

    # -- ticks -------------------------------------------------------------------------

    def _tick(self, tick_no: int) -> None:
        """Tick `tick_no` (at `tick_no * tick` virtual seconds): the decisions of kinds
        9-11, then the next tick, until the fault phase ends."""
        now = trio.current_time()
        if now >= self.decider.plan.fault_phase_end:
            return
        nodes = self.cluster.state.node_ids
        fires = self.decider.fires
        for node in nodes:
            if node not in self.down and fires(
                FaultKind.BROKER_CRASH, "tick", node, tick_no, now=now
            ):
                self._crash(node, tick_no)
        for name in sorted(self.cluster.state.topics):
            for part in self.cluster.state.topics[name].partitions:
                key = (name, part.index, tick_no)
                if fires(FaultKind.LEADER_CHANGE, "tick", *key, now=now):
                    u = self.decider.param(FaultKind.LEADER_CHANGE, "to", "tick", *key)
                    self.cluster.move_leader(name, part.index, _other(nodes, part.leader, u))
        if fires(FaultKind.COORDINATOR_MOVE, "tick", tick_no, now=now):
            u = self.decider.param(FaultKind.COORDINATOR_MOVE, "to", "tick", tick_no)
            current = self.cluster.state.txn_coordinator
            self.cluster.move_transaction_coordinator(_other(nodes, current, u))
        self.net.call_at((tick_no + 1) * self.config.tick, self._tick, tick_no + 1)

    def _crash(self, node: int, tick_no: int) -> None:
        param = functools.partial(self.decider.param, FaultKind.BROKER_CRASH)
        lose = param("lose", "tick", node, tick_no) < self.config.lose_producer_state
        low, high = self.config.restart_delay
        delay = low + (high - low) * param("delay", "tick", node, tick_no)
        self.down[node] = None
        self.net.remove_server(broker_host(node), BROKER_PORT)
        self.cluster.crash_node(node, lose_producer_state=lose)
        if lose:
            self._rebuild_producer_state(node)
        self.net.call_at(trio.current_time() + delay, self.restart, node)

    def _rebuild_producer_state(self, node: int) -> None:
        """A restart without producer snapshots: Kafka rebuilds the producer state from
        the log (`LogLoader` scans the segments), so what survives is exactly what the
        stored batches say: the last batches of each producer and epoch, and the epochs
        markers carried. State that no stored batch backs (an epoch bumped without a
        write since) is lost. Forgetting producers whose batches are still in the log
        would go beyond what Kafka does and make the dedup window lie."""
        for topic in self.cluster.state.topics.values():
            for part in topic.partitions:
                if part.leader != node:
                    continue
                for stored in part.log.batches:
                    if stored.producer_id < 0:
                        continue
                    if stored.is_control:
                        for batch in decode_batches(stored.data):
                            for record in batch.records:
                                marker = parse_control_record(record)
                                part.producers.record_marker(
                                    stored.producer_id,
                                    stored.producer_epoch,
                                    marker.coordinator_epoch,
                                )
                        continue
                    header = read_batch_header(stored.data)
                    part.producers.record(
                        stored.producer_id,
                        stored.producer_epoch,
                        header.base_sequence,
                        first_offset=stored.base_offset,
                        last_offset=stored.last_offset,
                        now_ms=stored.max_timestamp,
                    )

    def restart(self, node: int) -> None:
        if node in self.down:
            del self.down[node]
            self._up(node)

    def heal(self) -> None:
        """Bring every crashed node back now."""
        for node in list(self.down):
            self.restart(node)

    # -- injected errors ---------------------------------------------------------------

    def _decide(self, topic: str, pdata: PartitionProduceData, acks: int) -> str | None:
        """The error code name injected into this partition of this request, if any
        (one of `AFTER_APPEND_CODES`: answered after the append)."""
        if not pdata.records:
            return None
        try:
            header = read_batch_header(pdata.records)
        except Exception:
            return None  # a corrupt batch is the handler's business
        key5 = (topic, pdata.index, header.producer_id, header.producer_epoch, header.base_sequence)
        n = self._seen.get(key5, 0)
        self._seen[key5] = n + 1
        key = (*key5, n)
        if not self.decider.fires(
            FaultKind.INJECTED_ERROR, "produce", *key, now=trio.current_time()
        ):
            return None
        u = self.decider.param(FaultKind.INJECTED_ERROR, "code", "produce", *key)
        code = INJECTABLE_ERRORS[min(int(u * len(INJECTABLE_ERRORS)), len(INJECTABLE_ERRORS) - 1)]
        if code == _AFTER_APPEND and acks == -1:
            u = self.decider.param(FaultKind.INJECTED_ERROR, "after-code", "produce", *key)
            code = AFTER_APPEND_CODES[min(int(u * 3), 2)]
        return code

    def _before(self, call: HookCall) -> Any:
        request = call.request
        if not isinstance(request, ProduceRequest) or request.acks == 0:
            return None
        injected: list[tuple[str, int, str]] = []
        refused: set[int] = set()  # ids of the partitions' data that get an error instead
        after: dict[tuple[str, int], str] = {}
        for topic_data in request.topic_data:
            for pdata in topic_data.partition_data:
                code = self._decide(topic_data.name, pdata, request.acks)
                if code in AFTER_APPEND_CODES:
                    after[(topic_data.name, pdata.index)] = code
                elif code is not None:
                    injected.append((topic_data.name, pdata.index, code))
                    refused.add(id(pdata))
        if after:
            self._after[id(request)] = after
        if not injected:
            return None  # the usual case: the request goes to the handler as it is
        kept_topics: list[TopicProduceData] = []
        for topic_data in request.topic_data:
            kept = [p for p in topic_data.partition_data if id(p) not in refused]
            if kept:
                kept_topics.append(attrs.evolve(topic_data, partition_data=kept))
        # Apply the rest ourselves (the hook's answer replaces the handler's run).
        state = self.cluster.state
        state.tick()
        ctx = RequestContext(state, call.node_id, call.header)
        response = produce_handler.handle(ctx, attrs.evolve(request, topic_data=kept_topics))
        topics = {t.name: list(t.partition_responses) for t in response.responses}
        for name, index, code in injected:
            topics.setdefault(name, []).append(
                PartitionProduceResponse(
                    index=index,
                    error_code=ErrorCode[code],
                    base_offset=-1,
                    error_message=f"simulated {code}",
                )
            )
        answer = ProduceResponse(
            responses=[
                TopicProduceResponse(name=n, partition_responses=p) for n, p in topics.items()
            ]
        )
        after_result = self._after_append(HookCall(call.node_id, call.header, request, answer))
        return answer if after_result is None else after_result

    def _after_append(self, call: HookCall) -> Any:
        after = self._after.pop(id(call.request), None)
        response = call.response
        if not after or not isinstance(response, ProduceResponse):
            return None
        return ProduceResponse(
            throttle_time_ms=response.throttle_time_ms,
            responses=[
                attrs.evolve(
                    t,
                    partition_responses=[
                        _after_append(t.name, p, after) for p in t.partition_responses
                    ],
                )
                for t in response.responses
            ],
        )


def _after_append(
    topic: str, p: PartitionProduceResponse, after: dict[tuple[str, int], str]
) -> PartitionProduceResponse:
    code = after.get((topic, p.index))
    if code is None or p.error_code != ErrorCode.NONE:
        return p
    return attrs.evolve(
        p,
        error_code=ErrorCode[code],
        base_offset=-1,
        error_message=f"simulated {code} (the batch was appended)",
    )


def _other(nodes: Sequence[int], current: int, u: float) -> int:
    """Another node than `current`, chosen by `u` in [0, 1)."""
    others = [n for n in nodes if n != current] or list(nodes)
    return others[min(int(u * len(others)), len(others) - 1)]
