"""Seeded trio runs are reproducible; the private trio hooks they rely on still exist."""

from __future__ import annotations

import os
import subprocess
import sys

import trio

from tests.conftest import REPO
from trio_kafka.sim._timers import VirtualClock
from trio_kafka.sim.determinism import check_trio_hooks, run_seeded
from trio_kafka.sim.rand import Draws


def test_trio_still_has_the_private_scheduler_hooks() -> None:
    # If this fails after a trio upgrade, the simulator can no longer promise that a seed
    # replays: pin trio or port determinism.py to the new hooks.
    check_trio_hooks()
    from trio._core import _run

    assert hasattr(_run, "_ALLOW_DETERMINISTIC_SCHEDULING")
    assert hasattr(_run._r, "seed")


async def _racers(clock: VirtualClock) -> str:
    order: list[str] = []

    async def racer(name: str) -> None:
        for i in range(5):
            await trio.sleep(0 if i % 2 else 0.001)
            order.append(name)

    async with trio.open_nursery() as nursery:
        for name in "abcdefgh":
            nursery.start_soon(racer, name)
    return f"{''.join(order)}@{trio.current_time():.3f}"


def _traces(seeds: range) -> list[str]:
    return [run_seeded(_racers, seed=seed) for seed in seeds]


def test_same_seed_same_schedule() -> None:
    assert _traces(range(30)) == _traces(range(30))


def test_different_seeds_explore_different_schedules() -> None:
    assert len(set(_traces(range(30)))) > 10


def test_virtual_time_is_virtual() -> None:
    async def sleeper(clock: VirtualClock) -> float:
        await trio.sleep(3600)
        return trio.current_time()

    assert run_seeded(sleeper, seed=1) == 3600


def test_schedules_match_across_processes_with_other_hash_seeds() -> None:
    code = (
        "from tests.sim.test_determinism import _traces;"
        "import hashlib;print(hashlib.sha256(repr(_traces(range(30))).encode()).hexdigest())"
    )
    digests = set()
    for hash_seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        digests.add(out.stdout.strip())
    import hashlib

    digests.add(hashlib.sha256(repr(_traces(range(30))).encode()).hexdigest())
    assert len(digests) == 1


def test_draws_are_content_addressed() -> None:
    a, b = Draws(7), Draws(7)
    # asking in another order, or asking other things in between, changes nothing
    first = [a.uniform("site", i) for i in range(100)]
    b.uniform("other", "x")
    second = [b.uniform("site", i) for i in reversed(range(100))][::-1]
    assert first == second
    assert all(0.0 <= x < 1.0 for x in first)
    assert Draws(8).uniform("site", 0) != a.uniform("site", 0)


def test_draws_have_the_advertised_ranges() -> None:
    d = Draws(3)
    ints = [d.randint(2, 5, "r", i) for i in range(2000)]
    assert set(ints) == {2, 3, 4, 5}
    hits = sum(d.chance(0.25, "c", i) for i in range(4000))
    assert 800 < hits < 1200
    assert not any(d.chance(0.0, "c", i) for i in range(100))
    assert d.rng("g", 1).random() == Draws(3).rng("g", 1).random()
