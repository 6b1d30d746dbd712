"""A seeded random fault schedule for a `FaultProxy` (Jepsen's nemesis, on one link).

`run_schedule(proxy, seed, duration=)` alternates quiet spells and faults: it draws a
quiet time, a fault kind and its parameters, applies the fault, waits the fault's
duration, heals, and so on until `duration` seconds have passed; it always ends healed.
Kinds are dealt from a shuffled deck (every kind once per round, in a seeded order), so
a run of a few rounds sees every kind.
Every draw comes from `random.Random(seed)`, so the same seed gives the same sequence of
faults (the moments they hit the traffic depend on the real clock, as with any real
network). `FaultKind` names what may be drawn; `ScheduleConfig` tunes the spells.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable

import attrs
import trio

from trio_kafka.testing._proxy import CutMode, Direction, FaultProxy, Side


class FaultKind(enum.Enum):
    """What a schedule may apply (each heals at the end of its spell)."""

    CUT_FIN = "cut-fin"
    CUT_RST = "cut-rst"
    CUT_MID_FRAME = "cut-mid-frame"
    BLACKHOLE = "blackhole"
    DELAY = "delay"
    LATE_DELIVERY = "late-delivery"
    FRAGMENT = "fragment"
    PARTITION = "partition"


def parse_kinds(text: str) -> tuple[FaultKind, ...]:
    """ "cut-rst,blackhole" (or "all") as fault kinds; an unknown name is refused."""
    if text.strip() == "all":
        return tuple(FaultKind)
    kinds = []
    for name in (part.strip() for part in text.split(",")):
        if not name:
            continue
        try:
            kinds.append(FaultKind(name))
        except ValueError:
            known = ", ".join(k.value for k in FaultKind)
            raise ValueError(f"unknown fault kind {name!r} (known: {known}, or all)") from None
    if not kinds:
        raise ValueError("no fault kind given")
    return tuple(kinds)


def _span(
    instance: object, attribute: attrs.Attribute[tuple[float, float]], value: tuple[float, float]
) -> None:
    low, high = value
    if not 0 <= low <= high:
        raise ValueError(f"{attribute.name} must be (low, high) with 0 <= low <= high, got {value}")


@attrs.frozen(slots=True)
class ScheduleConfig:
    """Spells in seconds, each drawn uniformly from (low, high)."""

    kinds: tuple[FaultKind, ...] = tuple(FaultKind)
    #: Quiet time before each fault.
    quiet: tuple[float, float] = attrs.field(default=(0.3, 1.5), validator=_span)
    #: How long a fault lasts before the heal.
    fault: tuple[float, float] = attrs.field(default=(0.2, 2.0), validator=_span)
    #: Delay and jitter of DELAY.
    delay: tuple[float, float] = attrs.field(default=(0.01, 0.3), validator=_span)
    #: How long LATE_DELIVERY holds a request (longer than a client's request timeout
    #: makes the client give up first: a zombie).
    hold: tuple[float, float] = attrs.field(default=(1.0, 4.0), validator=_span)
    #: Largest fragment of FRAGMENT.
    fragment: tuple[int, int] = (1, 64)


async def run_schedule(
    proxy: FaultProxy,
    seed: int,
    *,
    duration: float,
    config: ScheduleConfig | None = None,
    kinds: Iterable[FaultKind] | None = None,
) -> None:
    """Apply seeded random faults to `proxy` for `duration` seconds, then heal."""
    config = config or ScheduleConfig()
    choices = tuple(kinds) if kinds is not None else config.kinds
    if not choices:
        raise ValueError("a schedule needs at least one fault kind")
    rng = random.Random(seed)
    proxy.note("schedule", f"seed={seed}")
    deck: list[FaultKind] = []
    with trio.move_on_after(duration):
        try:
            while True:
                await trio.sleep(rng.uniform(*config.quiet))
                if not deck:
                    deck = list(choices)
                    rng.shuffle(deck)
                kind = deck.pop()
                _apply(proxy, kind, rng, config)
                await trio.sleep(rng.uniform(*config.fault))
                proxy.heal()
        finally:
            proxy.heal()


def _apply(proxy: FaultProxy, kind: FaultKind, rng: random.Random, config: ScheduleConfig) -> None:
    match kind:
        case FaultKind.CUT_FIN:
            proxy.cut(CutMode.FIN, rng.choice(list(Side)))
        case FaultKind.CUT_RST:
            proxy.cut(CutMode.RST, rng.choice(list(Side)))
        case FaultKind.CUT_MID_FRAME:
            proxy.cut(
                rng.choice(list(CutMode)),
                Side.BOTH,
                mid_frame=True,
                direction=rng.choice(list(Direction)),
            )
        case FaultKind.BLACKHOLE:
            proxy.blackhole(rng.choice(["both", *Direction]))
        case FaultKind.DELAY:
            low, high = config.delay
            proxy.delay(rng.uniform(low, high), jitter=rng.uniform(0, high))
        case FaultKind.LATE_DELIVERY:
            proxy.hold(rng.uniform(*config.hold), requests=rng.randint(1, 3))
        case FaultKind.FRAGMENT:
            proxy.fragment(rng.randint(*config.fragment))
        case FaultKind.PARTITION:
            proxy.partition()
