"""One classification of a partition's Produce outcome into what the writer must do.

Theory of operation
-------------------
A Produce answer for one partition is an error code; a request that got no answer (a
lost connection, a timeout) has no code at all and *may* have been applied. Every
writer that keeps its own order (the load pipeline today; the producer core's
`_sequencer` is meant to use the same table, see DESIGN.md "One write pipeline") turns
that into one `Action`, by one function, `classify(code, sent=...)`:

- `ACKNOWLEDGED`: NONE, and DUPLICATE_SEQUENCE_NUMBER (the broker already holds the
  batch: an earlier attempt landed; Tansu answers so for a recent duplicate).
- `RESOLVE_MISMATCH`: EXPECTED_OFFSET_MISMATCH. Nothing of this attempt was written, but
  an earlier attempt of the same batch may have been: read the log to know (the
  pipeline says what to read).
- `NEW_PRODUCER_ID`: UNKNOWN_PRODUCER_ID, OUT_OF_ORDER_SEQUENCE_NUMBER: the broker lost
  (or never had) our producer state, so sequences must start again under a new id.
  Retrying with the same sequences would be refused forever.
- `REFRESH_AND_RETRY`: a code with `invalid_metadata` (NOT_LEADER_OR_FOLLOWER, ...):
  the leader moved; refresh the metadata, back off, resend the same batch.
- `RETRY`: other retriable codes, and a request that left without an answer
  (`code=None`): resend the same batch with the same sequence, so the broker's
  deduplication (and, for CAS, the expected offset) makes a landed attempt harmless.
- `FAIL`: anything else (a record too large, authorisation, a fatal producer error).

The table is data (`ACTIONS`) plus two rules (retriable, invalid metadata) read from
`errors.error_info`, so adding a code to Kafka's table classifies it without a change
here.
"""

from __future__ import annotations

import enum

from trio_kafka.errors import ErrorCode, error_info


class Action(enum.Enum):
    ACKNOWLEDGED = "acknowledged"
    RESOLVE_MISMATCH = "resolve-mismatch"
    NEW_PRODUCER_ID = "new-producer-id"
    REFRESH_AND_RETRY = "refresh-and-retry"
    RETRY = "retry"
    FAIL = "fail"


#: Codes whose action is not implied by the error table's retriable / invalid_metadata.
ACTIONS: dict[int, Action] = {
    ErrorCode.NONE: Action.ACKNOWLEDGED,
    ErrorCode.DUPLICATE_SEQUENCE_NUMBER: Action.ACKNOWLEDGED,
    ErrorCode.EXPECTED_OFFSET_MISMATCH: Action.RESOLVE_MISMATCH,
    ErrorCode.UNKNOWN_PRODUCER_ID: Action.NEW_PRODUCER_ID,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER: Action.NEW_PRODUCER_ID,
}


def classify(code: int | None) -> Action:
    """The action for a partition's answer `code` (None: the request may have been
    applied but no answer came: a lost connection or a timeout)."""
    if code is None:
        return Action.RETRY
    action = ACTIONS.get(code)
    if action is not None:
        return action
    info = error_info(code)
    if info.invalid_metadata:
        return Action.REFRESH_AND_RETRY
    if info.retriable:
        return Action.RETRY
    return Action.FAIL


__all__ = ["ACTIONS", "Action", "classify"]
