"""Where one producer's time goes: 300,000 records of 100 B to Tansu, the README's way
(`await producer.send(topic, value)` for each, then `await handle` for each), split
into the send loop, the await loop and the close, with the process's CPU time and the
garbage collector's time (per generation, from `gc.callbacks`).

Not a comparison (that is `benchmarks/produce.py`): a tool for A/B runs of two checkouts
in the same minutes, e.g. `PYTHONPATH=/other/checkout/src python benchmarks/
profile_produce.py` beside a plain run. `--profile` adds a cProfile of the second round.
The rounds run in a child process that imports only the client (the broker helpers of
`trio_kafka.testing` stay in the parent), so the collector walks a user's heap.

`--backend asyncio` (or `uvloop`) runs the same rounds under `asyncio.run`.

`--floor` runs, before each round in the same process (the same heap, so the same
collector work), the floor of this API: a `send()` coroutine that appends the value to a
list and returns a two-field handle (a msgspec struct the collector does not track, as
the producer's own), and an `await handle` that builds the
`Acknowledged` from its batch, nothing else (no network, no encoding, no checks): what
any pure-Python producer with `handle = await send(...)` / `await handle` pays per
record on this interpreter, kept handles and the collector included.

    .venv/bin/python benchmarks/profile_produce.py [--records N] [--rounds R]
        [--record-form | --send-many] [--profile] [--backend trio|asyncio|uvloop] [--floor]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trio_kafka.client import Acknowledged, ProducerRecord, open_producer


class GcTimer:
    """Seconds spent in the garbage collector, and collections per generation."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.collections = [0, 0, 0]
        self.per_generation = [0.0, 0.0, 0.0]
        self._started = 0.0
        self._started_cpu = 0.0
        gc.callbacks.append(self._callback)

    def reset(self) -> None:
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.collections = [0, 0, 0]
        self.per_generation = [0.0, 0.0, 0.0]

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            self._started_cpu = time.process_time()
        else:
            spent = time.perf_counter() - self._started
            self.cpu_seconds += time.process_time() - self._started_cpu
            self.seconds += spent
            self.collections[info["generation"]] += 1
            self.per_generation[info["generation"]] += spent


async def one_round(
    bootstrap: str,
    topic: str,
    records: int,
    record_form: bool,
    gc_timer: GcTimer,
    send_many: bool = False,
) -> str:
    value = b"x" * 100
    gc_timer.reset()
    started, cpu = time.perf_counter(), time.process_time()
    async with open_producer(bootstrap) as producer:
        send = producer.send
        sent, sent_cpu = time.perf_counter(), time.process_time()
        handles: list[Any]  # RecordHandles, or one BulkDelivery
        if send_many:  # one call for all the values; every outcome known once awaited
            handles = [await producer.send_many([value] * records, topic=topic)]
        elif record_form:
            handles = [await send(ProducerRecord(topic, value)) for _ in range(records)]
        else:
            handles = [await send(topic, value) for _ in range(records)]
        awaited, awaited_cpu = time.perf_counter(), time.process_time()
        for handle in handles:
            await handle
        closing, closing_cpu = time.perf_counter(), time.process_time()
    ended, cpu = time.perf_counter(), time.process_time() - cpu
    return (
        f"{records / (ended - started):,.0f} records/s, CPU {cpu:.3f} s "
        f"({cpu / records * 1e6:.2f} us/record; send loop {awaited_cpu - sent_cpu:.3f} s, "
        f"await loop {closing_cpu - awaited_cpu:.3f} s); wall: send loop "
        f"{awaited - sent:.3f} s, await loop {closing - awaited:.3f} s, close "
        f"{ended - closing:.3f} s; GC {gc_timer.seconds:.3f} s (CPU "
        f"{gc_timer.cpu_seconds:.3f} s), collections per "
        f"generation {gc_timer.collections}, seconds per generation "
        f"[{', '.join(f'{s:.3f}' for s in gc_timer.per_generation)}]"
    )


class _FloorBatch:
    __slots__ = ("base_offset", "partition", "times", "topic", "values")

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.partition = 0
        self.base_offset = 0
        self.values: list[bytes] = []
        self.times = [1_700_000_000_000] * 4096


_new_tuple = tuple.__new__


class _FloorHandle(msgspec.Struct, gc=False):
    """Untracked by the collector, as the producer's handles are (core/_batch.py)."""

    batch: _FloorBatch
    index: int

    def __await__(self) -> Any:
        batch, index = self.batch, self.index
        return _new_tuple(
            Acknowledged,
            (batch.topic, batch.partition, batch.base_offset + index, batch.times[index]),
        )
        yield  # (a generator, as any __await__ written in Python)


class _FloorProducer:
    """The least a `send()` can do: append, make the handle; a new batch every 4,096."""

    def __init__(self, topic: str) -> None:
        self.batch = _FloorBatch(topic)

    async def send(self, topic: str, value: bytes) -> _FloorHandle:
        batch = self.batch
        values = batch.values
        index = len(values)
        values.append(value)
        if index == 4095:
            self.batch = _FloorBatch(topic)
        return _FloorHandle(batch, index)


async def floor_round(topic: str, records: int, gc_timer: GcTimer) -> str:
    """`one_round` against `_FloorProducer`: the floor of the API (module doc)."""
    value = b"x" * 100
    gc_timer.reset()
    cpu = time.process_time()
    send = _FloorProducer(topic).send
    handles = [await send(topic, value) for _ in range(records)]
    for handle in handles:
        await handle
    cpu = time.process_time() - cpu
    return (
        f"CPU {cpu:.3f} s ({cpu / records * 1e6:.2f} us/record), GC CPU "
        f"{gc_timer.cpu_seconds:.3f} s ({gc_timer.cpu_seconds / records * 1e6:.2f} us/record)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--record-form", action="store_true", help="send(ProducerRecord(...))")
    parser.add_argument(
        "--send-many", action="store_true", help="one send_many(values, topic=) call, awaited"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the second round")
    parser.add_argument("--backend", choices=("trio", "asyncio", "uvloop"), default="trio")
    parser.add_argument(
        "--floor", action="store_true", help="also the API's floor before each round"
    )
    parser.add_argument(
        "--bootstrap",
        help="run the rounds in this process against this broker (its topics profile-0, "
        "profile-1, ... must exist); without it they run in a child process against a "
        "fresh Tansu (module doc)",
    )
    args = parser.parse_args()
    if args.bootstrap is None:
        _parent(args)
        return
    run_on = _runner(args.backend)
    gc_timer = GcTimer()
    for round_ in range(args.rounds):
        topic = f"profile-{round_}"
        run = (args.bootstrap, topic, args.records, args.record_form, gc_timer, args.send_many)
        if args.floor:
            floor = run_on(floor_round, topic, args.records, gc_timer)
            print(f"round {round_} floor: {floor}", flush=True)
        if args.profile and round_ == 1:
            profiler = cProfile.Profile()
            line = profiler.runcall(run_on, one_round, *run)
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        else:
            line = run_on(one_round, *run)
        print(f"round {round_}: {line}", flush=True)


def _parent(args: argparse.Namespace) -> None:
    """Start Tansu and the rounds' topics here, and run the rounds in a child process
    that imports only the client, as a user's process does: `trio_kafka.testing` (the
    broker helpers, ~15,000 objects) would add to every full collection there, and the
    collector's share of a record is what this tool measures."""
    from produce import _create_topic

    from trio_kafka.testing import tansu_broker

    with tansu_broker() as broker:
        for round_ in range(args.rounds):
            _create_topic(broker.bootstrap, f"profile-{round_}")
        subprocess.run([sys.executable, *sys.argv, "--bootstrap", broker.bootstrap], check=True)


def _runner(backend: str) -> Callable[..., str]:
    """`trio.run`, or the same call on asyncio (uvloop's loop for "uvloop")."""
    if backend == "trio":
        return trio.run

    def run(fn: Callable[..., Any], *args: Any) -> str:
        factory = None
        if backend == "uvloop":
            import uvloop

            factory = uvloop.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            result: str = runner.run(fn(*args))
        return result

    return run


if __name__ == "__main__":
    main()
