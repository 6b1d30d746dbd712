"""Run a decoder on hostile input and keep what came out: a value or the documented refusal."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
E = TypeVar("E", bound=BaseException)


def value_or_refusal(call: Callable[[], T], refusal: type[E]) -> T | E:
    """`call()`'s value, or the `refusal` it raised; any other exception propagates."""
    try:
        return call()
    except refusal as error:
        return error
