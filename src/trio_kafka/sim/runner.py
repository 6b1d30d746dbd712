"""Run one seed of a workload: the whole simulated world, then the check.

Theory of operation
-------------------
`run_seed(workload, seed, profile=...)` is a pure function of its arguments (and the
code): under a seeded trio scheduler and a virtual clock (`determinism.run_seeded`) it
builds, all from `Draws(seed)`:

1. the fault plan (`FaultPlan.swarm`: this seed's own rate per kind; or, for a replay,
   exactly the given fault identities) and the run's one `FaultDecider`, shared by the
   network, the brokers' fault driver, the workload (COMPETING_INSTANCE) and the client's
   BUGGIFY hook, so one `FaultLog` has every fault that fired;
2. a `SimNetwork` and a 3-node mock-broker `Cluster` on the virtual clock, served over it
   (`ClusterFaults` adds kinds 9-12);
3. the workload against the real client (`open_producer` with the simulated transport,
   trio's virtual clock, a seeded generator, a virtual wall clock, and the run's
   `Harness`: the rules its decisions follow, `Rules()` unless the caller planted a bug
   with `rules=` (sim/mutants.py), and the BUGGIFY hook).

Phases: the workload runs while faults may fire (until `plan.fault_phase_end`); then the
run heals (no fault fires any more, crashed brokers come back, clogs run out) and the
final reads (read_committed and read_uncommitted, through `PartitionReader` over a fresh
connection) happen. All of it under the profile's virtual-time budget: running out is a
liveness violation. Then (`_results.finish`) `check(history, snapshot,
committed_reads=...)`, plus checks of our own: a read_uncommitted read returns exactly the
data records of the log; a history has operations, and they explain every record.

A run returns a `RunOutput` (`_results.py`): the picklable `SeedResult` summary (what the
CLI and the worker processes pass around) and, in process, the history, the check, the
fault log and the full trace (history, faults, network, reads) the determinism check
compares. This module executes the seed; `_results.py` builds what it comes to.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import trio

from trio_kafka.broker import Cluster, ClusterOptions
from trio_kafka.client import PartitionReader, Producer, open_producer
from trio_kafka.core import Harness, Rules
from trio_kafka.net import KafkaSelector, open_selector
from trio_kafka.sim._results import (
    EXCEPTION,
    NO_OPERATIONS,
    READ_MISMATCH,
    UNEXPLAINED_RECORDS,
    Outcome,
    RunOutput,
    SeedResult,
    finish,
)
from trio_kafka.sim._timers import VirtualClock, current_timers
from trio_kafka.sim.checker import Violation, ViolationKind
from trio_kafka.sim.cluster_faults import BROKER_PORT, ClusterFaults, broker_host
from trio_kafka.sim.determinism import run_seeded
from trio_kafka.sim.faults import (
    PROFILES,
    Buggify,
    FaultDecider,
    FaultIdentity,
    FaultKind,
    FaultPlan,
    Profile,
)
from trio_kafka.sim.history import History
from trio_kafka.sim.network import SimNetwork, open_sim_network
from trio_kafka.sim.rand import Draws
from trio_kafka.sim.workloads import RecordingContext, Workload, get_workload

#: Virtual wall clock of a run: 2023-11-14, plus trio's virtual seconds.
EPOCH = 1_700_000_000.0
BROKERS = 3

#: Client timeouts per profile: short enough that every record settles well within the
#: budget after the heal, long enough that a healthy request never times out.
PRODUCER_DEFAULTS: dict[str, dict[str, Any]] = {
    "lite": {
        "request_timeout": 2.0,
        "delivery_timeout": 12.0,
        "max_block": 10.0,
        "close_timeout": 10.0,
    },
    "standard": {
        "request_timeout": 5.0,
        "delivery_timeout": 40.0,
        "max_block": 30.0,
        "close_timeout": 30.0,
    },
}
_READ_TIMEOUT = 20.0
#: Seconds between the brokers' periodic ticks (`Cluster.tick_forever`'s interval).
_CLUSTER_TICK = 1.0
#: Scheduler rounds a run may take (an idempotent lite seed takes ~600): beyond, the run
#: is stuck at one virtual instant (tasks that keep rescheduling themselves without
#: waiting, so the virtual clock never jumps and the budget never runs out): a liveness
#: violation. (Each round runs at least one task step while tasks spin.)
MAX_ROUNDS = 400_000
LIVELOCK = "livelock"


@attrs.define(eq=False)
class _Context(RecordingContext):
    """The runner's `SimContext` (see workloads/_api.py)."""

    seed: int
    draws: Draws
    history: History
    profile: Profile
    fault_phase_end: float
    competing_instances: bool
    net: SimNetwork
    decider: FaultDecider
    bootstrap: str
    #: The rules (a planted bug's, or the client's own) and the BUGGIFY hook.
    harness: Harness
    producer_defaults: Mapping[str, Any]

    @property
    def rules(self) -> Rules:
        return self.harness.rules

    def open_producer(
        self, name: str = "p0", **options: Any
    ) -> contextlib.AbstractAsyncContextManager[Producer]:
        merged = {**self.producer_defaults, **options}
        return open_producer(
            self.bootstrap,
            transport=self.net.transport(name),
            rng=self.draws.rng("client.rng", name),
            wall_clock=_wall_clock,
            harness=self.harness,
            metrics_interval=0,
            **merged,
        )

    def open_selector(
        self, name: str, **options: Any
    ) -> contextlib.AbstractAsyncContextManager[KafkaSelector]:
        options.setdefault("request_timeout", self.producer_defaults.get("request_timeout", 5.0))
        return open_selector(
            self.bootstrap,
            transport=self.net.transport(name),
            rng=self.draws.rng("selector.rng", name),
            **options,
        )

    def wall_clock(self) -> float:
        return _wall_clock()

    def rng(self, name: str) -> Any:
        return self.draws.rng("workload.rng", name)

    def fires_competitor(self, site: str, *key: str | int) -> bool:
        return self.decider.fires(FaultKind.COMPETING_INSTANCE, site, *key, now=trio.current_time())

    def buggify(self, site: str) -> bool:
        hook = self.harness.buggify
        return hook is not None and hook(site)

    async def sleep(self, seconds: float) -> None:
        await current_timers().sleep(seconds)


def _wall_clock() -> float:
    return EPOCH + trio.current_time()


def _broker_clock(clock: VirtualClock) -> Callable[[], int]:
    """The brokers' wall clock in milliseconds (every request reads it): the virtual
    clock's time from `EPOCH`, as `trio.current_time()` would give it, minus two calls."""
    now = clock.current_time

    def broker_clock() -> int:
        return int((EPOCH + now()) * 1000)

    return broker_clock


def run_seed(
    workload: str | Workload,
    seed: int,
    *,
    profile: str | Profile = "lite",
    faults: Iterable[FaultIdentity] | None = None,
    rates: Mapping[FaultKind, float] | None = None,
    trace: bool = False,
    rules: Rules | None = None,
) -> RunOutput:
    """Run one seed (see the module doc). `faults`: replay with exactly these faults;
    `rates`: fixed rates per kind instead of the seed's swarm plan (tests, scenarios);
    `rules`: the rules the client follows (a planted bug's; default `Rules()`)."""
    spec = get_workload(workload) if isinstance(workload, str) else workload
    prof = PROFILES[profile] if isinstance(profile, str) else profile
    allowed = None if faults is None else frozenset(faults)
    started = time.perf_counter()
    out = Outcome()

    async def main(clock: VirtualClock) -> None:
        await _simulate(
            spec, seed, prof, allowed, rates, trace, Rules() if rules is None else rules, out
        )

    run_seeded(main, seed=seed)
    wall = time.perf_counter() - started
    return finish(spec, seed, prof, allowed is not None, out, wall, trace)


async def _simulate(
    spec: Workload,
    seed: int,
    profile: Profile,
    allowed: frozenset[FaultIdentity] | None,
    rates: Mapping[FaultKind, float] | None,
    trace: bool,
    rules: Rules,
    out: Outcome,
) -> None:
    draws = Draws(seed)
    if rates is None:
        plan = FaultPlan.swarm(draws, profile)
    else:
        plan = FaultPlan.fixed(rates, profile, fault_phase_end=profile.fault_phase)
    if allowed is not None:
        plan = plan.restricted_to(allowed)
    decider = FaultDecider(plan, draws)
    out.log = decider.log
    nonce = iter(range(1, 1 << 62))
    cluster = Cluster.create(
        BROKERS,
        # The virtual clock is years behind the real one: take any future timestamp.
        options=ClusterOptions(timestamp_after_max_ms=2**63 - 1),
        clock=_broker_clock(current_timers().clock),
        sasl_nonce=lambda: f"sim-nonce-{next(nonce)}",
    )
    out.cluster = cluster
    for name, partitions in spec.topics.items():
        cluster.create_topic(name, partitions, dict(spec.topic_configs.get(name, {})))
    bootstrap = ",".join(f"{broker_host(n)}:{BROKER_PORT}" for n in range(BROKERS))
    hook = Buggify(decider, trio.current_time) if plan.may_fire(FaultKind.BUGGIFY) else None
    watchdog = _Watchdog()
    timers = current_timers()
    timers.on_rounds(timers.rounds + MAX_ROUNDS, watchdog.trip)
    async with open_sim_network(draws, profile, decider=decider, trace=trace) as net:
        faults = ClusterFaults(cluster, net, decider)
        ctx = _Context(
            seed,
            draws,
            out.history,
            profile,
            plan.fault_phase_end,
            plan.may_fire(FaultKind.COMPETING_INSTANCE),
            net,
            decider,
            bootstrap,
            Harness(rules, hook),
            PRODUCER_DEFAULTS.get(profile.name, PRODUCER_DEFAULTS["standard"]),
        )
        _tick_cluster(net, cluster, trio.current_time())
        faults.start()
        phase = "workload"
        with trio.move_on_at(profile.budget) as budget:
            watchdog.scope = budget
            try:
                await spec.run(ctx)
                phase = "heal"
                await timers.sleep_until(max(trio.current_time(), plan.fault_phase_end))
                faults.heal()
                phase = "final reads"
                await _final_reads(net, spec, bootstrap, draws, out)
            except Exception as exc:
                out.extra.append(
                    (EXCEPTION, f"{phase} raised {type(exc).__name__}: {_first_line(exc)}")
                )
        if watchdog.tripped:
            out.extra.append(
                (
                    LIVELOCK,
                    f"more than {MAX_ROUNDS} scheduler rounds by virtual time "
                    f"{trio.current_time()!r} in the {phase} phase: tasks spin without "
                    "letting virtual time advance",
                )
            )
        elif budget.cancelled_caught:
            out.extra.append(
                (
                    ViolationKind.PENDING.value,
                    f"virtual-time budget of {profile.budget} s exhausted in the {phase} phase",
                )
            )
        out.virtual_time = trio.current_time()
        out.network_trace = net.trace_text()


def _tick_cluster(net: SimNetwork, cluster: Cluster, now: float) -> None:
    """`Cluster.tick_forever` on the network's timers (no task): the brokers' periodic
    work (transaction timeouts) every `_CLUSTER_TICK` virtual seconds."""
    cluster.state.tick()
    net.call_at(now + _CLUSTER_TICK, _tick_cluster, net, cluster, now + _CLUSTER_TICK)


class _Watchdog:
    """Cancels the run's budget scope when the timers' round alarm goes off
    (`MAX_ROUNDS`)."""

    def __init__(self) -> None:
        self.tripped = False
        self.scope: trio.CancelScope | None = None

    def trip(self) -> None:
        if not self.tripped and self.scope is not None:
            self.tripped = True
            self.scope.cancel()


def _first_line(exc: BaseException) -> str:
    """The first line of the exception, or of its first leaf for a group."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


async def _final_reads(
    net: SimNetwork, spec: Workload, bootstrap: str, draws: Draws, out: Outcome
) -> None:
    async with open_selector(
        bootstrap,
        transport=net.transport("reader"),
        rng=draws.rng("reader.rng"),
        request_timeout=2.0,
    ) as selector:
        for isolation, into in (
            ("read_committed", out.committed),
            ("read_uncommitted", out.uncommitted),
        ):
            reader = PartitionReader(selector, isolation, max_wait=0.05, timeout=_READ_TIMEOUT)
            for topic, partitions in sorted(spec.topics.items()):
                for p in range(partitions):
                    records = await reader.read_all(topic, p, start=0)
                    into[(topic, p)] = [(r.offset, r.value) for r in records]


def still_fails(
    workload: str | Workload,
    seed: int,
    profile: str | Profile,
    failure_class: str,
    *,
    rules: Rules | None = None,
) -> Callable[[tuple[FaultIdentity, ...]], bool]:
    """A `ddmin` predicate: does a replay with these faults (and `rules`) keep
    `failure_class`?"""

    def test(faults: tuple[FaultIdentity, ...]) -> bool:
        replay = run_seed(workload, seed, profile=profile, faults=faults, rules=rules).result
        return failure_class in replay.classes

    return test


__all__ = [
    "EXCEPTION",
    "LIVELOCK",
    "MAX_ROUNDS",
    "NO_OPERATIONS",
    "PRODUCER_DEFAULTS",
    "READ_MISMATCH",
    "UNEXPLAINED_RECORDS",
    "RunOutput",
    "SeedResult",
    "Violation",
    "run_seed",
    "still_fails",
]
