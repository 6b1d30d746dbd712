"""Seeded runs over the simulated network replay byte for byte, and faults are content-addressed."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import attrs
import trio

from tests.conftest import REPO
from trio_kafka.sim._timers import VirtualClock
from trio_kafka.sim.determinism import run_seeded
from trio_kafka.sim.faults import STANDARD, FaultIdentity, FaultKind, FaultPlan
from trio_kafka.sim.network import SimNetwork, open_sim_network
from trio_kafka.sim.rand import Draws

#: Every network fault likely enough that a short run sees several.
NOISY = attrs.evolve(
    STANDARD,
    max_rates={
        **STANDARD.max_rates,
        FaultKind.LATENCY: 0.3,
        FaultKind.RESET_BEFORE_APPLY: 0.15,
        FaultKind.RESET_AFTER_APPLY: 0.15,
        FaultKind.BLACKHOLE_AFTER_APPLY: 0.1,
        FaultKind.ZOMBIE_REQUEST: 0.1,
        FaultKind.CONNECT_FAILURE: 0.3,
        FaultKind.CLOG: 0.6,
    },
    kind_off_probability=0.2,
    segment_size=700,
    fault_phase=20.0,
)
CLIENTS = 4
REQUESTS = 6


async def echo(stream: trio.abc.Stream) -> None:
    while data := await stream.receive_some():
        await stream.send_all(data)


async def _client(net: SimNetwork, i: int) -> None:
    """Each client has its own broker, so its fault keys depend only on its own history;
    it retries each request on a fresh connection after any failure."""
    transport = net.transport(f"c{i}")
    for r in range(REQUESTS):
        body = bytes([i, r]) * (150 + 90 * r)
        for _attempt in range(30):
            try:
                with trio.fail_after(2.0):
                    stream = await transport.connect(f"broker-{i}", 9092)
                    try:
                        await stream.send_all(body)
                        got = b""
                        while len(got) < len(body):
                            data = await stream.receive_some()
                            if not data:
                                raise trio.BrokenResourceError("eof")
                            got += data
                        assert got == body
                    finally:
                        await stream.aclose()
                break
            except (OSError, trio.BrokenResourceError, trio.TooSlowError):
                await trio.sleep(0.1)


def scenario(seed: int, plan: FaultPlan | None = None) -> tuple[str, tuple[FaultIdentity, ...]]:
    """(trace text, fault identities fired) of one seeded run."""
    out: list[tuple[str, tuple[FaultIdentity, ...]]] = []

    async def main(clock: VirtualClock) -> None:
        draws = Draws(seed)
        plan_ = plan if plan is not None else FaultPlan.swarm(draws, NOISY)
        async with open_sim_network(draws, NOISY, plan=plan_) as net:
            for i in range(CLIENTS):
                net.add_server(f"broker-{i}", 9092, echo)
            async with trio.open_nursery() as nursery:
                for i in range(CLIENTS):
                    nursery.start_soon(_client, net, i)
            text = net.trace_text() + "".join(f"{line}\n" for line in net.decider.log.lines())
            out.append((text, net.decider.log.identities()))

    run_seeded(main, seed=seed)
    return out[0]


def owner(identity: FaultIdentity) -> str:
    """Which client a fault belongs to ("" for network-wide faults like swizzle clogs)."""
    first = identity.key[0] if identity.key else ""
    return first if isinstance(first, str) and first.startswith("c") else ""


def test_same_seed_gives_a_byte_identical_trace() -> None:
    for seed in range(5):
        first, _ = scenario(seed)
        second, _ = scenario(seed)
        assert first == second
        assert len(first.splitlines()) > 50


def test_other_seeds_give_other_traces() -> None:
    traces = {scenario(seed)[0] for seed in range(6)}
    assert len(traces) == 6


def test_the_swarm_runs_see_every_network_fault_kind() -> None:
    kinds: set[FaultKind] = set()
    for seed in range(12):
        kinds |= {i.kind for i in scenario(seed)[1]}
    assert {k for k in FaultKind if k.is_network} <= kinds


def test_replaying_exactly_the_fired_faults_gives_the_same_trace() -> None:
    seed = 3
    trace, fired = scenario(seed)
    assert fired
    plan = FaultPlan.swarm(Draws(seed), NOISY).restricted_to(fired)
    assert scenario(seed, plan) == (trace, fired)


def test_removing_one_fault_leaves_the_other_clients_faults_unchanged() -> None:
    checked = 0
    for seed in range(10):
        _, fired = scenario(seed)
        owned = [i for i in fired if owner(i)]
        if len({owner(i) for i in owned}) < 2:
            continue
        dropped = owned[0]
        plan = FaultPlan.swarm(Draws(seed), NOISY).restricted_to(set(fired) - {dropped})
        _, refired = scenario(seed, plan)
        assert dropped not in refired
        others = [i for i in fired if owner(i) not in ("", owner(dropped))]
        assert [i for i in refired if owner(i) not in ("", owner(dropped))] == others
        # Network-wide clog episodes are keyed by episode number alone: unchanged, except
        # that a run which ends sooner offers fewer episodes.
        episodes = [i for i in refired if not owner(i)]
        assert episodes == [i for i in fired if not owner(i)][: len(episodes)]
        checked += 1
    assert checked >= 3


_CHILD = """
import hashlib, sys
sys.path.insert(0, {repo!r})
from tests.sim.test_network_determinism import scenario
print(hashlib.sha256("".join(scenario(s)[0] for s in range(4)).encode()).hexdigest())
"""


def test_traces_do_not_depend_on_the_hash_seed() -> None:
    here = hashlib.sha256("".join(scenario(s)[0] for s in range(4)).encode()).hexdigest()
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        child = subprocess.run(
            [sys.executable, "-c", _CHILD.format(repo=str(REPO))],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        )
        assert child.stdout.strip() == here
