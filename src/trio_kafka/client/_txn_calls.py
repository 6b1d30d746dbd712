"""The transactional calls of `Producer` (Java's `initTransactions`, `beginTransaction`,
`commitTransaction`, ...): each checks the producer is transactional and hands the work
to its `TransactionDriver` (`_transactions.py`), which owns the coordinator exchange.
`HandedOffTransaction` is an open transaction one process leaves for another to end.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import attrs

from trio_kafka.client._producer_base import ProducerBase
from trio_kafka.client._transactions import TopicPartition, TransactionDriver
from trio_kafka.errors import AbortableError, ConfigError
from trio_kafka.producer import GroupMetadata, OffsetAndMetadata, TxnState


@attrs.frozen
class HandedOffTransaction:
    """An open transaction one process left for another to end (picklable)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class TransactionalProducerMixin(ProducerBase):
    """The transactional calls of `Producer` (they need `transactional_id=`)."""

    def _transactions(self) -> TransactionDriver:
        if self._txn is None:
            raise ConfigError(
                "this producer has no transactional_id: open it with "
                "open_producer(..., transactional_id='...') to use transactions"
            )
        return self._txn

    async def init_transactions(self, timeout: float | None = None) -> None:
        """Find the transaction coordinator and get a producer id and epoch, fencing
        any earlier producer with the same transactional id (Java's initTransactions).

        Also what to await after `TransactionOutcomeUnknownError`: it returns once the
        re-initialisation (epoch bump) has finished."""
        await self._transactions().init(timeout)

    def begin_transaction(self) -> None:
        """Start a transaction: `send()` is allowed until commit or abort."""
        driver = self._transactions()
        driver.begin()
        if self._telemetry is not None:
            self._txn_span = self._telemetry.begin_transaction(driver.manager.transactional_id)

    async def _ended(self, outcome: str, end: Callable[[], Awaitable[None]]) -> None:
        """Commit or abort (`end`), ending the transaction's span with its outcome."""
        span, self._txn_span = self._txn_span, None
        try:
            await end()
        except BaseException as exc:
            if span is not None:
                self._telemetry.end_transaction(span, outcome, exc)  # type: ignore[union-attr]
            raise
        if span is not None:
            self._telemetry.end_transaction(span, outcome, None)  # type: ignore[union-attr]

    async def commit_transaction(self) -> None:
        """Send everything appended, then commit. Raises an `AbortableError`
        (abort and go on), a `FatalError` (close the producer) or
        `TransactionOutcomeUnknownError` (may or may not be committed)."""
        await self._ended("commit", self._transactions().commit)

    async def abort_transaction(self) -> None:
        """Abort: records not yet sent fail with `TransactionAbortedError`; those
        written are never shown to read_committed consumers."""
        await self._ended("abort", self._transactions().abort)

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: GroupMetadata | str,
    ) -> None:
        """Commit a consumer group's positions with this transaction (and only with it).

        `offsets`: (topic, partition) -> the next offset to read (or OffsetAndMetadata);
        `group_metadata`: the consumer's `GroupMetadata` (KIP-447: generation, member
        id, group instance id) or just the group id."""
        await self._transactions().send_offsets(offsets, group_metadata)

    async def hand_off_transaction(self) -> HandedOffTransaction:
        """Flush, check that every record of the open transaction was acknowledged, and
        leave the transaction open for another process to end with
        `complete_transaction` (a Spark task writes, the driver commits). This producer
        can then send nothing more, and closing it does not abort the transaction: the
        coordinator aborts it after `transaction_timeout` unless it is ended before."""
        driver = self._transactions()
        await self.flush()
        producer_id, epoch = driver.manager.hand_off()
        driver.update_detour()
        return HandedOffTransaction(driver.manager.transactional_id, producer_id, epoch)

    async def complete_transaction(
        self, transaction: HandedOffTransaction, *, commit: bool = True
    ) -> None:
        """End a transaction another producer handed off (`hand_off_transaction`), on a
        producer opened with the same `transactional_id` and not initialised (its
        `init_transactions()` would abort it). Raises like `commit_transaction`; a
        `FatalError` (fenced, or past the coordinator's timeout) means this id's
        transaction cannot be committed any more."""
        driver = self._transactions()
        if transaction.transactional_id != driver.manager.transactional_id:
            raise ConfigError(
                f"complete_transaction: the transaction belongs to transactional id "
                f"{transaction.transactional_id!r}, this producer is "
                f"{driver.manager.transactional_id!r}"
            )
        driver.manager.adopt(transaction.producer_id, transaction.producer_epoch)
        if commit:
            await driver.commit()
        else:
            await driver.abort()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Begin a transaction; commit on normal exit, abort on an exception or a
        cancellation (shielded, bounded by the driver's `abort_timeout`).

        After an unknown commit outcome it first waits for the re-initialisation, and
        after an abort that outlived `abort_timeout` (it goes on in the background) for
        that abort: beginning then raised IllegalTransactionStateError (seen on Apache
        Kafka, two ConditionalWriters racing, an abort held up by the other's fencing)."""
        driver = self._transactions()
        if driver.manager.state is TxnState.INITIALIZING:
            await driver.init()
        elif driver.manager.state is TxnState.ABORTING:
            await driver.abort()
        self.begin_transaction()
        span = self._txn_span
        try:
            if span is None:
                yield
            else:
                with self._telemetry.current(span):  # type: ignore[union-attr]
                    yield
        except BaseException:
            await self._ended("abort", driver.abort_bounded)
            raise
        try:
            await self._ended("commit", driver.commit)
        except AbortableError:
            await driver.abort_bounded()
            raise


__all__ = ["HandedOffTransaction", "TransactionalProducerMixin"]
