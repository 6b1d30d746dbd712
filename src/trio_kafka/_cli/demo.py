"""`trio-kafka demo`: the main job, a tour of every guarantee in about two minutes.

1. a mock broker in this process (or the one at `--bootstrap`);
2. a bulk load of `--records` rows into a 6-partition CAS topic by a child process that
   is killed with SIGKILL at a seeded point, run again, and read back exactly;
3. two conditional writers racing on one commit log; a transactional commit, abort and
   commit, and what read_committed and read_uncommitted readers see;
4. `--seeds` seeds of the simulator over the idempotent, transactional and CAS workloads;
5. one table: each guarantee, how it was checked, the numbers, pass or fail. The exit
   status is 1 when any guarantee failed.

Steps 2 and 3 run in one event loop with the broker (trio; `--backend asyncio` runs them
under asyncio, the mock broker then in a trio thread of its own); step 4 runs after it is
closed (its worker processes fork from a process without threads or event loop; the
simulator is trio's). A step that raises
is reported as a failed guarantee, and the demo goes on with the next.
"""

from __future__ import annotations

import contextlib
import random
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import click
from rich.console import Console
from rich.table import Table

from trio_kafka._cli._demo_ui import Check, make_console, step

RECORDS = 1_000_000
SEEDS = 500
QUICK_RECORDS = 20_000
QUICK_SEEDS = 6


@contextlib.asynccontextmanager
async def _broker(console: Console, bootstrap: str | None) -> AsyncIterator[str]:
    if bootstrap is not None:
        console.print(f"using the broker at {bootstrap}", highlight=False)
        yield bootstrap
        return
    from trio_kafka.broker import open_cluster

    async with open_cluster() as cluster:
        console.print(
            f"mock broker listening at {cluster.bootstrap} (in this process, in memory; "
            "the loader child process reaches it over TCP)",
            highlight=False,
        )
        yield cluster.bootstrap


async def _guarded(
    console: Console, name: str, run: Callable[[], Awaitable[list[Check]]]
) -> list[Check]:
    """A step's checks; a step that raises is one failed check naming the error."""
    try:
        return await run()
    except Exception as exc:
        console.print(f"[red]{name} raised {type(exc).__name__}: {exc}[/]", highlight=False)
        return [Check(name, "the step raised", f"{type(exc).__name__}: {exc}", False)]


async def _with_broker(
    console: Console,
    bootstrap: str | None,
    records: int,
    seed: int,
    suffix: str,
    appends: int,
    per_txn: int,
) -> tuple[list[Check], int]:
    """The checks of steps 1-3, and the exit status a signal asks for (0: none)."""
    from trio_kafka._cli._demo_bulk import bulk_load_step
    from trio_kafka._cli._demo_txn import commit_log_step, transactions_step
    from trio_kafka._cli._signals import stop_on_signals

    checks: list[Check] = []
    # A signal stops the step under way at once (its loader child is killed with it):
    # a demo has nothing to finish; the checks done so far are shown.
    async with (
        stop_on_signals(0.0, doing="stopping the demo") as stop,
        _broker(console, bootstrap) as servers,
    ):
        step(console, 1, "the broker")
        step(console, 2, f"bulk load {records:,} records, kill the loader, resume, read back")
        checks += await _guarded(
            console,
            "bulk load",
            lambda: bulk_load_step(console, servers, records, seed, suffix),
        )
        step(console, 3, "a commit-log race and transactions")
        checks += await _guarded(
            console, "commit log race", lambda: commit_log_step(console, servers, appends, suffix)
        )
        checks += await _guarded(
            console, "transactions", lambda: transactions_step(console, servers, per_txn, suffix)
        )
    return checks, stop.exit_code


class _Signalled(Exception):
    """SIGINT or SIGTERM during the simulator step (no event loop runs then)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGINT and SIGTERM raise `_Signalled` in the main thread for the block (the
    simulator's pool then cancels the seeds not started and waits for those running)."""

    def raise_it(signum: int, frame: object) -> None:
        raise _Signalled(signum)

    previous = {s: signal.signal(s, raise_it) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def final_table(checks: list[Check], elapsed: float) -> Table:
    table = Table(title=f"trio-kafka demo: the guarantees ({elapsed:.0f} s)", show_lines=True)
    table.add_column("guarantee", ratio=3)
    table.add_column("how it was checked", ratio=4)
    table.add_column("numbers", ratio=4)
    table.add_column("result", justify="center", no_wrap=True)
    for check in checks:
        match check.ok:
            case True:
                result = "[bold green]PASS[/]"
            case False:
                result = "[bold red]FAIL[/]"
            case None:
                result = "[yellow]not available[/]"
        table.add_row(check.guarantee, check.how, check.numbers, result)
    return table


@click.command()
@click.option("--bootstrap", help="host:port of a broker (default: a mock broker in-process).")
@click.option("--records", type=int, default=None, help=f"Rows to bulk load (default {RECORDS:,}).")
@click.option(
    "--seeds",
    type=click.IntRange(min=1),
    default=None,
    help=f"Simulator seeds in all (default {SEEDS}; at least one per workload).",
)
@click.option("--seed", type=int, default=None, help="Seed of the kill point (default: random).")
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Simulator workers.",
)
@click.option(
    "--backend",
    type=click.Choice(["trio", "asyncio"]),
    default="trio",
    show_default=True,
    help="The event loop the client steps (2 and 3) run on.",
)
@click.option(
    "--quick",
    is_flag=True,
    help=f"Small sizes ({QUICK_RECORDS:,} records, {QUICK_SEEDS} seeds): seconds, not minutes.",
)
def demo(
    bootstrap: str | None,
    records: int | None,
    seeds: int | None,
    seed: int | None,
    jobs: int,
    quick: bool,
    backend: str = "trio",
) -> None:
    """Show every guarantee at work: a crashed bulk load resumed exactly, a commit-log
    race, transactions, and the simulator, then one table of what passed."""
    import anyio

    from trio_kafka._cli._demo_sim import simulate_step

    console = make_console()
    records = records if records is not None else (QUICK_RECORDS if quick else RECORDS)
    seeds = seeds if seeds is not None else (QUICK_SEEDS if quick else SEEDS)
    if records < 100:
        raise click.BadParameter("at least 100", param_hint="--records")
    if seed is None:
        seed = random.SystemRandom().randrange(1_000_000)
    suffix = f"{seed}-{uuid.uuid4().hex[:6]}"
    appends, per_txn = (20, 30) if quick else (100, 1000)
    console.print(
        f"[bold]trio-kafka demo[/] (seed {seed}; `trio-kafka demo --seed {seed}` replays "
        "the kill point)",
        highlight=False,
    )
    started = time.perf_counter()
    run = (console, bootstrap, records, seed, suffix, appends, per_txn)
    if backend == "asyncio" and bootstrap is None:
        # The mock broker is trio's: it runs in a thread of its own, reached over TCP.
        from trio_kafka.broker import run_in_thread

        with run_in_thread() as cluster:
            console.print(
                f"mock broker in a thread at {cluster.bootstrap}; the client runs on asyncio",
                highlight=False,
            )
            run = (console, cluster.bootstrap, *run[2:])
            checks, code = anyio.run(_with_broker, *run, backend="asyncio")
    else:
        checks, code = anyio.run(_with_broker, *run, backend=backend)
    if not code:
        step(console, 4, f"the simulator: {seeds} seeds")
        try:
            with _signals_raise():
                checks += simulate_step(console, seeds, jobs)
        except _Signalled as exc:
            console.print(f"received {signal.Signals(exc.signum).name}: stopping the demo")
            code = 128 + exc.signum
        except Exception as exc:
            console.print(f"[red]the simulator raised {type(exc).__name__}: {exc}[/]")
            checks.append(
                Check("simulator", "the step raised", f"{type(exc).__name__}: {exc}", False)
            )
    elapsed = time.perf_counter() - started
    if code:
        console.print(final_table(checks, elapsed))
        console.print(
            f"[bold yellow]the demo was stopped by a signal[/] after {len(checks)} check(s) "
            f"({elapsed:.0f} s, seed {seed}); the rest were not run",
            highlight=False,
        )
        raise SystemExit(code)
    step(console, 5, "the guarantees")
    console.print(final_table(checks, elapsed))
    failed = [c for c in checks if c.ok is False]
    passed = [c for c in checks if c.ok]
    skipped = [c for c in checks if c.ok is None]
    if failed:
        console.print(
            f"[bold red]{len(failed)} of {len(checks)} guarantees FAILED[/] "
            f"({elapsed:.0f} s, seed {seed})",
            highlight=False,
        )
        raise SystemExit(1)
    note = f", {len(skipped)} not available here (see its row)" if skipped else ""
    console.print(
        f"[bold green]every guarantee passed[/]: {len(passed)} of {len(checks)}{note} "
        f"({elapsed:.0f} s, seed {seed})",
        highlight=False,
    )


__all__ = ["demo"]
