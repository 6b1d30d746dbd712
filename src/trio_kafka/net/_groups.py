"""Exception groups at our context managers' edges.

trio's nurseries wrap whatever crosses them in an `ExceptionGroup`
(`strict_exception_groups`, the default since trio 0.25), including the exception the
`async with` body itself raised. `open_selector` and `open_producer` hand the body's
own exception back unwrapped when it is the only thing that went wrong, so a caller's
`except KafkaError` (or `except KeyError`) works; a group that also holds another
error (a background task crashed too) stays a group, nothing is dropped.
"""

from __future__ import annotations


def only_error(group: BaseExceptionGroup[BaseException], error: BaseException) -> bool:
    """True when every leaf of `group` is `error` (however deeply nested)."""
    for leaf in group.exceptions:
        if isinstance(leaf, BaseExceptionGroup):
            if not only_error(leaf, error):
                return False
        elif leaf is not error:
            return False
    return True


__all__ = ["only_error"]
