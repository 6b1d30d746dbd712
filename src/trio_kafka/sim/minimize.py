"""Shrinking a failing seed: delta debugging over the faults that fired.

Theory of operation
-------------------
A failing run leaves a `FaultLog`. Because every random decision is content-addressed
(`rand.py`), replaying the seed with only a subset of those fault identities allowed
(`FaultPlan.restricted_to`) keeps the others firing at the same places. So the failure is
a function of a set of identities, and Zeller and Hildebrandt's ddmin finds a 1-minimal
subset of it: removing any single remaining fault makes the failure go away.

`ddmin(items, still_fails)` is generic: it splits the current list into n chunks, tries
each chunk, then each complement, keeps the first that still fails (n back to 2, or n-1
for a complement) and otherwise doubles n until chunks are single items. Results are
memoised by subset, so `replays` counts real runs only. Before anything else it tries the
empty subset (one replay): a failure that needs no fault at all is worth knowing first.

`still_fails` must keep the failure *class* (`keeps_failure`): a duplicate that shrinks
into a hang is a different bug, and ddmin would happily follow it.

Fault ids on the command line are short, stable strings: the kind and 8 hex digits of a
hash of the identity's canonical JSON, e.g. `reset-after-apply.3f9c01d2`. They are shell
safe, independent of PYTHONHASHSEED, and resolved against the identities a run fired
(`resolve_fault_ids`), which is how `trio-kafka simulate --faults` replays a subset.
"""

from __future__ import annotations

import difflib
import hashlib
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Generic, TypeVar

import attrs

from trio_kafka.sim.checker import CheckResult
from trio_kafka.sim.faults import FaultIdentity, FaultKind

T = TypeVar("T")


@attrs.frozen(slots=True)
class DdminResult(Generic[T]):
    """The 1-minimal failing subset (in the input's order) and what finding it cost."""

    minimal: tuple[T, ...]
    #: Calls of `still_fails` (each a replay of the seed).
    replays: int
    #: Subsets considered, including those answered from the memo.
    tests: int


def _split(items: Sequence[int], n: int) -> list[tuple[int, ...]]:
    """`items` cut into n contiguous chunks whose sizes differ by at most one."""
    size, extra = divmod(len(items), n)
    chunks = []
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        chunks.append(tuple(items[start:end]))
        start = end
    return chunks


def ddmin(
    items: Sequence[T],
    still_fails: Callable[[tuple[T, ...]], bool],
    *,
    max_replays: int | None = None,
) -> DdminResult[T]:
    """A 1-minimal subsequence of `items` for which `still_fails` holds.

    `items` itself is assumed to fail (it is the failing run) and is never replayed.
    `max_replays` stops early and returns the smallest failing subset found so far.
    """
    memo: dict[tuple[int, ...], bool] = {}
    replays = 0
    tests = 0

    class _Budget(Exception):
        pass

    def fails(indices: tuple[int, ...]) -> bool:
        nonlocal replays, tests
        tests += 1
        if indices not in memo:
            if max_replays is not None and replays >= max_replays:
                raise _Budget
            replays += 1
            memo[indices] = still_fails(tuple(items[i] for i in indices))
        return memo[indices]

    current: tuple[int, ...] = tuple(range(len(items)))
    memo[current] = True
    try:
        if current and fails(()):
            current = ()
        n = 2
        while len(current) >= 2:
            chunks = _split(current, n)
            for chunk in chunks:
                if fails(chunk):
                    current, n = chunk, 2
                    break
            else:
                # With two chunks each complement is the other chunk: already tried.
                for chunk in chunks if n > 2 else ():
                    removed = set(chunk)
                    complement = tuple(i for i in current if i not in removed)
                    if fails(complement):
                        current, n = complement, max(n - 1, 2)
                        break
                else:
                    if n >= len(current):
                        break
                    n = min(len(current), 2 * n)
    except _Budget:
        pass
    return DdminResult(tuple(items[i] for i in current), replays, tests)


def keeps_failure(original: CheckResult) -> Callable[[CheckResult], bool]:
    """A test for replays: does the result still show the original's failure class?"""
    wanted = original.failure_class
    if wanted is None:
        raise ValueError("the original run passed its check: nothing to minimize")
    return lambda result: wanted in result.kinds


# ---------------------------------------------------------------------------------------
# Fault ids and the replay command


def fault_id(identity: FaultIdentity) -> str:
    """A short, stable, shell-safe name for a fault identity."""
    digest = hashlib.blake2b(identity.to_json().encode(), digest_size=4).hexdigest()
    return f"{identity.kind.value}.{digest}"


def parse_fault_ids(text: str) -> tuple[str, ...]:
    """The ids of a `--faults` argument ("none" or "" for no faults)."""
    if text.strip() in ("", "none"):
        return ()
    return tuple(part.strip() for part in text.split(",") if part.strip())


def resolve_fault_ids(
    ids: Iterable[str], fired: Iterable[FaultIdentity]
) -> tuple[FaultIdentity, ...]:
    """The identities named by `ids`, looked up among those a run fired.

    Raises KeyError naming the ids no fired fault has (the seed, code or profile differ
    from the run that printed them) and ValueError if two fired faults share an id.
    """
    table: dict[str, FaultIdentity] = {}
    for identity in fired:
        name = fault_id(identity)
        other = table.setdefault(name, identity)
        if other != identity:
            raise ValueError(f"fault id {name} names both {other} and {identity}")
    wanted = list(dict.fromkeys(ids))
    unknown = [i for i in wanted if i not in table]
    if unknown:
        raise KeyError(f"no fault fired in this run has id {', '.join(unknown)}")
    return tuple(table[i] for i in wanted)


def case_faults(
    ids: Sequence[str], pinned: Sequence[str], fired: Iterable[FaultIdentity]
) -> tuple[FaultIdentity, ...]:
    """The identities a regression case names (`simulations/regressions/*.toml`).

    `ids` are its `faults`; `pinned` its `fault_identities` (canonical JSON, one per id,
    in the same order) for a case whose full run no longer reaches them, else empty and
    the ids are resolved among `fired`. Raises KeyError naming the ids that no fired
    fault has, and ValueError naming a pinned identity whose id is not the one listed
    (the id scheme or the fault's key changed): a regression must never replay silently
    without the faults that made it one.
    """
    if not pinned:
        return resolve_fault_ids(ids, fired)
    identities = tuple(FaultIdentity.from_json(text) for text in pinned)
    drifted = [
        f"{text} is {fault_id(identity)}, not {name}"
        for name, text, identity in zip(ids, pinned, identities, strict=False)
        if fault_id(identity) != name
    ]
    if len(pinned) != len(ids) or drifted:
        raise ValueError(
            f"fault_identities do not match faults ({len(pinned)} for {len(ids)} ids): "
            + "; ".join(drifted)
        )
    return identities


def format_rates(rates: Mapping[FaultKind, float]) -> str:
    """A `--rates` argument: `kind=rate` for each kind on, comma separated ("none" if
    none is). Rates are written as `repr` writes them, so they read back exactly."""
    on = [f"{kind.value}={rates[kind]!r}" for kind in FaultKind if rates.get(kind, 0.0) > 0.0]
    return ",".join(on) or "none"


def parse_rates(text: str) -> dict[FaultKind, float]:
    """The rates of a `--rates` argument (kinds not named are off). Raises ValueError
    naming a kind that does not exist (and the nearest that does) or a rate that is not
    a number in [0, 1]."""
    rates = dict.fromkeys(FaultKind, 0.0)
    if text.strip() in ("", "none"):
        return rates
    names = {kind.value: kind for kind in FaultKind}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = (s.strip() for s in part.partition("="))
        if not sep:
            raise ValueError(f"{part!r} is not KIND=RATE (e.g. clog=0.25)")
        if name not in names:
            near = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f" (kinds: {', '.join(names)})"
            raise ValueError(f"no fault kind {name!r}{hint}")
        try:
            rate = float(value)
        except ValueError:
            raise ValueError(f"{name}: {value!r} is not a number") from None
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"{name}: a rate is a probability in [0, 1], not {value}")
        rates[names[name]] = rate
    return rates


def replay_command(
    workload: str,
    seed: int,
    faults: Iterable[FaultIdentity | str] | None,
    *,
    program: str = "trio-kafka simulate",
    profile: str | None = None,
    rates: Mapping[FaultKind, float] | None = None,
) -> str:
    """The one command that replays `seed` of `workload` with exactly `faults` (None:
    every fault its plan fires), under the seed's own plan or the given `rates`, with
    `--profile` when given. A user's workload is imported by the command (`--import` its
    module), as the CLI cannot know it otherwise."""
    if profile is not None:
        program += f" --profile {profile}"
    command = (
        f"{program}{_import_option(workload)} --workload {shlex.quote(workload)} --seed {seed}"
    )
    if rates is not None:
        command += f" --rates {format_rates(rates)}"
    if faults is not None:
        ids = [f if isinstance(f, str) else fault_id(f) for f in faults]
        command += f" --faults {','.join(ids) if ids else 'none'}"
    return command


def _import_option(workload: str) -> str:
    """` --import MODULE` for a workload registered outside trio_kafka, else nothing (a
    script's `__main__` cannot be imported by name: nothing either)."""
    from trio_kafka.sim.workloads import WORKLOADS

    spec = WORKLOADS.get(workload)
    module = getattr(spec.run, "__module__", None) if spec is not None else None
    if not module or module == "__main__" or module.startswith("trio_kafka."):
        return ""
    return f" --import {shlex.quote(module)}"


@attrs.frozen(slots=True)
class MinimizedFaults:
    """What `minimize_faults` found, ready to print."""

    faults: tuple[FaultIdentity, ...]
    before: int
    replays: int
    command: str

    def render(self) -> str:
        lines = [
            f"minimized {self.before} -> {len(self.faults)} fault(s) in {self.replays} replays"
        ]
        lines += [f"  {fault_id(f)}  {f}" for f in self.faults]
        lines.append(f"replay: {self.command}")
        return "".join(line + "\n" for line in lines)


def minimize_faults(
    workload: str,
    seed: int,
    fired: Sequence[FaultIdentity],
    still_fails: Callable[[tuple[FaultIdentity, ...]], bool],
    *,
    max_replays: int | None = None,
) -> MinimizedFaults:
    """ddmin over the faults a failing run fired, and the command replaying the result."""
    result = ddmin(fired, still_fails, max_replays=max_replays)
    return MinimizedFaults(
        result.minimal, len(fired), result.replays, replay_command(workload, seed, result.minimal)
    )
