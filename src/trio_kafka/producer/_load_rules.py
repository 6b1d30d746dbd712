"""The load pipeline's rules (producer/_load.py): the decisions where a wrong rule loses
or duplicates rows, gathered with the others in producer/_rules.py (a caller may pass
its own rules in their place)."""

from __future__ import annotations

from trio_kafka.producer._core import Action, classify


class LoadRules:
    """The load pipeline's part of the rules (producer/_rules.py gathers them into
    `Rules`)."""

    def loaded_through(self, resumed_after_row: int) -> int:
        """A resumed load skips the rows up to its last checkpoint, and no further."""
        return resumed_after_row

    def load_batch_offset(self, expected_offset: int) -> int:
        """The base offset a load batch is built with: its expected offset (CAS: the
        broker appends it there or nowhere; -1 under the transactional backend)."""
        return expected_offset

    def checkpoint_committed(self, first_marker_after: bool | None) -> bool:
        """Whether a checkpoint in a transactional batch counts on resume, by the first
        transaction marker of its producer id after it: a COMMIT (True) counts; an
        ABORT (False) or none yet (None: the transaction is open) does not."""
        return first_marker_after is True

    def restream_from(self, streamed: int) -> int:
        """Where an aborted chunk's rows go again from (`streamed` of them were sent in
        the aborted transaction): its first row, since none of them is in the log."""
        return 0

    def load_answer(self, code: int | None) -> Action:
        """What a load batch's answer means (`_core.classify`): no answer or a
        retriable error is resent at the same offset, a mismatch is read."""
        return classify(code)


__all__ = ["LoadRules"]
