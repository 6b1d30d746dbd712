"""The one retry backoff (KIP-580), as the Java client's `ExponentialBackoff` computes it.

`backoff_delay(attempt, draw, initial, maximum)` is the formula, pure: the delay in
seconds before retry `attempt + 1` (0 after the first failure) is `initial * 2**attempt`
times a jitter factor in [0.8, 1.2] made from `draw` (a number in [0, 1)), never above
`maximum`. The exponent stops where `initial * 2**attempt` reaches `maximum`, so past
that point the delay is `maximum` jittered downwards ([0.8, 1] of it), as in Java: clients
that failed together keep drifting apart instead of all waiting exactly `maximum`.
With `maximum <= initial` the delay is the constant `maximum` (Java's "static backoff"),
and no draw is needed.

`ExponentialBackoff` holds the two options (and the multiplier and jitter) and takes
its draw from an injected source (`rng.random()`; the shell's seeded `random.Random`),
drawing only when the delay depends on it, so a simulated run replays exactly. Every
retry in the client uses it: the producer core's batch retries (`ProducerCore.backoff`),
the transaction coordinator queue (without jitter: `rng=None`), reconnects, metadata
refreshes, the partition reader, leader calls, InitProducerId and the bulk loader.
"""

from __future__ import annotations

import math
from typing import Protocol

import attrs

from trio_kafka.errors import ConfigError

#: The draw that makes the jitter factor exactly 1 (for a caller without a source).
NO_JITTER = 0.5


class Draw(Protocol):
    """Where the jitter comes from: `random()` in [0, 1) (a seeded `random.Random`)."""

    def random(self) -> float: ...


def backoff_delay(
    attempt: int,
    draw: float,
    initial: float,
    maximum: float,
    *,
    multiplier: float = 2.0,
    jitter: float = 0.2,
) -> float:
    """Seconds to wait before retry `attempt + 1` (see the module doc); `draw` in [0, 1)."""
    if maximum <= initial:
        return maximum
    if initial == 0:
        return 0.0
    # The exponent at which the term reaches `maximum` (a float: Java's `expMax`); beyond
    # it the term is `maximum` itself, which also keeps a long outage from overflowing.
    top = math.log(maximum / initial) / math.log(multiplier) if multiplier > 1 else 0.0
    steps = max(attempt, 0)
    term = maximum if steps >= top else initial * float(multiplier**steps)
    factor = (1 - jitter) + 2 * jitter * draw
    return min(term * factor, maximum)


@attrs.frozen(slots=True)
class ExponentialBackoff:
    """`backoff(attempts, rng)`: the delay in seconds after `attempts` earlier failures
    (0 for the first failure). `initial` and `maximum` are `retry_backoff` and
    `retry_backoff_max` (or `reconnect_backoff` and `reconnect_backoff_max`)."""

    initial: float
    maximum: float
    multiplier: float = 2.0
    jitter: float = 0.2

    def __attrs_post_init__(self) -> None:
        if self.initial < 0 or self.maximum < 0:
            raise ConfigError(
                f"backoff must not be negative (initial={self.initial}, maximum={self.maximum})"
            )
        if self.multiplier < 1:
            raise ConfigError(f"backoff multiplier must be at least 1, not {self.multiplier}")
        if not 0 <= self.jitter < 1:
            raise ConfigError(f"backoff jitter must be in [0, 1), not {self.jitter}")

    @classmethod
    def of(cls, config: _RetryOptions) -> ExponentialBackoff:
        """From a config's `retry_backoff` and `retry_backoff_max` (the one set of options)."""
        return cls(config.retry_backoff, config.retry_backoff_max)

    def backoff(self, attempts: int, rng: Draw | None) -> float:
        """Delay after `attempts` earlier failures; `rng` None: no jitter (factor 1)."""
        jittered = rng is not None and self.jitter > 0 and self.maximum > self.initial
        draw = float(rng.random()) if jittered and rng is not None else NO_JITTER
        return backoff_delay(
            attempts,
            draw,
            self.initial,
            self.maximum,
            multiplier=self.multiplier,
            jitter=self.jitter if jittered else 0.0,
        )


class _RetryOptions(Protocol):
    @property
    def retry_backoff(self) -> float: ...
    @property
    def retry_backoff_max(self) -> float: ...


__all__ = ["NO_JITTER", "Draw", "ExponentialBackoff", "backoff_delay"]
