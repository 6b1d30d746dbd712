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
| `CoreRules` | core/_core.py | epoch_bump, lost_request, requeue, give_up_lost, answered_after_append, behind_failed_cas |
| `SequencerRules` | core/_sequencer.py | unknown_producer, drop_on_rewrite |
| `TransactionRules` | core/_transaction.py | end_txn_bumps_epoch, unknown_commit_outcome, init_when_ready, send_failure_taints_transaction |
| `LoadRules` | core/_load.py | loaded_through, load_batch_offset, load_answer |
| `Rules` (here) | core/_rules.py | offset_after_mismatch, pipelined_offset, settle_mismatch (client/_conditional.py) |

The deciding objects take their rules when they are built (`rules=`), by default the
rules in effect in the current context (`contextvars`, so trio tasks inherit them):
`Rules()` unless a harness replaced them for a block with `rules_in_effect(...)`
(core/_rule_context.py holds the context, so that no deciding module imports this
one, which imports them all).

Why a seam here at all: a test harness can check that it notices when one of these
rules is broken (the simulator runs variants that each break one, and must catch every
one, in the sim package), without a switch inside the client. The client itself always runs
`Rules()`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from trio_kafka.core._core import CoreRules
from trio_kafka.core._load import LoadRules
from trio_kafka.core._rule_context import installed_rules, installing
from trio_kafka.core._transaction import TransactionRules

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


_DEFAULT = Rules()


def current_rules() -> Rules:
    """The rules in effect here (`Rules()` unless `rules_in_effect` replaced them)."""
    installed = installed_rules()
    return installed if isinstance(installed, Rules) else _DEFAULT


@contextmanager
def rules_in_effect(rules: Rules) -> Iterator[None]:
    """Objects built inside the block (and tasks started in it) take `rules`."""
    with installing(rules):
        yield


__all__ = ["MismatchSettler", "Rules", "current_rules", "rules_in_effect"]
