"""The states of a transactional producer and the one table of allowed transitions.

`TransactionManager.transition` applies this table and nothing else changes the state.
See `trio_kafka.producer.transactions` for what each state means to the caller.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"
    #: The open transaction was handed to another process, which ends it (`adopt`, then
    #: commit or abort there): this producer sends, commits and aborts nothing more.
    HANDED_OFF = "handed off"


S = TxnState
#: Every allowed transition (from -> the states it may go to). FATAL_ERROR is final.
ALLOWED: Mapping[TxnState, frozenset[TxnState]] = {
    # -> IN_TRANSACTION: `adopt`, ending a transaction another process handed off.
    S.UNINITIALIZED: frozenset({S.INITIALIZING, S.IN_TRANSACTION, S.FATAL_ERROR}),
    S.INITIALIZING: frozenset({S.READY, S.FATAL_ERROR}),
    S.READY: frozenset({S.IN_TRANSACTION, S.FATAL_ERROR}),
    S.IN_TRANSACTION: frozenset(
        {S.COMMITTING, S.ABORTING, S.ABORTABLE_ERROR, S.FATAL_ERROR, S.HANDED_OFF}
    ),
    # -> INITIALIZING: the EndTxn outcome is unknown; re-initialise (epoch bump).
    S.COMMITTING: frozenset({S.READY, S.ABORTABLE_ERROR, S.INITIALIZING, S.FATAL_ERROR}),
    # An abort that needs an epoch bump stays ABORTING until the bump answers.
    S.ABORTING: frozenset({S.READY, S.FATAL_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.ABORTING, S.FATAL_ERROR}),
    S.FATAL_ERROR: frozenset(),
    S.HANDED_OFF: frozenset({S.FATAL_ERROR}),  # closing
}


def refusal_hint(state: TxnState, operation: str) -> str:
    """What to do instead, for a call the state does not allow (`operation` is what the
    manager says it cannot do: "init", "commit", ...)."""
    match state:
        case S.UNINITIALIZED:
            return "; call init_transactions() first"
        case S.INITIALIZING:  # also after an unknown commit outcome: the epoch bump
            return "; await init_transactions() first (it returns once initialised)"
        case S.READY if operation == "init":
            return "; it is initialised already (once per producer)"
        case S.READY if operation == "abort":
            return "; no transaction is open, so there is nothing to abort"
        case S.READY:
            return (
                "; no transaction is open: call begin_transaction() first, or use "
                "`async with producer.transaction()`"
            )
        case S.IN_TRANSACTION if operation == "begin a transaction":
            return "; a transaction is open already: commit or abort it first"
        case S.COMMITTING | S.ABORTING:
            return "; wait until the transaction has ended"
        case S.ABORTABLE_ERROR:
            return "; the transaction failed: abort it"
        case _:
            return ""


__all__ = ["ALLOWED", "TxnState", "refusal_hint"]
