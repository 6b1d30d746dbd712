"""The client's rules at the decisions where a wrong one loses, duplicates, reorders or
tears a write.

Theory of operation
-------------------
Each method of `Rules` is one decision point, named for what is decided there; its body
is the rule the client follows, usually one call of the deciding object's own action
(the core's, the sequencer's, the transaction manager's...). The deciding objects take a
`Rules` when they are built (`rules=`), by default `current_rules()`: the rules in effect
in the current context (`contextvars`, so trio tasks inherit them), which are `Rules()`
unless a harness replaced them for a block with `rules_in_effect(...)`.

Why a seam here at all: a test harness can check that it notices when one of these
rules is broken (the simulator runs variants that each break one, and must catch every
one, in the sim package), without a switch inside the client. The client itself always runs
`Rules()`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from trio_kafka.producer._actions import Action, classify

if TYPE_CHECKING:
    from trio_kafka.errors import ExpectedOffsetMismatchError, KafkaError
    from trio_kafka.producer._batch import ProducerBatch
    from trio_kafka.producer._core import Decision, ProducerCore
    from trio_kafka.producer._sequencer import (
        PartitionSequence,
        Sequencer,
        SequenceVerdict,
        SequencingPolicy,
    )
    from trio_kafka.producer._txn_types import TxnResult
    from trio_kafka.producer.transactions import TransactionManager


class Rules:
    """The rules (see the module doc). Subclass and override one method to break it."""

    # -- the core (producer/_core.py) ---------------------------------------------------

    def epoch_bump(self, sequencing: SequencingPolicy) -> tuple[int, int]:
        """The id and epoch an idempotent producer bumps to: the next epoch of its own
        id (Java's local bump); (-1, -1) only when the epoch is exhausted."""
        return sequencing.next_local_epoch()

    def lost_request(
        self, core: ProducerCore, batch: ProducerBatch, now: float, error: KafkaError
    ) -> Decision:
        """A request carrying `batch` left and got no answer: it may have been written;
        resent with the same sequence (deduplicated), or Ambiguous."""
        batch.maybe_written = True
        return core.lost(batch, now, error)

    def requeue(self, core: ProducerCore, batch: ProducerBatch, now: float) -> None:
        """`batch` is retried: back to the front of its queue, in sequence order, with
        its sequence kept."""
        core.requeue(batch, now)

    def give_up_lost(
        self, core: ProducerCore, batch: ProducerBatch, now: float, error: KafkaError
    ) -> Decision:
        """A batch without a definite answer can no longer be retried (its delivery
        timeout passed with a request in flight, or retries ran out): Ambiguous."""
        return core.end_ambiguous(batch, now, error)

    def written_to_fewer_replicas(
        self, core: ProducerCore, batch: ProducerBatch, now: float, code: int, message: str | None
    ) -> Decision | None:
        """NOT_ENOUGH_REPLICAS_AFTER_APPEND: the broker appended the batch, to fewer
        replicas than asked; it may be retried (deduplicated), never called Failed.
        None: go on deciding by the error table (a retry)."""
        batch.maybe_written = True
        return None

    # -- idempotence (producer/_sequencer.py) -----------------------------------------

    def unknown_producer(
        self,
        sequencer: Sequencer,
        batch: ProducerBatch,
        entry: PartitionSequence,
        log_start_offset: int,
    ) -> SequenceVerdict:
        """UNKNOWN_PRODUCER_ID for a sequenced batch: retried after asking for an epoch
        bump (or a sequence reset in a transaction), or failed."""
        return sequencer.unknown_producer(batch, entry, log_start_offset)

    def drop_on_rewrite(self, batch: ProducerBatch) -> bool:
        """At an epoch bump, a batch of a partition being rewritten from sequence 0: one
        an earlier attempt of which may have landed is dropped (Ambiguous), never
        resent under the new epoch, where its old sequence no longer deduplicates."""
        return batch.maybe_written

    # -- transactions (producer/transactions.py, producer/_txn_handlers.py) -----------

    def end_txn_bumps_epoch(self, manager: TransactionManager) -> bool:
        """Does a successful EndTxn v5 answer carry the next epoch? Only under
        transactions v2; a v1 coordinator names the current one."""
        return manager.transaction_v2

    def unknown_commit_outcome(
        self, manager: TransactionManager, error: KafkaError, now: float
    ) -> None:
        """An EndTxn(commit) got no answer: settle it (resend), then re-initialise (a
        new epoch), so the late copy cannot decide the next transaction."""
        manager.reinitialise_after_unknown_commit(error, now)

    def init_when_ready(self, manager: TransactionManager) -> TxnResult | None:
        """`init()` on a manager that is READY: None refuses it (initialised already;
        after an unknown commit outcome the manager is INITIALIZING, and `init()`
        returns that re-initialisation)."""
        return None

    def send_failure_taints_transaction(self, error: KafkaError) -> bool:
        """A `send()` raised inside a transaction: the record is not in it, so the
        transaction must not commit (abortable), as Java's `send` does."""
        return True

    # -- the load pipeline (producer/_load.py) ---------------------------------------

    def loaded_through(self, resumed_after_row: int) -> int:
        """A resumed load skips the rows up to its last checkpoint, and no further."""
        return resumed_after_row

    def load_batch_offset(self, expected_offset: int) -> int:
        """The base offset a load batch is built with: its expected offset (CAS: the
        broker appends it there or nowhere; -1 under the transactional backend)."""
        return expected_offset

    def load_answer(self, code: int | None) -> Action:
        """What a load batch's answer means (`_actions.classify`): no answer or a
        retriable error is resent at the same offset, a mismatch is read."""
        return classify(code)

    # -- CAS (client/_conditional.py) -------------------------------------------------

    def offset_after_mismatch(self, mismatch: ExpectedOffsetMismatchError) -> int | None:
        """A conditional append met EXPECTED_OFFSET_MISMATCH: None settles it by reading
        the record at the expected offset (`settle_mismatch`); an offset would retry the
        append there instead, which makes CAS a plain append: never."""
        return None

    async def settle_mismatch(
        self, writer: MismatchSettler, expected: int, sequence: int, after_lost_attempt: bool
    ) -> Any:
        """Whose record took the expected offset? Read it: our own earlier attempt (an
        acknowledgement) or another writer's (`ConcurrentWriteError`)."""
        return await writer.settle_mismatch(expected, sequence)


class MismatchSettler(Protocol):
    """What `Rules.settle_mismatch` needs of a conditional writer."""

    next_offset: int | None

    async def settle_mismatch(self, expected: int, sequence: int) -> Any: ...


_CURRENT: contextvars.ContextVar[Rules] = contextvars.ContextVar("trio_kafka_rules")
_DEFAULT = Rules()


def current_rules() -> Rules:
    """The rules in effect here (`Rules()` unless `rules_in_effect` replaced them)."""
    return _CURRENT.get(_DEFAULT)


@contextlib.contextmanager
def rules_in_effect(rules: Rules) -> Iterator[None]:
    """Objects built inside the block (and tasks started in it) take `rules`."""
    token = _CURRENT.set(rules)
    try:
        yield
    finally:
        _CURRENT.reset(token)


__all__ = ["Rules", "current_rules", "rules_in_effect"]
