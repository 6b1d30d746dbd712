"""Exponential backoff with jitter, as the Java client computes it.

`reconnect_backoff` is the first delay and `reconnect_backoff_max` the cap; each failure
doubles the delay, and a jitter factor drawn uniformly from [1 - jitter, 1 + jitter] (0.2 in
Java, `ExponentialBackoff`) keeps clients that failed together from reconnecting together.
The random draw comes from the injected generator so a simulated run replays exactly.
"""

from __future__ import annotations

import math
import random

import attrs

from trio_kafka.errors import ConfigError


@attrs.frozen(slots=True)
class ExponentialBackoff:
    """`backoff(attempts)`: the delay in seconds before attempt number `attempts + 1`."""

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

    def backoff(self, attempts: int, rng: random.Random) -> float:
        """Delay after `attempts` consecutive failures (0 for the first failure)."""
        if self.initial == 0:
            return 0.0
        # Cap the exponent so a long outage does not overflow the float; the cap itself is
        # applied after the jitter, as Java does, so the ceiling is never exceeded.
        if self.maximum > self.initial and self.multiplier > 1:
            max_exponent = math.log(self.maximum / self.initial) / math.log(self.multiplier)
        else:
            max_exponent = 0.0
        exponent = min(float(max(attempts, 0)), max_exponent)
        term = self.initial * float(self.multiplier**exponent)
        factor = rng.uniform(1 - self.jitter, 1 + self.jitter) if self.jitter > 0 else 1.0
        return min(term * factor, max(self.maximum, self.initial))
