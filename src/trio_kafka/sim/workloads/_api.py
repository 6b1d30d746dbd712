"""The workload API: what a simulated workload receives and how it is registered.

A workload is `async def workload(ctx: SimContext) -> None`. It opens producers through
`ctx.open_producer(...)` (the real client, wired to the simulated network, the virtual
clock, a seeded generator, and the run's rules and BUGGIFY hook), performs operations,
and records each one in `ctx.history` (`ctx.track_send` does it for a `send()`). It
should keep sending during the fault phase (`ctx.fault_phase_end`, virtual seconds) and
return once every operation has settled; the runner then heals the cluster, reads every
partition back and checks the history against the brokers' logs. Values must be unique
in a run (`ctx.value(writer, n)`): the checker maps log records back to operations by
value.

Register it by name so `trio-kafka simulate --workload NAME` finds it:

    from trio_kafka.sim.workloads import SimContext, register

    @register("my-workload", topics={"orders": 3}, description="...")
    async def my_workload(ctx: SimContext) -> None:
        async with ctx.open_producer("p0") as producer:
            for n in range(20):
                await ctx.track_send(producer, "w0", "orders", ctx.value("w0", n))
            await producer.flush()

Randomness in a workload comes from `ctx.draws` (content-addressed: `ctx.draws.uniform(
"my-site", n)`) or `ctx.rng(name)`; never from `random`, `time` or `os`.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import attrs
import trio

from trio_kafka.client import Producer
from trio_kafka.core import DeliveryHandle, Rules
from trio_kafka.net import KafkaSelector
from trio_kafka.sim.faults import Profile
from trio_kafka.sim.history import Fail, History, Produce, outcome_from_delivery
from trio_kafka.sim.rand import Draws


class SimContext(Protocol):
    """What a workload receives (implemented by the runner)."""

    seed: int
    draws: Draws
    history: History
    profile: Profile
    #: Virtual time at which faults stop firing (the run then heals).
    fault_phase_end: float
    #: True when this run's plan may fire COMPETING_INSTANCE (a workload decides when).
    competing_instances: bool

    @property
    def rules(self) -> Rules:
        """The rules the run's client follows (a planted bug's, or `Rules()`): every
        producer `open_producer` opens has them; a client a workload builds itself takes
        them in a `Harness` (`BulkLoader(harness=Harness(ctx.rules))`)."""
        ...

    def open_producer(
        self, name: str = "p0", **options: Any
    ) -> contextlib.AbstractAsyncContextManager[Producer]:
        """A producer over the simulated network; `name` keys its connections' faults.
        `options` are `ProducerConfig` fields (the simulation's timeouts are defaults)."""
        ...

    def open_selector(
        self, name: str, **options: Any
    ) -> contextlib.AbstractAsyncContextManager[KafkaSelector]:
        """A bare `KafkaSelector` over the simulated network (for `BulkLoader`,
        `PartitionReader`...); `name` keys its connections' faults. `options` are
        `SelectorConfig` fields."""
        ...

    def wall_clock(self) -> float:
        """The run's virtual wall clock (seconds since the epoch), for record timestamps."""
        ...

    def rng(self, name: str) -> random.Random:
        """A generator seeded from (seed, name)."""
        ...

    def fires_competitor(self, site: str, *key: str | int) -> bool:
        """Whether fault COMPETING_INSTANCE fires at (site, key) now."""
        ...

    def buggify(self, site: str) -> bool:
        """The run's BUGGIFY hook (also passed to every producer)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """`trio.sleep(seconds)`, on the simulator's own timers when simulated (the same
        virtual time for a fraction of the cost: no cancel scope, no `Cancelled`)."""
        ...

    def value(self, writer: str, n: int) -> bytes:
        """The unique value of a writer's n-th record."""
        ...

    async def track_send(
        self,
        producer: Producer,
        writer: str,
        topic: str,
        value: bytes,
        *,
        partition: int | None = None,
        key: bytes | None = None,
        txn: str | None = None,
        retry_of: bytes | None = None,
    ) -> DeliveryHandle | None:
        """`producer.send(...)` recorded in the history: invoked now, completed when the
        record settles. Returns the handle, or None when `send` itself raised (then the
        operation is recorded as failed: nothing was appended). `retry_of`: this send
        is the application's retry of the record first sent as that value (`value` is
        the retry's own, new value); the checker then requires the attempts to land at
        most once between them."""
        ...


WorkloadFn = Callable[[SimContext], Awaitable[None]]


@attrs.frozen(slots=True)
class Workload:
    """A registered workload."""

    name: str
    run: WorkloadFn
    #: Topics to create before the run: name -> partition count.
    topics: Mapping[str, int] = attrs.field(factory=dict)
    #: Topic configs (name -> {config: value}), e.g. the CAS switch.
    topic_configs: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    description: str = ""


#: Registered workloads by name (registration order is listing order).
WORKLOADS: dict[str, Workload] = {}


def register(
    name: str,
    *,
    topics: Mapping[str, int],
    topic_configs: Mapping[str, Mapping[str, str]] | None = None,
    description: str = "",
) -> Callable[[WorkloadFn], WorkloadFn]:
    """Register `async def workload(ctx)` under `name` (see the module doc)."""

    def decorate(fn: WorkloadFn) -> WorkloadFn:
        existing = WORKLOADS.get(name)
        if existing is not None and existing.run is not fn:
            raise ValueError(f"workload {name!r} is already registered")
        WORKLOADS[name] = Workload(
            name, fn, dict(topics), dict(topic_configs or {}), description or (fn.__doc__ or "")
        )
        return fn

    return decorate


def get_workload(name: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        known = ", ".join(WORKLOADS) or "none"
        raise KeyError(f"no workload {name!r} (known: {known})") from None


async def record_send(
    history: History,
    producer: Producer,
    op: Produce,
) -> DeliveryHandle | None:
    """Invoke `op` in `history`, send it, complete it when it settles."""
    op_id = history.invoke(op, time=trio.current_time())
    try:
        handle = await producer.send(op.topic, op.value, key=op.key, partition=op.partition)
    except Exception as exc:
        history.complete(op_id, Fail(type(exc).__name__), time=trio.current_time())
        return None

    def settled(h: DeliveryHandle) -> None:
        outcome = h.outcome
        assert outcome is not None
        history.complete(op_id, outcome_from_delivery(outcome), time=trio.current_time())

    handle.add_done_callback(settled)
    return handle


class RecordingContext:
    """The part of a `SimContext` every implementation shares (the simulator's runner,
    and the chaos suite's real-socket context): the value scheme and the recorded send.
    Subclasses provide `history`."""

    history: History

    def value(self, writer: str, n: int) -> bytes:
        return f"{writer}-{n}".encode()

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)

    async def track_send(
        self,
        producer: Producer,
        writer: str,
        topic: str,
        value: bytes,
        *,
        partition: int | None = None,
        key: bytes | None = None,
        txn: str | None = None,
        retry_of: bytes | None = None,
    ) -> DeliveryHandle | None:
        return await record_send(
            self.history, producer, Produce(writer, topic, partition, value, key, txn, retry_of)
        )
