"""Content-addressed randomness for simulated runs.

Every random decision of a simulation is drawn from a hash of (seed, site, key), where the
site names the decision ("fault.reset", "latency.client->broker-1") and the key is a stable
description of what it is about (a connection number, a partition, a request's
correlation id, an attempt). Two consequences:

- removing one fault from a run does not shift every later draw, so delta debugging over
  the faults that fired converges in a few replays;
- draws do not depend on the order in which tasks happen to ask, only on what they ask
  about.

Keys are encoded with `repr`, which is stable across processes for ints, strings, bytes,
floats and tuples of them (never `hash()`, which PYTHONHASHSEED changes).
"""

from __future__ import annotations

import hashlib
import random
import struct
from hashlib import blake2b

_SCALE = 2.0**-64


def _digest(seed: int, site: str, key: tuple[object, ...]) -> bytes:
    # One buffer, one call (the same bytes as hashing the four parts in turn).
    data = struct.pack(">q", seed) + f"{site}\x00{key!r}".encode()
    return hashlib.blake2b(data, digest_size=16).digest()


_Q = struct.Struct(">Q")
_unpack_q = _Q.unpack_from


class Draws:
    """Deterministic draws addressed by (site, key), all derived from one seed."""

    __slots__ = ("_prefix", "seed")

    def __init__(self, seed: int) -> None:
        self.seed = seed
        #: The seed's bytes, hashed ahead of every draw's (site, key) (as `_digest` does).
        self._prefix = struct.pack(">q", seed)

    def uniform(self, site: str, *key: object) -> float:
        """A float in [0, 1) for this site and key."""
        # `_digest` inlined: every chunk and write of a run draws (hot).
        data = self._prefix + f"{site}\x00{key!r}".encode()
        n: int = _unpack_q(blake2b(data, digest_size=16).digest())[0]
        return n * _SCALE

    def uniform_keyed(self, site: str, key_repr: str) -> float:
        """`uniform(site, *key)` given `repr(key)`: for callers that draw for many keys
        sharing their first items, whose text they keep (see `key_head`)."""
        data = self._prefix + f"{site}\x00{key_repr}".encode()
        n: int = _unpack_q(blake2b(data, digest_size=16).digest())[0]
        return n * _SCALE

    def chance(self, probability: float, site: str, *key: object) -> bool:
        """True with the given probability, for this site and key."""
        if probability <= 0.0:
            return False
        # `uniform` inlined (every fault decision draws: hot).
        data = self._prefix + f"{site}\x00{key!r}".encode()
        n: int = _unpack_q(blake2b(data, digest_size=16).digest())[0]
        return n * _SCALE < probability

    def chance_keyed(self, probability: float, site: str, key_repr: str) -> bool:
        """`chance(probability, site, *key)` given `repr(key)` (see `uniform_keyed`)."""
        if probability <= 0.0:
            return False
        data = self._prefix + f"{site}\x00{key_repr}".encode()
        n: int = _unpack_q(blake2b(data, digest_size=16).digest())[0]
        return n * _SCALE < probability

    def randint(self, low: int, high: int, site: str, *key: object) -> int:
        """An int in [low, high], for this site and key."""
        if high < low:
            raise ValueError(f"randint: high {high} < low {low}")
        (n,) = struct.unpack_from(">Q", _digest(self.seed, site, key))
        return low + int(n) % (high - low + 1)

    def rng(self, site: str, *key: object) -> random.Random:
        """An independent `random.Random` seeded from this site and key."""
        return random.Random(int.from_bytes(_digest(self.seed, site, key), "big"))

    def __repr__(self) -> str:
        return f"<Draws seed={self.seed}>"


def key_head(*items: object) -> str:
    """The text of a key's first items (two at least), to which `keyed` adds the last:
    `keyed(key_head(a, b), c) == repr((a, b, c))`."""
    if len(items) < 2:
        raise ValueError("a key head needs two items at least (a 1-tuple's repr differs)")
    return repr(items)[:-1]


def keyed(head: str, last: object) -> str:
    """`repr` of the key whose first items `head` renders, then `last`."""
    return f"{head}, {last!r})"
