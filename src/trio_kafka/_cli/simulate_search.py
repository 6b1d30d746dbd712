"""`trio-kafka simulate --search N`: Hypothesis draws N fault plans (a seed and a rate per
fault kind) instead of a range of seeds; the first plan that fails is shrunk (kinds the
failure does not need turned off, rates lowered, the seed made small), then its faults are
minimized, and the one command that replays the result is printed (`sim/search.py`)."""

from __future__ import annotations

import time
from typing import Any

import click


def run_search(
    console: Any,
    *,
    workload: str,
    profile: str,
    examples: int,
    search_seed: int,
    mutant: str | None,
    minimize: bool,
) -> dict[str, Any]:
    try:
        from trio_kafka.sim.search import search
    except ImportError as exc:  # hypothesis is a test extra
        raise click.UsageError(
            f"--search needs Hypothesis ({exc}): pip install 'hypothesis>=6.100' "
            "(or trio-kafka[test])"
        ) from None
    planted = f", planted bug {mutant}" if mutant else ""
    started = time.perf_counter()
    with console.status(
        f"searching {examples} fault plans of {workload} ({profile}) with Hypothesis "
        f"(search seed {search_seed}{planted})..."
    ):
        try:
            found = search(
                workload,
                profile=profile,
                examples=examples,
                search_seed=search_seed,
                mutant=mutant,
                minimize=minimize,
            )
        except KeyError as exc:  # an unknown mutant
            raise click.BadParameter(str(exc.args[0]), param_hint="--mutant") from None
    elapsed = time.perf_counter() - started
    out = console.print
    replay = None
    if not found.found:
        out(
            f"no failure in {found.examples:,} distinct fault plans of {workload} "
            f"({profile}{planted}; Hypothesis drew {found.drawn:,}), {elapsed:.1f} s"
        )
    else:
        assert found.first is not None and found.first_result is not None
        assert found.shrunk is not None and found.shrunk_result is not None
        first, shrunk = found.first_result, found.shrunk_result
        out(
            f"plan {found.examples:,} of {workload} ({profile}{planted}) FAILED "
            f"({first.failure_class}), {len(first.fired)} faults fired: "
            f"{found.first.describe()}",
            markup=False,
            highlight=False,
        )
        out(
            f"shrunk in {found.shrink_runs} runs to {len(found.shrunk.kinds_on)} kind(s) on, "
            f"{len(shrunk.fired)} faults fired: {found.shrunk.describe()}",
            markup=False,
            highlight=False,
        )
        for line in shrunk.violations[:5]:
            out(f"  {line}", markup=False, highlight=False)
        if minimize:
            out(
                f"minimized {len(shrunk.fired)} -> {len(found.minimized)} fault(s) "
                f"in {found.replays} replays:"
            )
            for fid, ident in zip(found.minimized, found.minimized_identities):
                out(f"    {fid}  {ident}", markup=False, highlight=False)
        replay = f"{found.replay}{f' --mutant {mutant}' if mutant else ''}"
        out(f"replay: {replay}", markup=False, highlight=False, soft_wrap=True)
        out(f"{elapsed:.1f} s")
    report = found.to_json()
    report["seconds"] = round(elapsed, 3)
    report["replay"] = replay
    return report
