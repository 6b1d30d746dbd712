"""`trio-kafka simulate --mutants`: hunt the planted client bugs and print the kill rate
(`--mutants --search N`: with fault plans Hypothesis draws, `sim.search.hunt_by_search`).

For each mutant (sim/mutants.py), `sim.mutants.hunt` runs seeds of the workloads
that can expose it until the first failing one (at most `--seeds`, default 2,000), then
minimizes its fault list. The table says, per mutant, whether it was caught, by which
workload and seed, how many seeds that took, the failure class and the minimized fault
list with the command that replays it (the mutant must be enabled for the replay to
fail: `--mutants --mutant NAME --seed S --seeds 1` does exactly that).
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

from trio_kafka._cli.simulate_options import quiet_client_logs
from trio_kafka.sim.mutants import MUTANTS, Hunt, Summary, hunt


def run_mutants(
    console: Any,
    *,
    names: tuple[str, ...],
    budget: int,
    profile: str,
    first_seed: int,
    jobs: int,
    minimize: bool,
    by_search: bool = False,
) -> dict[str, Any]:
    from rich.table import Table

    unknown = [n for n in names if n not in MUTANTS]
    if unknown:
        import click

        raise click.BadParameter(
            f"unknown mutant(s) {', '.join(unknown)} (known: {', '.join(MUTANTS)})",
            param_hint="--mutant",
        )
    chosen = list(names) or list(MUTANTS)
    hunts: list[Hunt] = []
    started = time.perf_counter()

    pool = (
        concurrent.futures.ProcessPoolExecutor(max_workers=jobs, initializer=quiet_client_logs)
        if jobs > 1 and not by_search
        else None
    )
    try:
        for name in chosen:
            t0 = time.perf_counter()
            with console.status(f"hunting {name}..."):
                if by_search:
                    from trio_kafka.sim.search import hunt_by_search  # needs hypothesis

                    found = hunt_by_search(
                        name,
                        budget=budget,
                        profile=profile,
                        search_seed=first_seed,
                        minimize=minimize,
                    )
                else:
                    found = hunt(
                        name,
                        budget=budget,
                        profile=profile,
                        first_seed=first_seed,
                        pool=pool,
                        chunk=8 * max(jobs, 1),
                        minimize=minimize,
                    )
            hunts.append(found)
            unit = "distinct plan(s)" if by_search else "seed(s)"
            verdict = (
                f"caught by {found.workload} seed {found.seed} after {found.seeds_run} {unit}"
                f" ({found.failure_class}), minimized to {len(found.minimized)} fault(s)"
                if found.killed
                else f"SURVIVED {found.seeds_run} {unit}"
            )
            console.print(f"{name}: {verdict} [{time.perf_counter() - t0:.0f} s]")
    finally:
        if pool is not None:
            pool.shutdown()
    summary = Summary(tuple(hunts))
    drawn = "Hypothesis draws" if by_search else "seeds"
    table = Table(title=f"planted bugs (profile {profile}, at most {budget} {drawn} each)")
    runs_column = "plans run" if by_search else "seeds run"
    for column in ("mutant", "caught", "workload", "seed", runs_column, "class", "min. faults"):
        table.add_column(column, justify="right" if column.startswith(("seed", "min")) else "left")
    for h in hunts:
        table.add_row(
            h.mutant,
            "yes" if h.killed else "NO",
            h.workload or "-",
            "-" if h.seed is None else str(h.seed),
            str(h.seeds_run),
            h.failure_class or "-",
            str(len(h.minimized)) if h.killed and minimize else "-",
        )
    console.print(table)
    console.print(
        f"kill rate {summary.killed}/{len(hunts)} ({100 * summary.kill_rate:.0f}%), median "
        f"{'plans' if by_search else 'seeds'} to find {summary.median_seeds}, median "
        "minimized fault list "
        f"{summary.median_minimized}, {time.perf_counter() - started:.0f} s"
    )
    for h in hunts:
        if h.killed:
            console.print(f"  {h.mutant}: {h.violation}", markup=False, highlight=False)
            if h.replay is not None:
                console.print(
                    f"    replay: {h.replay}", markup=False, highlight=False, soft_wrap=True
                )
            elif h.minimized:
                console.print(
                    f"    faults {','.join(h.minimized)} "
                    f"(replay: trio-kafka simulate --mutants --mutant {h.mutant} "
                    f"--seed {h.seed} --seeds 1)",
                    markup=False,
                    highlight=False,
                )
    report = summary.to_json()
    report["profile"] = profile
    report["budget"] = budget
    report["by"] = "search" if by_search else "seeds"
    return report
