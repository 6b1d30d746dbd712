"""net/_groups.py: what an exception group from a task group comes down to."""

from __future__ import annotations

import asyncio

import trio

from trio_kafka.errors import ConcurrentWriteError, ProducerFencedError
from trio_kafka.net import group_leaves, only_error, sole_error


def _cancelled() -> trio.Cancelled:
    return trio.Cancelled._create()


def test_group_leaves_flattens_nested_groups_in_order() -> None:
    a, b, c = KeyError("a"), ValueError("b"), TypeError("c")
    group = BaseExceptionGroup("outer", [a, BaseExceptionGroup("inner", [b, c])])
    assert group_leaves(group) == [a, b, c]


def test_one_error_beside_cancellations_is_the_sole_error() -> None:
    fenced = ProducerFencedError("fenced")
    group = BaseExceptionGroup(
        "tasks", [_cancelled(), BaseExceptionGroup("inner", [fenced, _cancelled()])]
    )
    assert sole_error(group) is fenced


def test_asyncio_cancellations_count_as_cancellations() -> None:
    fenced = ProducerFencedError("fenced")
    group = BaseExceptionGroup("tasks", [asyncio.CancelledError(), fenced])
    assert sole_error(group) is fenced


def test_several_errors_have_no_sole_error() -> None:
    group = BaseExceptionGroup(
        "tasks", [ProducerFencedError("a"), _cancelled(), ConcurrentWriteError("b", offset=3)]
    )
    assert sole_error(group) is None


def test_a_lone_cancellation_is_the_sole_error_and_several_are_not() -> None:
    lone = _cancelled()
    assert sole_error(BaseExceptionGroup("one", [lone])) is lone
    assert sole_error(BaseExceptionGroup("two", [_cancelled(), _cancelled()])) is None


def test_only_error_allows_cancellations_beside_the_body_error() -> None:
    body = KeyError("body")
    assert only_error(BaseExceptionGroup("g", [body, _cancelled()]), body)
    assert only_error(BaseExceptionGroup("g", [BaseExceptionGroup("h", [body])]), body)


def test_only_error_is_false_with_another_error_or_without_the_body_error() -> None:
    body = KeyError("body")
    assert not only_error(BaseExceptionGroup("g", [body, ValueError("other")]), body)
    assert not only_error(BaseExceptionGroup("g", [_cancelled()]), body)


def test_a_body_error_that_is_a_group_counts_as_one_leaf() -> None:
    body = ExceptionGroup("the body's own", [KeyError("a"), ValueError("b")])
    assert only_error(BaseExceptionGroup("nursery", [body]), body)
