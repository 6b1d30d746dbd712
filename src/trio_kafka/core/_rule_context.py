"""Which rules the deciding objects built here follow (the rules: core/_rules.py).

Only the context lives here, in a module that imports nothing of the producer: each
deciding module (the core, the sequencer, the transaction manager, the load pipeline)
declares the part of the rules it follows next to its decisions (`CoreRules`,
`SequencerRules`, `TransactionRules`, `LoadRules`) and takes the rules in effect with
`rules_for(its part)`, without importing `_rules.py`, which gathers the parts into
`Rules` and so imports every deciding module.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import TypeVar

# The `Rules` a harness put in effect (`rules_in_effect`); unset: the client's own.
_INSTALLED: contextvars.ContextVar[object] = contextvars.ContextVar("trio_kafka_rules")

Part = TypeVar("Part")


def rules_for(part: type[Part]) -> Part:
    """The rules in effect here, as the `part` of them a deciding object follows: those
    a harness installed, or `part()` (the client's own rules) when none is."""
    installed = _INSTALLED.get(None)
    if installed is None:
        return part()
    if not isinstance(installed, part):
        raise TypeError(
            f"the rules in effect, a {type(installed).__name__}, are not {part.__name__}s"
        )
    return installed


def installed_rules() -> object | None:
    """The rules a harness installed here, or None."""
    return _INSTALLED.get(None)


@contextlib.contextmanager
def installing(rules: object) -> Iterator[None]:
    """Objects built inside the block (and tasks started in it) take `rules`."""
    token = _INSTALLED.set(rules)
    try:
        yield
    finally:
        _INSTALLED.reset(token)
