"""Exception groups at our context managers' edges.

trio's nurseries wrap whatever crosses them in an `ExceptionGroup`
(`strict_exception_groups`, the default since trio 0.25), including the exception the
`async with` body itself raised. `open_selector` and `open_producer` hand the body's
own exception back unwrapped when it is the only thing that went wrong (`only_error`),
and `BulkLoader.run` its one failing task's error (`sole_error`), so a caller's
`except KafkaError` (or `except KeyError`) works; a group that also holds another error
(a background task crashed too) stays a group, nothing is dropped.

A cancellation beside the error is not another error: when an enclosing scope is
cancelled (a deadline, a crash) at the moment the body or a task fails, the other tasks
end with `Cancelled` (asyncio: `CancelledError`), which the task group's own scope does
not absorb since the cancellation is not its own. The error is what happened; the
cancellation only cut the rest short. (The chaos suite's Tansu bulk runs 102 and 109: a
partition fenced at the moment its loader was crashed.)
"""

from __future__ import annotations

import asyncio

import trio

_CANCELLATIONS = (trio.Cancelled, asyncio.CancelledError)


def group_leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """Every exception in `group` that is not itself a group, however deeply nested,
    in order."""
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        leaves.extend(group_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return leaves


def only_error(group: BaseExceptionGroup[BaseException], error: BaseException) -> bool:
    """True when `group` holds `error` (however deeply nested) and nothing else but
    cancellations. `error` may itself be a group: it counts as one leaf."""
    found = False
    pending: list[BaseException] = [group]
    while pending:
        exc = pending.pop()
        if exc is error:
            found = True
        elif isinstance(exc, BaseExceptionGroup):
            pending.extend(exc.exceptions)
        elif not isinstance(exc, _CANCELLATIONS):
            return False
    return found


def sole_error(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """What `group` comes down to: its one leaf that is not a cancellation, however
    many cancellations stand beside it, or else its only leaf; None when it holds
    several errors (or several cancellations), which stay a group."""
    leaves = group_leaves(group)
    errors = [leaf for leaf in leaves if not isinstance(leaf, _CANCELLATIONS)]
    if len(errors) == 1:
        return errors[0]
    if len(leaves) == 1:
        return leaves[0]
    return None


__all__ = ["group_leaves", "only_error", "sole_error"]
