"""`trio-kafka simulate`: run seeds of a simulated workload, report, minimize failures.

This module is the command: its options and what each combination does. The work is
elsewhere, one job per module: `simulate_options.py` (defaults, durations, the user's
workloads), `simulate_workers.py` (seeds in this process, in `--jobs` worker processes
or on Spark, with progress), `simulate_report.py` (tables, minimizing failing seeds, the
JSON report), `simulate_replay.py` (`--seed`/`--faults`/`--trace` and `--replay`),
`simulate_mutants.py` (`--mutants`), `simulate_ledger.py` (`--ledger`), `simulate_tally.py`
(a run's seeds folded into counts as they come, its memory constant).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from trio_kafka._cli.simulate_options import (
    SeedOrNext,
    default_jobs,
    import_workloads,
    parse_duration,
    quiet_client_logs,
    resolve_workload,
)
from trio_kafka._cli.simulate_replay import replay_cases, run_single
from trio_kafka._cli.simulate_report import report_results
from trio_kafka._cli.simulate_tally import Tally, write_report
from trio_kafka._cli.simulate_workers import run_for_budget, run_on_spark, run_with_progress
from trio_kafka.sim.workloads import WORKLOADS


@click.command()
@click.option(
    "--workload",
    "-w",
    default=None,
    help="Workload name (see --list; default idempotent).",
)
@click.option(
    "--seeds",
    "-n",
    type=click.IntRange(min=1),
    default=None,
    help="How many seeds (default 100; 1 with --seed).",
)
@click.option(
    "--seed",
    type=SeedOrNext(),
    default=None,
    metavar="SEED|next",
    help="First seed (alone: just this one); 'next': the seed after the last one "
    "--ledger FILE recorded for this workload and profile.",
)
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
@click.option(
    "--rates",
    default=None,
    metavar="KIND=RATE,...",
    help="With --seed: these fault rates instead of the seed's own plan (kinds not named "
    "are off; 'none': no fault), as --search prints them.",
)
@click.option(
    "--search",
    "search_examples",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Let Hypothesis draw N fault plans (a seed and a rate per kind) instead of "
    "running seeds; the first failing plan is shrunk, then its faults minimized. --seed: "
    "the search's random seed (default 0); --mutant: with that planted bug; with "
    "--mutants: hunt the planted bugs this way, N draws each.",
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
    help="With --mutants: only these (repeat the option); with --search or --seed S: "
    "plant this one bug; see --list.",
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
    seed: int | str | None,
    profile: str | None,
    jobs: int | None,
    budget: str | None,
    imports: tuple[str, ...],
    scenario: Path | None,
    replay_file: Path | None,
    faults: str | None,
    json_file: Path | None,
    trace_file: Path | None,
    rates: str | None,
    search_examples: int | None,
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
    for option, path in (("--json", json_file), ("--trace", trace_file), ("--ledger", ledger_file)):
        if path is not None and not path.absolute().parent.is_dir():  # before any run
            raise click.BadParameter(
                f"{path}: the directory {path.absolute().parent} does not exist",
                param_hint=option,
            )
    from rich.console import Console

    console = Console(stderr=True)
    click.get_current_context().call_on_close(quiet_client_logs())
    defaults: dict[str, Any] = {}
    if scenario is not None:
        import tomllib

        defaults = tomllib.loads(scenario.read_text())
    workload = workload or defaults.get("workload", "idempotent")
    profile = profile or defaults.get("profile", "lite")
    jobs_given, seeds_given = jobs is not None, seeds is not None
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
        mutant_search
        or replay_file is not None
        or faults is not None
        or trace_file is not None
        or rates is not None
        or search_examples is not None
    ):
        raise click.UsageError(
            "--ledger records runs of seeds: not with --mutants, --search, --replay, "
            "--faults, --rates or --trace"
        )
    if seed == "next":
        seed = _next_seed(console, ledger_file, workload, profile)
    assert not isinstance(seed, str)
    if search_examples is not None:
        clashing = [
            name
            for name, given in (
                ("--replay", replay_file is not None),
                ("--faults", faults is not None),
                ("--rates", rates is not None),
                ("--trace", trace_file is not None),
                ("--seeds", seeds_given),
                ("--budget", budget is not None),
                ("--spark", on_spark),
                ("--jobs", jobs_given and jobs > 1),
            )
            if given
        ]
        if clashing:
            raise click.UsageError(
                "--search draws its own plans, one after another in this process: not with "
                + ", ".join(clashing)
            )
    if not mutant_search and len(mutant_names) > 1:
        raise click.UsageError("plant one bug at a time (one --mutant) outside --mutants")
    if mutant_search:
        from trio_kafka._cli.simulate_mutants import run_mutants

        report = run_mutants(
            console,
            names=mutant_names,
            by_search=search_examples is not None,
            budget=search_examples or (seeds if seeds is not None else 2000),
            profile=profile,
            first_seed=seed or 0,
            jobs=jobs,
            minimize=not no_minimize,
        )
        _write_report(console, json_file, report)
        if report["killed"] < report["mutants"]:
            raise SystemExit(1)
        return
    if workload not in WORKLOADS:
        raise click.BadParameter(
            f"unknown workload {workload!r} (known: {', '.join(WORKLOADS)})",
            param_hint="--workload",
        )
    planted = mutant_names[0] if mutant_names else None
    if search_examples is not None:
        from trio_kafka._cli.simulate_search import run_search

        report = run_search(
            console,
            workload=workload,
            profile=profile,
            examples=search_examples,
            search_seed=seed or 0,
            mutant=planted,
            minimize=not no_minimize,
        )
        _write_report(console, json_file, report)
        if report["found"]:
            raise SystemExit(1)
        return
    if replay_file is not None:
        replay_cases(console, replay_file)
        return
    if faults is not None or trace_file is not None or rates is not None or planted:
        if seed is None:
            raise click.UsageError(
                "--faults, --rates, --trace and --mutant (outside --mutants and --search) "
                "replay one seed: give --seed"
            )
        if seeds is not None and seeds != 1:
            raise click.UsageError("a replay runs one seed: not with --seeds")
        run_single(console, workload, seed, profile, faults, trace_file, rates, planted)
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
    seed_list = range(start, start + count)
    if master is not None and not on_spark:
        raise click.UsageError("--master names a Spark master: use it with --spark")
    try:
        tally = Tally.keeping_results(json_file is not None)
    except OSError as exc:
        raise click.BadParameter(
            f"no temporary file for the report's per-seed results ({exc})", param_hint="--json"
        ) from None
    try:
        if seconds is not None:
            if on_spark:
                raise click.UsageError("--budget runs local processes: not with --spark")
            results = run_for_budget(
                console, workload, start, profile, jobs, seconds, seeds, tuple(imports), tally
            )
        elif on_spark:
            results = run_on_spark(console, workload, seed_list, profile, master, tally)
        else:
            results = run_with_progress(console, workload, seed_list, profile, jobs, imports, tally)
        report = report_results(
            console, workload, profile, results, minimize_failures=not no_minimize
        )
        _write_report(console, json_file, report, tally)
    finally:
        tally.close()
    if ledger_file is not None:
        from trio_kafka._cli import simulate_ledger

        try:
            note = "" if results.interrupted is None else f"stopped early: {results.interrupted}"
            simulate_ledger.append(
                ledger_file, simulate_ledger.run_row(report, start, note=note, **ledger_start)
            )
        except simulate_ledger.LedgerError as exc:
            raise click.BadParameter(str(exc), param_hint="--ledger") from None
        console.print(f"run recorded in {ledger_file}")
    if report["failed"]:
        raise SystemExit(1)
    if results.exit_status:
        raise SystemExit(results.exit_status)


def _next_seed(console: Any, ledger_file: Path | None, workload: str, profile: str) -> int:
    """`--seed next`: the seed after the last one the ledger recorded for the run."""
    from trio_kafka._cli import simulate_ledger

    if ledger_file is None:
        raise click.UsageError(
            "--seed next starts after the seeds a ledger recorded: give --ledger FILE"
        )
    try:
        rows = simulate_ledger.read(ledger_file) if ledger_file.exists() else []
    except simulate_ledger.LedgerError as exc:
        raise click.BadParameter(str(exc), param_hint="--ledger") from None
    seed = simulate_ledger.next_seed(rows, workload, profile)
    console.print(f"--seed next: {seed} (after the runs of {workload}/{profile} in {ledger_file})")
    return seed


def _write_report(
    console: Any, path: Path | None, report: dict[str, Any], tally: Tally | None = None
) -> None:
    """The JSON report, when `--json` asked for one (with the tally's seeds)."""
    if path is not None:
        write_report(path, report, tally)
        console.print(f"report written to {path}")
