"""Planted bugs (mutants) of the client, for the simulator's own quality measure.

Theory of operation
-------------------
The simulator must catch known client bugs: if it does not, its faults or its checker
are too weak (the kill rate, as in mutation testing). Each mutant is one wrong decision
at one place in producer/ or client/, behind a check of `ACTIVE`, the one set of active
mutant names. It is empty by default and in every real use; only the simulator fills it,
for one mutant at a time (`enabled(name)`, a context manager; `trio-kafka simulate
--mutants` enables it in each worker process it starts), and a test checks it is empty
outside that block. The checks sit on failure paths (a timeout, an error code, an epoch
bump), never on the per-record hot path, and cost one truth test of an empty set.

`MUTANTS` says what each one does and which workloads can expose it; the search itself
lives in sim/mutants.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

#: Names of the active mutants. Empty outside the simulator's mutant runs.
ACTIVE: set[str] = set()

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
V1_END_TXN_EPOCH = "v1-end-txn-epoch"
NEW_PRODUCER_ID_ON_BUMP = "new-producer-id-on-bump"
# -- the load pipeline (producer/_load.py) --
LOAD_LOST_AS_WRITTEN = "load-lost-as-written"
LOAD_MISMATCH_AS_WRITTEN = "load-mismatch-as-written"
LOAD_RESUME_PAST_CHECKPOINT = "load-resume-past-checkpoint"
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
        "a batch retried after a definite error goes to the back of its queue with a new "
        "sequence (retries reorder with 5 requests in flight)",
        ("idempotent",),
    ),
    NOT_ENOUGH_REPLICAS_NOT_WRITTEN: (
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND is reported as not written (Failed)",
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
    V1_END_TXN_EPOCH: (
        "a transactions-v1 abort takes EndTxn v5's current epoch for a bump, restarting "
        "a failed partition's sequences at 0 under the same epoch",
        ("transactional",),
    ),
    NEW_PRODUCER_ID_ON_BUMP: (
        "the idempotent producer's epoch bump takes a new producer id (InitProducerId) "
        "instead of the next epoch of its id, so a late request of the old id is not "
        "fenced and lands after newer records",
        ("idempotent",),
    ),
    # -- the load pipeline (producer/_load.py) --
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
    # -- end of the load pipeline's mutants --
}


def active(name: str) -> bool:
    """Whether mutant `name` is active (False, at once, outside mutant runs)."""
    return bool(ACTIVE) and name in ACTIVE


@contextlib.contextmanager
def enabled(*names: str) -> Iterator[None]:
    """Activate `names` for the duration of the block (the simulator's switch)."""
    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        raise KeyError(f"unknown mutant(s) {', '.join(unknown)} (known: {', '.join(MUTANTS)})")
    before = set(ACTIVE)
    ACTIVE.update(names)
    try:
        yield
    finally:
        ACTIVE.clear()
        ACTIVE.update(before)


__all__ = ["ACTIVE", "MUTANTS", "active", "enabled"]
