"""`trio-kafka simulate`: run seeds of a simulated workload, report, minimize failures.

Seeds run in this process, in `--jobs` worker processes, or as Spark tasks (`--spark
[--master URL]`, the spark extra) (each seed is independent and
a pure function of its number, so the order in which workers finish does not matter: the
report is assembled in seed order). A failing seed is minimized here, in the parent:
delta debugging over the fault identities it fired, keeping its failure class, and the
one command that replays the minimal fault list is printed.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import click

from trio_kafka._cli.simulate_options import (
    default_jobs,
    import_workloads,
    parse_duration,
    quiet_client_logs,
    resolve_workload,
)
from trio_kafka.sim.faults import BUGGIFY_SITES, MIN_FAULT_SHARE, FaultKind, rare_kinds
from trio_kafka.sim.minimize import (
    case_faults,
    fault_id,
    parse_fault_ids,
    replay_command,
    resolve_fault_ids,
)
from trio_kafka.sim.runner import SeedResult, run_seed, still_fails
from trio_kafka.sim.workloads import WORKLOADS


def _init_worker(imports: Sequence[str]) -> None:
    quiet_client_logs()
    import_workloads(imports)


def _run_one(args: tuple[str, int, str]) -> SeedResult:
    workload, seed, profile = args
    return run_seed(workload, seed, profile=profile).result


def run_many(
    workload: str,
    seeds: Sequence[int],
    profile: str,
    jobs: int,
    imports: Sequence[str] = (),
) -> Iterator[SeedResult]:
    """Results in seed order (workers may finish out of order; `map` keeps the order)."""
    tasks = [(workload, s, profile) for s in seeds]
    if jobs <= 1:
        for task in tasks:
            yield _run_one(task)
        return
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=jobs, initializer=_init_worker, initargs=(tuple(imports),)
    ) as pool:
        yield from pool.map(_run_one, tasks, chunksize=max(1, min(16, len(tasks) // (4 * jobs))))


def run_for(
    workload: str,
    first_seed: int,
    profile: str,
    jobs: int,
    seconds: float,
    *,
    max_seeds: int | None = None,
    imports: Sequence[str] = (),
) -> Iterator[SeedResult]:
    """Seeds first_seed, first_seed + 1... until `seconds` of wall time are spent (the
    seeds started by then finish), in seed order; at most `max_seeds`."""
    deadline = time.monotonic() + seconds
    chunk = 8 * max(1, jobs)
    next_seed = first_seed
    limit = None if max_seeds is None else first_seed + max_seeds
    pool = (
        concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, initializer=_init_worker, initargs=(tuple(imports),)
        )
        if jobs > 1
        else None
    )
    try:
        while time.monotonic() < deadline and (limit is None or next_seed < limit):
            stop = next_seed + chunk if limit is None else min(next_seed + chunk, limit)
            tasks = [(workload, s, profile) for s in range(next_seed, stop)]
            next_seed = stop
            if pool is None:
                for task in tasks:
                    yield _run_one(task)
                    if time.monotonic() >= deadline:
                        return
            else:
                yield from pool.map(_run_one, tasks)
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)


def minimize(result: SeedResult, *, max_replays: int = 200) -> dict[str, Any]:
    """ddmin over the faults `result` fired, keeping its failure class."""
    from trio_kafka.sim.minimize import ddmin

    assert result.failure_class is not None
    fired = result.fired_identities()
    test = still_fails(result.workload, result.seed, result.profile, result.failure_class)
    found = ddmin(fired, test, max_replays=max_replays)
    program = f"trio-kafka simulate --profile {result.profile}"
    return {
        "before": len(fired),
        "faults": [fault_id(f) for f in found.minimal],
        "identities": [str(f) for f in found.minimal],
        "replays": found.replays,
        "replay": replay_command(result.workload, result.seed, found.minimal, program=program),
    }


@click.command()
@click.option(
    "--workload",
    "-w",
    default=None,
    help="Workload name (see --list; default idempotent).",
)
@click.option(
    "--seeds", "-n", type=int, default=None, help="How many seeds (default 100; 1 with --seed)."
)
@click.option("--seed", type=int, default=None, help="First seed (alone: just this one).")
@click.option(
    "--profile",
    type=click.Choice(["lite", "standard"]),
    default=None,
    help="Fault rates, phase lengths and workload size (default lite).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes (default: the machine's cores).",
)
@click.option(
    "--budget",
    default=None,
    metavar="DURATION",
    help="Run seeds (from --seed, default 0) until this much wall time is spent: "
    "90s, 15m, 1h30m (--seeds then caps the count).",
)
@click.option(
    "--import",
    "imports",
    multiple=True,
    metavar="MODULE",
    help="Import MODULE first: its @register'ed workloads become --workload names "
    "(repeat the option). --workload MODULE:FUNCTION imports it too.",
)
@click.option(
    "--scenario",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A scenario file (simulations/*.toml); command-line options win.",
)
@click.option(
    "--replay",
    "replay_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Rerun the seeds of a JSON report or a regression file.",
)
@click.option(
    "--faults",
    default=None,
    help="With --seed: fire exactly these fault ids (comma separated, or 'none').",
)
@click.option(
    "--json",
    "json_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a JSON report.",
)
@click.option(
    "--trace",
    "trace_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --seed: write the full trace.",
)
@click.option("--no-minimize", is_flag=True, help="Do not minimize failing seeds.")
@click.option(
    "--mutants",
    "mutant_search",
    is_flag=True,
    help="Hunt the planted client bugs: for each, seeds until the first failure "
    "(--seeds: at most this many, default 2000), then minimize.",
)
@click.option(
    "--mutant",
    "mutant_names",
    multiple=True,
    help="With --mutants: only these (repeat the option); see --list.",
)
@click.option(
    "--spark",
    "on_spark",
    is_flag=True,
    help="Run the seeds on Spark instead of local processes (needs the spark extra; "
    "--jobs is then ignored). Failing seeds are minimized here.",
)
@click.option(
    "--master",
    default=None,
    metavar="URL",
    help="With --spark: the Spark master (default: the active session, else local[*]).",
)
@click.option(
    "--ledger",
    "ledger_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Append this run (date, commit, workload, profile, seeds, failed, ops) to a "
    "ledger CSV, e.g. simulations/ledger.csv.",
)
@click.option(
    "--ledger-summary",
    "ledger_summary",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Print a ledger's distinct seeds per workload and profile (Markdown) and exit.",
)
@click.option("--list", "list_workloads", is_flag=True, help="List the workloads and exit.")
def simulate(
    workload: str | None,
    seeds: int | None,
    seed: int | None,
    profile: str | None,
    jobs: int | None,
    budget: str | None,
    imports: tuple[str, ...],
    scenario: Path | None,
    replay_file: Path | None,
    faults: str | None,
    json_file: Path | None,
    trace_file: Path | None,
    no_minimize: bool,
    mutant_search: bool,
    mutant_names: tuple[str, ...],
    on_spark: bool,
    master: str | None,
    ledger_file: Path | None,
    ledger_summary: Path | None,
    list_workloads: bool,
) -> None:
    """Run the real client against simulated brokers and a faulty simulated network."""
    from rich.console import Console

    console = Console(stderr=True)
    click.get_current_context().call_on_close(quiet_client_logs())
    defaults: dict[str, Any] = {}
    if scenario is not None:
        import tomllib

        defaults = tomllib.loads(scenario.read_text())
    workload = workload or defaults.get("workload", "idempotent")
    profile = profile or defaults.get("profile", "lite")
    jobs = jobs or int(defaults.get("jobs", default_jobs()))
    try:
        import_workloads(imports)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import: {exc}", param_hint="--import") from None
    if ":" in workload:  # workers import the module too
        imports = (*imports, workload.partition(":")[0])
    workload = resolve_workload(workload, imports)
    seconds = None
    if budget is not None:
        try:
            seconds = parse_duration(budget)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--budget") from None
    if seeds is None and "seeds" in defaults:
        seeds = int(defaults["seeds"])
    if seed is None and "first_seed" in defaults:
        seed = int(defaults["first_seed"])
    if list_workloads:
        for w in WORKLOADS.values():
            click.echo(
                f"{w.name}: {w.description.strip().splitlines()[0] if w.description else ''}"
            )
        from trio_kafka.sim.mutants import MUTANTS

        click.echo("mutants (--mutants):")
        for name, (what, exposed_by) in MUTANTS.items():
            click.echo(f"  {name} [{', '.join(exposed_by)}]: {what}")
        return
    if ledger_summary is not None:
        from trio_kafka._cli import simulate_ledger

        try:
            click.echo(
                simulate_ledger.markdown(
                    simulate_ledger.totals(simulate_ledger.read(ledger_summary))
                ),
                nl=False,
            )
        except simulate_ledger.LedgerError as exc:
            raise click.BadParameter(str(exc), param_hint="--ledger-summary") from None
        return
    if ledger_file is not None and (
        mutant_search or replay_file is not None or faults is not None or trace_file is not None
    ):
        raise click.UsageError(
            "--ledger records runs of seeds: not with --mutants, --replay, --faults or --trace"
        )
    if mutant_search:
        from trio_kafka._cli.simulate_mutants import run_mutants

        report = run_mutants(
            console,
            names=mutant_names,
            budget=seeds if seeds is not None else 2000,
            profile=profile,
            first_seed=seed or 0,
            jobs=jobs,
            minimize=not no_minimize,
        )
        if json_file is not None:
            json_file.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
            console.print(f"report written to {json_file}")
        if report["killed"] < report["mutants"]:
            raise SystemExit(1)
        return
    if workload not in WORKLOADS:
        raise click.BadParameter(
            f"unknown workload {workload!r} (known: {', '.join(WORKLOADS)})",
            param_hint="--workload",
        )
    if replay_file is not None:
        _replay(console, replay_file)
        return
    if faults is not None or trace_file is not None:
        if seed is None:
            raise click.UsageError("--faults and --trace replay one seed: give --seed")
        _single(console, workload, seed, profile, faults, trace_file)
        return
    ledger_start: dict[str, str] = {}
    if ledger_file is not None:  # the run's date and code, as it starts
        from trio_kafka._cli import simulate_ledger

        ledger_start = {
            "started": simulate_ledger.now_utc(),
            "commit": simulate_ledger.code_commit(),
        }
    start = 0 if seed is None else seed
    count = seeds if seeds is not None else (1 if seed is not None else 100)
    if scenario is not None and seeds is not None and "first_seed" in defaults:
        count = seeds
    seed_list = list(range(start, start + count))
    if master is not None and not on_spark:
        raise click.UsageError("--master names a Spark master: use it with --spark")
    if seconds is not None:
        if on_spark:
            raise click.UsageError("--budget runs local processes: not with --spark")
        results = _run_for_budget(
            console, workload, start, profile, jobs, seconds, seeds, tuple(imports)
        )
    elif on_spark:
        results = _run_on_spark(console, workload, seed_list, profile, master)
    else:
        results = _run_with_progress(console, workload, seed_list, profile, jobs, imports)
    report = _report(console, workload, profile, results, minimize_failures=not no_minimize)
    if json_file is not None:
        json_file.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
        console.print(f"report written to {json_file}")
    if ledger_file is not None:
        from trio_kafka._cli import simulate_ledger

        try:
            simulate_ledger.append(
                ledger_file, simulate_ledger.run_row(report, start, **ledger_start)
            )
        except simulate_ledger.LedgerError as exc:
            raise click.BadParameter(str(exc), param_hint="--ledger") from None
        console.print(f"run recorded in {ledger_file}")
    if report["failed"]:
        raise SystemExit(1)


def _run_for_budget(
    console: Any,
    workload: str,
    first_seed: int,
    profile: str,
    jobs: int,
    seconds: float,
    max_seeds: int | None,
    imports: tuple[str, ...],
) -> tuple[list[SeedResult], float]:
    from rich.progress import Progress, TextColumn, TimeElapsedColumn

    results: list[SeedResult] = []
    failed = 0
    started = time.perf_counter()
    with Progress(
        TextColumn("[bold]{task.description}"),
        TextColumn("{task.completed} seeds, {task.fields[failed]} failed"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task(
            f"{workload}/{profile} for {seconds:g} s ({jobs} jobs)", total=None, failed=0
        )
        for result in run_for(
            workload, first_seed, profile, jobs, seconds, max_seeds=max_seeds, imports=imports
        ):
            results.append(result)
            failed += not result.ok
            progress.update(task, advance=1, failed=failed)
    return results, time.perf_counter() - started


def _run_with_progress(
    console: Any,
    workload: str,
    seeds: list[int],
    profile: str,
    jobs: int,
    imports: Sequence[str] = (),
) -> tuple[list[SeedResult], float]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    results: list[SeedResult] = []
    failed = 0
    started = time.perf_counter()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[failed]} failed"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task(f"{workload}/{profile}", total=len(seeds), failed=0)
        for result in run_many(workload, seeds, profile, jobs, imports):
            results.append(result)
            failed += not result.ok
            progress.update(task, advance=1, failed=failed)
    return results, time.perf_counter() - started


def _run_on_spark(
    console: Any, workload: str, seeds: list[int], profile: str, master: str | None
) -> tuple[list[SeedResult], float]:
    """The seeds as Spark tasks (`trio_kafka.spark.simulate_on_spark`), in seed order."""
    try:
        import pyspark  # noqa: F401  (only to say clearly what is missing)

        from trio_kafka import spark
    except ImportError as exc:
        raise click.UsageError(
            f"--spark needs PySpark, which is not installed ({exc}): "
            "pip install 'trio-kafka[spark]'"
        ) from exc
    where = master or "the active Spark session, else local[*]"
    console.print(f"{workload}/{profile}: {len(seeds)} seeds on Spark ({where})")
    started = time.perf_counter()
    results = list(spark.simulate_on_spark(workload, seeds, profile, master=master))
    return results, time.perf_counter() - started


def _report(
    console: Any,
    workload: str,
    profile: str,
    run: tuple[list[SeedResult], float],
    *,
    minimize_failures: bool,
) -> dict[str, Any]:
    from rich.table import Table

    results, wall = run
    n = len(results)
    virtual = sum(r.virtual_time for r in results)
    cpu = sum(r.wall_time for r in results)
    kinds = {k.value: 0 for k in FaultKind}
    totals = {k.value: 0 for k in FaultKind}
    sites = dict.fromkeys(BUGGIFY_SITES.names(), 0)
    violations: dict[str, int] = {}
    ops: dict[str, int] = {}
    for r in results:
        for kind, count in r.faults.items():
            totals[kind] += count
            kinds[kind] += count > 0
        for site in r.buggify_sites:
            sites[site] = sites.get(site, 0) + 1
        for cls in dict.fromkeys(r.classes):
            violations[cls] = violations.get(cls, 0) + 1
        for status, count in r.ops.items():
            ops[status] = ops.get(status, 0) + count
    failed = [r for r in results if not r.ok]

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
            console.print(f"  replay: {found['replay']}", markup=False, highlight=False)
        else:
            entry["replay"] = replay_command(
                r.workload,
                r.seed,
                r.fired_identities(),
                program=f"trio-kafka simulate --profile {r.profile}",
            )
        failures.append(entry)
    return {
        "workload": workload,
        "profile": profile,
        "seeds": n,
        "failed": len(failed),
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
        "results": [r.to_json() for r in results],
    }


def _single(
    console: Any,
    workload: str,
    seed: int,
    profile: str,
    faults: str | None,
    trace_file: Path | None,
) -> None:
    identities = None
    if faults is not None:
        ids = parse_fault_ids(faults)
        full = run_seed(workload, seed, profile=profile).result
        try:
            identities = resolve_fault_ids(ids, full.fired_identities())
        except KeyError as exc:
            raise click.BadParameter(str(exc), param_hint="--faults") from None
    out = run_seed(workload, seed, profile=profile, faults=identities, trace=trace_file is not None)
    r = out.result
    status = "ok" if r.ok else f"FAILED ({r.failure_class})"
    console.print(f"seed {seed} ({workload}, {profile}): {status}")
    console.print(f"  ops: {dict(r.ops)}  virtual {r.virtual_time:.2f} s  wall {r.wall_time:.3f} s")
    console.print(f"  faults: {', '.join(f'{k}={v}' for k, v in r.faults.items() if v) or 'none'}")
    for v in r.violations:
        console.print(f"  {v}", markup=False, highlight=False)
    if trace_file is not None:
        trace_file.write_text(out.trace)
        console.print(
            f"trace ({len(out.trace)} bytes, digest {r.trace_digest}) written to {trace_file}"
        )
    if not r.ok:
        raise SystemExit(1)


def load_cases(path: Path) -> list[dict[str, Any]]:
    """The seeds of a JSON report (`failures`) or of a regression file (one case)."""
    text = path.read_text()
    if path.suffix == ".toml":
        import tomllib

        data: Any = tomllib.loads(text)
    else:
        data = json.loads(text)
    if "failures" in data:
        return [
            {
                "workload": data["workload"],
                "profile": data["profile"],
                "seed": f["seed"],
                "faults": f.get("minimized", {}).get("faults"),
            }
            for f in data["failures"]
        ]
    return [data]


def _replay(console: Any, path: Path) -> None:
    bad = 0
    for case in load_cases(path):
        faults = case.get("faults")
        identities = None
        if faults is not None:
            full = run_seed(case["workload"], case["seed"], profile=case.get("profile", "lite"))
            identities = case_faults(
                list(faults), case.get("fault_identities", ()), full.result.fired_identities()
            )
        r = run_seed(
            case["workload"], case["seed"], profile=case.get("profile", "lite"), faults=identities
        ).result
        bad += not r.ok
        console.print(
            f"seed {r.seed} ({r.workload}, {r.profile}, "
            f"{'all faults' if identities is None else f'{len(identities)} fault(s)'}): "
            f"{'ok' if r.ok else 'FAILED ' + str(r.failure_class)}"
        )
        for v in r.violations[:5]:
            console.print(f"  {v}", markup=False, highlight=False)
    if bad:
        raise SystemExit(1)
