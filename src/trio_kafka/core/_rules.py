"""The client's rules at the decisions where a wrong one loses, duplicates, reorders or
tears a write.

Theory of operation
-------------------
Each method of `Rules` is one decision point, named for what is decided there; its body
is the rule the client follows, usually one call of the deciding object's own action
(the core's, the sequencer's, the transaction manager's...). Each deciding module
declares its part next to its decisions, and `Rules` gathers them (with the CAS rules,
declared here):

| part | declared in | decision points |
| --- | --- | --- |
| `CoreRules` | core/_core.py | lost_request, requeue, give_up_lost, answered_after_append, behind_failed_cas (and its sequencer's) |
| `SequencerRules` | core/_sequencer.py | epoch_bump, unknown_producer, drop_on_rewrite |
| `TransactionRules` | core/_transaction.py | end_txn_bumps_epoch, unknown_commit_outcome, init_when_ready, send_failure_taints_transaction |
| `LoadRules` | core/_load.py | loaded_through, load_batch_offset, restream_from, load_answer, checkpoint_committed (client/_bulk.py) |
| `Rules` (here) | core/_rules.py | offset_after_mismatch, pipelined_offset, settle_mismatch (client/_conditional.py) |

Each deciding object takes its rules when it is built (`rules=`: the core, the
sequencer, the transaction manager, the load pipeline, the conditional writer); without
them it follows its own part's defaults, the client's rules. Nothing is read from a
global or a context: a harness that wants other rules builds the client with them.

Why a seam here at all: a test harness can check that it notices when one of these
rules is broken (the simulator runs variants that each break one, and must catch every
one: its planted bugs), without a switch inside the client. It hands them in with a
`Harness`, the one keyword of the entry points a harness opens the client with
(`open_producer(harness=...)`, `BulkLoader(harness=...)`, `open_bulk_loader`; a
conditional writer follows its producer's): the rules, and BUGGIFY's fault hook, which
the producer's sender asks at its fault sites (client/_sender.py). Applications never
pass one: the client itself always runs `Rules()` and no fault hook.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from trio_kafka.core._core import CoreRules
from trio_kafka.core._load import LoadRules
from trio_kafka.core._transaction import TransactionRules
from trio_kafka.errors import ConfigError

if TYPE_CHECKING:
    from trio_kafka.errors import ExpectedOffsetMismatchError


class Rules(CoreRules, TransactionRules, LoadRules):
    """The rules (see the module doc). Subclass and override one method to break it."""

    # -- CAS (client/_conditional.py) -------------------------------------------------

    def offset_after_mismatch(self, mismatch: ExpectedOffsetMismatchError) -> int | None:
        """A conditional append met EXPECTED_OFFSET_MISMATCH: None settles it by reading
        the record at the expected offset (`settle_mismatch`); an offset would retry the
        append there instead, which makes CAS a plain append: never."""
        return None

    def pipelined_offset(self, tail: int, settled: int) -> int:
        """The offset a conditional append expects when others of its writer may be in
        flight: `tail`, the offset after them (where they leave the log end), so
        concurrent appends each expect their own. `settled` (the end after the last
        one acknowledged) would make two appends in flight expect one offset."""
        return tail

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


@attrs.frozen
class Harness:
    """What a test harness (the simulator) plants in a client it opens: the rules its
    decisions follow and BUGGIFY's fault hook (see the module doc). The default is the
    client as it ships: `Rules()`, no faults. Passed once, to the entry point
    (`open_producer(harness=...)`, `BulkLoader(harness=...)`), which hands it on to
    every object it builds."""

    #: The rules of every decision (a subclass with one rule broken: a planted bug).
    rules: Rules = attrs.field(factory=Rules)
    #: `buggify(site) -> fire?`, asked at the sender's fault sites (None: never).
    buggify: Callable[[str], bool] | None = None

    @classmethod
    def given(cls, harness: object) -> Harness:
        """The `harness=` an entry point was given: the default for None, refused
        (`ConfigError`, before anything is opened) when it is not a `Harness`."""
        if harness is None:
            return cls()
        if not isinstance(harness, Harness):
            raise ConfigError(
                f"harness={harness!r} is not allowed: it must be a trio_kafka.Harness (the "
                "rules and fault hook a test harness plants), or left out"
            )
        return harness


__all__ = ["Harness", "MismatchSettler", "Rules"]
