"""The chaos suite can fail: planted client bugs, built into the client here, are caught against real
brokers over real sockets.

Mutant `timeout-not-written` (sim/mutants.py) takes a request whose answer never
came as not written and resends its records with a new sequence. The nemesis drops the
broker's answers for 3 s (a blackhole towards the client: the requests are applied, their
responses lost), so every request of that spell times out after being applied. The real
producer keeps the sequence and the broker deduplicates the retry (the control run is
clean); the mutant writes each such record twice and the checker reports duplicates.
(The workload's producer with tight timeouts is left out: its records would expire
Ambiguous and meet the known epoch-bump bug of tests/chaos/test_zombie.py on Tansu.)

Mutant `load-resume-past-checkpoint` (the load pipeline's resume skips the row after
its last checkpoint) in the bulk-load workload: seed 2 crashes the loader's first run
about a second into the load, so the next run resumes from a checkpoint and, mutated,
skips the next row when it is in the same partition. The simulator's checker reports
the row lost and librdkafka's read_committed read finds it missing (the same seed
without the mutant is the quick tier's `test_bulk`, clean); seeds 4, 5 and 7 follow
when a seed's resumes happened to skip nothing. On Tansu a run whose lost rows are all
in aborted chunks (its known resume divergence, test_bulk_resume.py) does not count.
"""

from __future__ import annotations

import pytest
import trio

from tests.chaos import test_chaos
from tests.chaos._harness import chaos_run, mock_target, tansu_target
from tests.chaos._workloads import IDEMPOTENT_PARTITIONS, IDEMPOTENT_TOPIC, idempotent_keyed
from trio_kafka.core import Rules
from trio_kafka.sim import mutants as _mutants
from trio_kafka.sim.checker import ViolationKind
from trio_kafka.testing import FaultProxy

TOPICS = {IDEMPOTENT_TOPIC: IDEMPOTENT_PARTITIONS}
SEED = 5


async def _lose_answers(proxy: FaultProxy) -> None:
    await trio.sleep(1.0)
    proxy.blackhole("to-client")
    await trio.sleep(3.0)
    proxy.heal()


async def _run(broker: str, name: str, rules: Rules | None = None):  # type: ignore[no-untyped-def]
    target = mock_target(SEED, TOPICS) if broker == "mock" else tansu_target(SEED, TOPICS)
    async with target as t:
        return await chaos_run(
            t,
            idempotent_keyed(40, tight=False),
            name=name,
            seed=SEED,
            duration=5.0,
            topics=TOPICS,
            competing_instances=False,
            nemesis=_lose_answers,
            rules=rules,
        )


BROKERS = ["mock", pytest.param("tansu", marks=pytest.mark.tansu)]


@pytest.mark.parametrize("broker", BROKERS)
def test_lost_answers_are_deduplicated_by_the_real_producer(broker: str) -> None:
    report = trio.run(_run, broker, "lost-answers")
    print("\n" + report.render())
    assert report.result.counters.get("op.produce.ok", 0) > 0
    assert report.proxy_counts.get("blackholed.to-client", 0) > 0, "the nemesis hit nothing"
    assert not report.violations, report.render()


@pytest.mark.parametrize("broker", BROKERS)
def test_chaos_suite_catches_the_timeout_not_written_mutant(broker: str) -> None:
    rules = _mutants.planted(_mutants.TIMEOUT_NOT_WRITTEN)
    report = trio.run(_run, broker, "lost-answers+mutant", rules)
    print("\n" + report.render())
    assert ViolationKind.DUPLICATE in report.result.kinds, report.render()


#: Seeds whose first loader run crashes within the quick fault phase (so a run resumes).
#: A resume loses a row only when the row after the checkpoint is in the same partition
#: (half the time, with two), so, as the simulator's mutant hunt does, seeds run until
#: one catches the mutant. Seed 4 first: it caught it on both brokers in the runs of
#: 2026-11-26 (the quick seed's lost rows on Tansu were of an aborted chunk), one run
#: of the loader fewer than starting from the quick seed. On Tansu the four first seeds
#: all missed it once in a few runs (real time decides where a crash falls, and rows
#: lost from aborted chunks do not count there): four more seeds follow, and the test may
#: take up to ten minutes when the first ones miss.
MUTANT_SEEDS = (4, test_chaos.BULK_QUICK_SEED, 5, 7, 8, 9, 10, 11)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("broker", BROKERS)
def test_chaos_suite_catches_the_load_resume_past_checkpoint_mutant(broker: str) -> None:
    resumed = 0
    for seed in MUTANT_SEEDS:
        report = trio.run(
            test_chaos._bulk,
            broker,
            seed,
            test_chaos.QUICK,
            test_chaos.BULK_QUICK,
            "bulk+mutant",
            _mutants.planted(_mutants.LOAD_RESUME_PAST_CHECKPOINT),
        )
        print("\n" + report.render())
        resumed += report.runs.get("crashed", 0) + report.runs.get("failed", 0)
        # Rows lost only from aborted chunks are the shape of the fixed Tansu resume bug
        # (KNOWN_TANSU_RESUME), not this mutant's (it skips a committed row): not a catch.
        if (
            ViolationKind.LOST_WRITE in report.chaos.result.kinds
            and not report.resumed_past_aborted_chunk
        ):
            assert any("missing" in v for v in report.confluent.violations), report.render()
            return
    assert resumed > 0, "no run of the loader stopped, so none resumed"
    pytest.fail(f"mutant load-resume-past-checkpoint not caught by seeds {MUTANT_SEEDS}")
