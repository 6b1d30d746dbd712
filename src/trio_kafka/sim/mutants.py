"""Planted client bugs (mutants) and the search for them: does the simulator catch each,
and how fast?

Theory of operation
-------------------
The simulator must catch known client bugs: if it does not, its faults or its checker
are too weak (the kill rate, as in mutation testing). Each mutant breaks one rule of
`trio_kafka.core.Rules` (the client's decisions where a wrong rule loses,
duplicates, reorders or tears writes): a subclass (sim/_broken_rules.py) overrides one
method with the wrong rule. Nothing in the client knows mutants exist: `planted(name)` is
the broken rules, and a run takes them as any rules, `run_seed(..., rules=planted(name))`,
which opens its client with them (`Harness(rules=...)`, handed by `open_producer` and
`BulkLoader` to every deciding object they build: no global, no context variable).

For each mutant, `hunt` runs the seeds of each workload that can expose it (0, 1, 2...
up to a budget) with the mutant planted, until the first seed whose check fails: the
mutant is *killed*, and the number of seeds it took is the simulator's cost to find
that bug. The failing seed is then minimized as any failure is (ddmin over the faults it
fired, the mutant still planted, keeping the failure class). The kill rate over all
mutants, the seeds each needed and the median minimized fault list are the simulator's
own quality measure (research/simulation.md: every bug within 2,000 seeds, median at
most 3 faults).

Seeds run in worker processes in chunks (`jobs`); each task names its mutant and the
worker plants it itself, so nothing depends on how processes are started. Chunks are
consumed in seed order and the lowest failing seed wins, so the answer does not depend
on `jobs`.
"""

from __future__ import annotations

import concurrent.futures
import statistics
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from trio_kafka.core import Rules
from trio_kafka.sim._broken_rules import (
    BulkWithoutCas,
    CasMismatchNoRead,
    CasRebaseOnMismatch,
    CommitAfterFailedSend,
    ExpireInFlight,
    LoadLostAsWritten,
    LoadMismatchAsWritten,
    LoadRestreamOn,
    LoadResumeFromAborted,
    LoadResumePastCheckpoint,
    NewProducerIdOnBump,
    NotEnoughReplicasNotWritten,
    PipelinedSameOffset,
    ReorderRetries,
    ResendAfterBump,
    ResendBehindFailedCas,
    SameEpochOnUnknownProducer,
    StaleEndTxn,
    TimeoutNotWritten,
)
from trio_kafka.sim.minimize import ddmin, fault_id
from trio_kafka.sim.runner import SeedResult, run_seed, still_fails

# -- the planted bugs ---------------------------------------------------------------------

TIMEOUT_NOT_WRITTEN = "timeout-not-written"
SAME_EPOCH_ON_UNKNOWN_PRODUCER = "same-epoch-on-unknown-producer"
RESEND_AFTER_BUMP = "resend-after-bump"
STALE_END_TXN = "stale-end-txn"
CAS_MISMATCH_NO_READ = "cas-mismatch-no-read"
REORDER_RETRIES = "reorder-retries"
NOT_ENOUGH_REPLICAS_NOT_WRITTEN = "not-enough-replicas-not-written"
EXPIRE_IN_FLIGHT = "expire-in-flight"
CAS_REBASE_ON_MISMATCH = "cas-rebase-on-mismatch"
BULK_WITHOUT_CAS = "bulk-without-cas"
COMMIT_AFTER_FAILED_SEND = "commit-after-failed-send"
NEW_PRODUCER_ID_ON_BUMP = "new-producer-id-on-bump"
CAS_PIPELINED_SAME_OFFSET = "cas-pipelined-same-offset"
CAS_RESEND_BEHIND_FAILED = "cas-resend-behind-failed"
# -- the load pipeline (core/_load.py) --
LOAD_LOST_AS_WRITTEN = "load-lost-as-written"
LOAD_MISMATCH_AS_WRITTEN = "load-mismatch-as-written"
LOAD_RESUME_PAST_CHECKPOINT = "load-resume-past-checkpoint"
LOAD_RESUME_FROM_ABORTED = "load-resume-from-aborted"
LOAD_RESTREAM_ON = "load-restream-on"
# -- end of the load pipeline's mutants --

#: name -> (the bug, the workloads that can expose it).
MUTANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    TIMEOUT_NOT_WRITTEN: (
        "a request lost or timed out is taken as not written and resent with a new sequence",
        ("idempotent",),
    ),
    SAME_EPOCH_ON_UNKNOWN_PRODUCER: (
        "UNKNOWN_PRODUCER_ID restarts the partition's sequences at 0 without bumping the epoch",
        ("idempotent",),
    ),
    RESEND_AFTER_BUMP: (
        "after an epoch bump, a batch that may have been written is resent under the new "
        "epoch (the sequence it reuses no longer deduplicates)",
        ("idempotent",),
    ),
    STALE_END_TXN: (
        "after an EndTxn(commit) with unknown outcome the producer goes on with the same "
        "epoch (no re-initialisation), so the late EndTxn can decide the next transaction",
        ("transactional",),
    ),
    CAS_MISMATCH_NO_READ: (
        "a CAS mismatch after a lost response is reported as a concurrent write without "
        "reading the expected offset",
        ("cas",),
    ),
    REORDER_RETRIES: (
        "a retried batch goes to the back of its queue with a new sequence (retries "
        "reorder with 5 requests in flight, or duplicate what an earlier attempt wrote)",
        ("idempotent",),
    ),
    NOT_ENOUGH_REPLICAS_NOT_WRITTEN: (
        "an answer that may follow the append (NOT_ENOUGH_REPLICAS_AFTER_APPEND; "
        "REQUEST_TIMED_OUT or NOT_LEADER_OR_FOLLOWER under acks=all) is reported as not "
        "written (Failed)",
        ("idempotent",),
    ),
    EXPIRE_IN_FLIGHT: (
        "a batch whose request was in flight when delivery_timeout passed is dropped "
        "as not written (Failed) instead of Ambiguous",
        ("idempotent",),
    ),
    CAS_REBASE_ON_MISMATCH: (
        "a CAS mismatch is retried at the log end the broker named, without reading whose "
        "record took the expected offset (CAS treated as a plain append)",
        ("cas",),
    ),
    BULK_WITHOUT_CAS: (
        "the bulk loader sends its batches without an expected offset (idempotence only)",
        ("bulk",),
    ),
    # Two bugs the simulator found in this client (simulations/regressions/), planted
    # back: the simulator must keep catching them.
    COMMIT_AFTER_FAILED_SEND: (
        "a send() that raised inside a transaction leaves it committable (torn commit)",
        ("transactional",),
    ),
    NEW_PRODUCER_ID_ON_BUMP: (
        "the idempotent producer's epoch bump takes a new producer id (InitProducerId) "
        "instead of the next epoch of its id, so a late request of the old id is not "
        "fenced and lands after newer records",
        ("idempotent",),
    ),
    CAS_PIPELINED_SAME_OFFSET: (
        "concurrent appends on one conditional writer all expect the offset after its "
        "last acknowledged append, not each the offset after those in flight before it",
        ("cas",),
    ),
    CAS_RESEND_BEHIND_FAILED: (
        "a CAS batch queued or in flight behind a failed one of the same partition is "
        "resent (under the bumped epoch) instead of failing with it, so it may land after "
        "another writer's records that its writer never saw",
        ("cas",),
    ),
    # -- the load pipeline (core/_load.py) --
    LOAD_LOST_AS_WRITTEN: (
        "the load pipeline takes a batch without an answer (or with a retriable error) "
        "as written, and never resends it",
        ("bulk",),
    ),
    LOAD_MISMATCH_AS_WRITTEN: (
        "the load pipeline takes an expected-offset mismatch as its own earlier attempt "
        "without reading the record at the offset",
        ("bulk",),
    ),
    LOAD_RESUME_PAST_CHECKPOINT: (
        "a resumed load skips the row after its last checkpoint as if it were loaded",
        ("bulk",),
    ),
    LOAD_RESUME_FROM_ABORTED: (
        "a resumed transactional load takes a checkpoint of an aborted (or still open) "
        "transaction for a committed one, as a broker's read_committed that shows "
        "aborted records (Tansu's) made it do",
        ("bulk-txn",),
    ),
    LOAD_RESTREAM_ON: (
        "after an abort, a transactional load's chunk streams on from the row where it "
        "stopped instead of from its first (the aborted rows are never written again)",
        ("bulk-txn",),
    ),
    # -- end of the load pipeline's mutants --
}


#: name -> the rules with that one bug.
BROKEN_RULES: dict[str, type[Rules]] = {
    TIMEOUT_NOT_WRITTEN: TimeoutNotWritten,
    SAME_EPOCH_ON_UNKNOWN_PRODUCER: SameEpochOnUnknownProducer,
    RESEND_AFTER_BUMP: ResendAfterBump,
    STALE_END_TXN: StaleEndTxn,
    CAS_MISMATCH_NO_READ: CasMismatchNoRead,
    REORDER_RETRIES: ReorderRetries,
    NOT_ENOUGH_REPLICAS_NOT_WRITTEN: NotEnoughReplicasNotWritten,
    EXPIRE_IN_FLIGHT: ExpireInFlight,
    CAS_REBASE_ON_MISMATCH: CasRebaseOnMismatch,
    BULK_WITHOUT_CAS: BulkWithoutCas,
    COMMIT_AFTER_FAILED_SEND: CommitAfterFailedSend,
    NEW_PRODUCER_ID_ON_BUMP: NewProducerIdOnBump,
    CAS_PIPELINED_SAME_OFFSET: PipelinedSameOffset,
    CAS_RESEND_BEHIND_FAILED: ResendBehindFailedCas,
    LOAD_LOST_AS_WRITTEN: LoadLostAsWritten,
    LOAD_MISMATCH_AS_WRITTEN: LoadMismatchAsWritten,
    LOAD_RESUME_PAST_CHECKPOINT: LoadResumePastCheckpoint,
    LOAD_RESUME_FROM_ABORTED: LoadResumeFromAborted,
    LOAD_RESTREAM_ON: LoadRestreamOn,
}


def planted(name: str | None) -> Rules:
    """The rules with mutant `name`'s bug (for `run_seed(..., rules=)`), or the client's
    own for None. An unknown name raises KeyError, naming the known mutants."""
    if name is None:
        return Rules()
    broken = BROKEN_RULES.get(name)
    if broken is None:
        raise KeyError(f"unknown mutant {name!r} (known: {', '.join(MUTANTS)})")
    return broken()


# -- the search ------------------------------------------------------------------------


#: Seeds a mutant may take before it counts as surviving.
BUDGET = 2000


@attrs.frozen(slots=True)
class Hunt:
    """What the search found for one mutant."""

    mutant: str
    description: str
    killed: bool
    #: The workload and seed that killed it (None: survived), and seeds run to find it.
    workload: str | None
    seed: int | None
    seeds_run: int
    failure_class: str | None = None
    violation: str | None = None
    #: Faults the failing seed fired, and the minimized list (fault ids).
    faults_before: int = 0
    minimized: tuple[str, ...] = ()
    replays: int = 0
    #: The command replaying the minimized failure (None: `--mutants --seed S --seeds 1`).
    replay: str | None = None

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def run_with_mutant(args: tuple[str, str, int, str]) -> SeedResult:
    """One seed of `workload` with `mutant` planted (a worker's task)."""
    mutant, workload, seed, profile = args
    return run_seed(workload, seed, profile=profile, rules=planted(mutant)).result


def _results(
    mutant: str,
    workload: str,
    seeds: Sequence[int],
    profile: str,
    pool: concurrent.futures.Executor | None,
    chunk: int,
) -> Iterator[SeedResult]:
    tasks = [(mutant, workload, s, profile) for s in seeds]
    if pool is None:
        for task in tasks:
            yield run_with_mutant(task)
        return
    for start in range(0, len(tasks), chunk):
        yield from pool.map(run_with_mutant, tasks[start : start + chunk])


def hunt(
    mutant: str,
    *,
    budget: int = BUDGET,
    profile: str = "lite",
    first_seed: int = 0,
    pool: concurrent.futures.Executor | None = None,
    chunk: int = 16,
    minimize: bool = True,
    max_replays: int = 100,
    progress: Callable[[str, int], None] | None = None,
) -> Hunt:
    """Search seeds for the first that catches `mutant` (see the module doc)."""
    description, workloads = MUTANTS[mutant]
    per_workload = max(1, budget // len(workloads))
    run = 0
    for workload in workloads:
        seeds = range(first_seed, first_seed + per_workload)
        for result in _results(mutant, workload, seeds, profile, pool, chunk):
            run += 1
            if progress is not None:
                progress(mutant, run)
            if result.ok:
                continue
            found = Hunt(
                mutant,
                description,
                True,
                workload,
                result.seed,
                run,
                result.failure_class,
                result.violations[0] if result.violations else None,
                len(result.fired),
            )
            return _minimized(found, result, profile, max_replays) if minimize else found
    return Hunt(mutant, description, False, None, None, run)


def _minimized(found: Hunt, result: SeedResult, profile: str, max_replays: int) -> Hunt:
    assert found.workload is not None and found.seed is not None
    assert result.failure_class is not None
    test = still_fails(
        found.workload, found.seed, profile, result.failure_class, rules=planted(found.mutant)
    )
    shrunk = ddmin(result.fired_identities(), test, max_replays=max_replays)
    return attrs.evolve(
        found, minimized=tuple(fault_id(f) for f in shrunk.minimal), replays=shrunk.replays
    )


@attrs.frozen(slots=True)
class Summary:
    hunts: tuple[Hunt, ...]

    @property
    def killed(self) -> int:
        return sum(h.killed for h in self.hunts)

    @property
    def kill_rate(self) -> float:
        return self.killed / len(self.hunts) if self.hunts else 0.0

    @property
    def median_minimized(self) -> float | None:
        sizes = [len(h.minimized) for h in self.hunts if h.killed]
        return statistics.median(sizes) if sizes else None

    @property
    def median_seeds(self) -> float | None:
        seeds = [h.seeds_run for h in self.hunts if h.killed]
        return statistics.median(seeds) if seeds else None

    def to_json(self) -> dict[str, Any]:
        return {
            "mutants": len(self.hunts),
            "killed": self.killed,
            "kill_rate": self.kill_rate,
            "median_seeds": self.median_seeds,
            "median_minimized_faults": self.median_minimized,
            "hunts": [h.to_json() for h in self.hunts],
        }


__all__ = [
    "BROKEN_RULES",
    "BUDGET",
    "MUTANTS",
    "Hunt",
    "Summary",
    "hunt",
    "planted",
    "run_with_mutant",
]
