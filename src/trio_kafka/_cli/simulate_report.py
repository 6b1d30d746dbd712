"""What `trio-kafka simulate` makes of a run's seeds: the summary, fault and violation
tables on the console (from the run's `Tally`), each failing seed minimized (delta debugging over the fault
identities it fired, keeping its failure class, here in the parent process) with the
one command that replays the minimal fault list, and the JSON report."""

from __future__ import annotations

from typing import Any

from trio_kafka._cli.simulate_workers import SeedRun
from trio_kafka.sim.faults import MIN_FAULT_SHARE, FaultKind, rare_kinds
from trio_kafka.sim.minimize import fault_id, replay_command
from trio_kafka.sim.runner import SeedResult, still_fails


def minimize(result: SeedResult, *, max_replays: int = 200) -> dict[str, Any]:
    """ddmin over the faults `result` fired, keeping its failure class."""
    from trio_kafka.sim.minimize import ddmin

    assert result.failure_class is not None
    fired = result.fired_identities()
    test = still_fails(result.workload, result.seed, result.profile, result.failure_class)
    found = ddmin(fired, test, max_replays=max_replays)
    return {
        "before": len(fired),
        "faults": [fault_id(f) for f in found.minimal],
        "identities": [str(f) for f in found.minimal],
        "replays": found.replays,
        "replay": replay_command(
            result.workload, result.seed, found.minimal, profile=result.profile
        ),
    }


def report_results(
    console: Any,
    workload: str,
    profile: str,
    run: SeedRun,
    *,
    minimize_failures: bool,
) -> dict[str, Any]:
    from rich.table import Table

    tally, wall = run.tally, run.wall
    if run.interrupted is not None:
        minimize_failures = False  # stopped: say how to replay, and exit
    if tally.spool_error is not None:
        console.print(f"[bold yellow]{tally.spool_error}[/]")
    n, virtual, cpu = tally.count, tally.virtual, tally.cpu
    kinds, totals, sites = tally.kinds, tally.totals, tally.sites
    violations, ops, failed = tally.violations, tally.ops, tally.failed

    summary = Table(title=f"trio-kafka simulate: {workload}, profile {profile}")
    summary.add_column("measure")
    summary.add_column("value", justify="right")
    summary.add_row("seeds", str(n))
    summary.add_row("failed seeds", str(len(failed)))
    summary.add_row("wall time", f"{wall:.1f} s")
    summary.add_row("seeds per minute", f"{60 * n / wall:.0f}" if wall else "-")
    summary.add_row("virtual time", f"{virtual:.0f} s")
    summary.add_row("virtual / wall", f"{virtual / wall:.0f}x" if wall else "-")
    summary.add_row("virtual / cpu (per seed)", f"{virtual / cpu:.0f}x" if cpu else "-")
    summary.add_row("ops", " ".join(f"{k}={v}" for k, v in sorted(ops.items())))
    console.print(summary)

    rare = rare_kinds(kinds, n)
    lowest = min(kinds, key=lambda k: kinds[k])
    if not n:
        verdict = "no seeds"
    elif rare:
        verdict = (
            f"[bold red]fired in fewer than {MIN_FAULT_SHARE:.0%} of seeds: {', '.join(rare)}[/]"
        )
    else:
        verdict = (
            f"every kind fired in at least {MIN_FAULT_SHARE:.0%} of seeds "
            f"(the rarest: {lowest}, {100 * kinds[lowest] / n:.1f}%)"
        )
    fault_table = Table(title="faults fired", caption=verdict)
    fault_table.add_column("#", justify="right")
    fault_table.add_column("kind")
    fault_table.add_column("seeds", justify="right")
    fault_table.add_column("% of seeds", justify="right")
    fault_table.add_column("total fired", justify="right")
    for i, fault_kind in enumerate(FaultKind, 1):
        kind = fault_kind.value
        fault_table.add_row(
            str(i),
            kind,
            str(kinds[kind]),
            f"{100 * kinds[kind] / n:.1f}" if n else "-",
            str(totals[kind]),
        )
    for site, count in sites.items():
        fault_table.add_row(
            "", f"  buggify {site}", str(count), f"{100 * count / n:.1f}" if n else "-", ""
        )
    console.print(fault_table)

    if violations:
        vt = Table(title="violations by class (seeds)")
        vt.add_column("class")
        vt.add_column("seeds", justify="right")
        for cls, count in sorted(violations.items()):
            vt.add_row(cls, str(count))
        console.print(vt)

    failures: list[dict[str, Any]] = []
    for r in failed:
        entry: dict[str, Any] = {
            "seed": r.seed,
            "failure_class": r.failure_class,
            "violations": list(r.violations[:10]),
        }
        console.print(f"[bold red]seed {r.seed} failed[/]: {r.failure_class}")
        for v in r.violations[:5]:
            console.print(f"  {v}", markup=False, highlight=False)
        if minimize_failures and len(failures) < 10:
            found = minimize(r)
            entry["minimized"] = found
            console.print(
                f"  minimized {found['before']} -> {len(found['faults'])} fault(s) "
                f"in {found['replays']} replays:"
            )
            for fid, ident in zip(found["faults"], found["identities"]):
                console.print(f"    {fid}  {ident}", markup=False, highlight=False)
            console.print(
                f"  replay: {found['replay']}", markup=False, highlight=False, soft_wrap=True
            )
        else:
            entry["replay"] = replay_command(
                r.workload,
                r.seed,
                r.fired_identities(),
                profile=r.profile,
            )
        failures.append(entry)
    return {
        "workload": workload,
        "profile": profile,
        "seeds": n,
        "failed": len(failed),
        # What stopped the run before its last seed (SIGINT, SIGTERM, a dead worker),
        # else None: `seeds` then counts those finished, from the first.
        "interrupted": run.interrupted,
        "wall_time": wall,
        "seeds_per_minute": 60 * n / wall if wall else None,
        "virtual_time": virtual,
        "virtual_to_wall": virtual / wall if wall else None,
        # Per kind: in how many seeds it fired, that as a share of the seeds, and how
        # many times in all; then the kinds under the 1% floor (`rare_kinds`).
        "faults": {
            k: {"seeds": kinds[k], "share": kinds[k] / n if n else None, "fired": totals[k]}
            for k in kinds
        },
        "fault_kinds_below_min_share": rare,
        "min_fault_share": MIN_FAULT_SHARE,
        "buggify_sites": sites,
        "violations": violations,
        "ops": ops,
        "failures": failures,
        # "results", each seed's `SeedResult.to_json`, is streamed into the file from the
        # tally's spool by `write_report` (not held here: see simulate_tally.py).
    }
