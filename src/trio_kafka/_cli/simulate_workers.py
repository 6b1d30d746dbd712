"""How `trio-kafka simulate` runs its seeds: in this process, in `--jobs` worker
processes, or as Spark tasks (`--spark [--master URL]`, the spark extra), with a progress
display. Each seed is independent and a pure function of its number, so the order in
which workers finish does not matter: results come back in seed order.

A local run stops early, keeping what it has, on SIGINT (Ctrl-C) or SIGTERM: no new
seed starts, the seeds running finish, and the run's report and ledger row hold the
seeds finished, a contiguous range from the first (a second signal stops at once,
keeping nothing). A worker process that dies (killed, out of memory) stops it the same
way. Hours of a sweep are not lost to a stop. (On Linux a worker also ends when the
parent is killed outright.)

A failing seed is said at once, with the command that replays it, not only in the
summary at the end. Where the output is not a terminal (a log file, `nohup`, CI), where
rich shows no live progress, a plain progress line is printed each minute for the first
ten minutes, then each ten minutes: an overnight sweep's log says how far it got.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import itertools
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import attrs
import click

from trio_kafka._cli.simulate_options import import_workloads, quiet_client_logs
from trio_kafka._cli.simulate_tally import Tally
from trio_kafka.sim.minimize import replay_command
from trio_kafka.sim.runner import SeedResult, run_seed


@attrs.frozen
class SeedRun:
    """The seeds a run finished (in seed order, from its first) as a `Tally`, its wall
    time, and what stopped it early (SIGINT, SIGTERM, a worker that died), else None."""

    tally: Tally
    wall: float
    interrupted: str | None = None

    @property
    def exit_status(self) -> int:
        """128 + the signal's number for a run a signal stopped (the shell's way),
        1 for one a dead worker stopped, else 0."""
        if self.interrupted is None:
            return 0
        number = getattr(signal, self.interrupted, None)
        return 128 + int(number) if isinstance(number, signal.Signals) else 1


def _die_with(parent: int) -> None:
    """Linux: end this worker when its parent dies, even by SIGKILL (else it would wait
    for work forever); elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the prctl
        os.kill(os.getpid(), signal.SIGTERM)


def _init_worker(parent: int, imports: Sequence[str]) -> None:
    # Ctrl-C reaches every process of the terminal's group: the parent stops the run
    # (and its workers) itself, so a worker must not die of it mid-seed.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (not the parent's handler, if forked)
    _die_with(parent)
    quiet_client_logs()
    import_workloads(imports)
    _collect_between_seeds()


#: The young generation's collection threshold while a process runs seeds (CPython's
#: default is 700): see `_collect_between_seeds`.
_SEED_GC_THRESHOLD = 100_000


def _collect_between_seeds() -> tuple[int, int, int]:
    """Set this process up to run seeds, for the cyclic collector; returns the
    thresholds it had. What the process holds now (modules, classes, the parent's objects
    a worker was forked with) lives as long as it does: frozen, out of the collector's
    sight, so a collection traverses a seed's objects instead of every object of every
    module, and touches no page a worker shares with its parent. A lite seed leaves a
    few thousand container objects more than it frees; at the default threshold the
    collector ran about three times a seed, each time traversing (and promoting) the
    seed's live objects, for ~4% of its CPU. Collected once after each seed instead
    (`_run_one`), when they are garbage, with the threshold raised so that a seed runs
    without a collection (one that allocates without end is still collected, every
    `_SEED_GC_THRESHOLD` objects). What a seed does is unchanged."""
    gc.freeze()
    previous = gc.get_threshold()
    gc.set_threshold(_SEED_GC_THRESHOLD, previous[1], previous[2])
    return previous


def _run_one(args: tuple[str, int, str]) -> SeedResult:
    workload, seed, profile = args
    result = run_seed(workload, seed, profile=profile).result.for_sweep()
    gc.collect(1)  # the seed's garbage (young: see `_collect_between_seeds`)
    return result


def _run_chunk(tasks: Sequence[tuple[str, int, str]]) -> list[SeedResult]:
    return [_run_one(task) for task in tasks]


#: Tasks submitted ahead per worker process: the pool never idles, and a run of a
#: million seeds holds a few dozen tasks, not a future for each seed.
_AHEAD = 4
#: A task holds as many seeds as take about this long (by the seeds' own run times so
#: far), from 1 to `_MAX_CHUNK`: short seeds go in chunks (fewer round trips to the
#: workers); long ones one by one, so a stop or a `--budget`'s end waits for few.
_CHUNK_SECONDS = 0.25
_MAX_CHUNK = 16


def _chunk_size(ran: int, spent: float) -> int:
    """Seeds a task holds, given `ran` seeds took `spent` seconds (their own run times)."""
    if not ran:
        return 1
    if spent <= 0.0:
        return _MAX_CHUNK
    return max(1, min(_MAX_CHUNK, int(_CHUNK_SECONDS * ran / spent)))


def _in_order(
    workload: str,
    seeds: Iterable[int],
    profile: str,
    jobs: int,
    imports: Sequence[str],
    more: Callable[[], bool] = lambda: True,
) -> Generator[SeedResult, None, None]:
    """The results of `seeds`, in seed order, run in this process (`jobs` 1) or by
    `jobs` worker processes with a bounded window of tasks ahead; once `more()` says
    no, no new seed starts (the ones started finish and are yielded: the results are
    always a contiguous run of `seeds` from its first)."""
    pending = iter(seeds)
    if jobs <= 1:
        thresholds = _collect_between_seeds()  # as a worker does; given back at the end
        try:
            for seed in pending:
                if not more():
                    return
                yield _run_one((workload, seed, profile))
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
        return
    ran, spent = 0, 0.0
    with _worker_pool(jobs, imports) as pool:
        window: collections.deque[Future[list[SeedResult]]] = collections.deque()
        while True:
            size = _chunk_size(ran, spent)
            while len(window) < _AHEAD * jobs and more():
                chunk = [(workload, s, profile) for s in itertools.islice(pending, size)]
                if not chunk:
                    break
                window.append(pool.submit(_run_chunk, chunk))
            if not more():  # the tasks not started yet, from the last back, are dropped
                while window and window[-1].cancel():
                    window.pop()
            if not window:
                return
            for result in window.popleft().result():
                ran, spent = ran + 1, spent + result.wall_time
                yield result


def run_many(
    workload: str,
    seeds: Iterable[int],
    profile: str,
    jobs: int,
    imports: Sequence[str] = (),
) -> Generator[SeedResult, None, None]:
    """Results in seed order (workers may finish out of order; the window keeps it)."""
    return _in_order(workload, seeds, profile, jobs, imports)


@contextlib.contextmanager
def _worker_pool(jobs: int, imports: Sequence[str]) -> Iterator[ProcessPoolExecutor]:
    """`jobs` worker processes; on the way out (closed early too) the seeds not started
    are dropped, the running ones finish, and no worker outlives the pool: one that
    died breaks the pool, and CPython 3.11's pool may then leave the others waiting for
    work forever (its manager thread can die cancelling futures), so they are ended."""
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(
        max_workers=jobs, initializer=_init_worker, initargs=(os.getpid(), tuple(imports))
    )
    try:
        yield pool
    finally:
        try:
            pool.shutdown(cancel_futures=True)
        finally:
            for child in set(multiprocessing.active_children()) - before:
                child.terminate()


def run_for(
    workload: str,
    first_seed: int,
    profile: str,
    jobs: int,
    seconds: float,
    *,
    max_seeds: int | None = None,
    imports: Sequence[str] = (),
) -> Generator[SeedResult, None, None]:
    """Seeds first_seed, first_seed + 1... until `seconds` of wall time are spent (the
    seeds started by then finish), in seed order; at most `max_seeds`."""
    deadline = time.monotonic() + seconds
    seeds = (
        itertools.count(first_seed)
        if max_seeds is None
        else range(first_seed, first_seed + max_seeds)
    )
    return _in_order(workload, seeds, profile, jobs, imports, lambda: time.monotonic() < deadline)


@contextlib.contextmanager
def _stop_signals() -> Iterator[dict[str, str]]:
    """While collecting: SIGINT and SIGTERM ask the run to stop (the dict gets the
    signal's name; the seed running finishes first: a signal raised inside a seed would
    be taken for the workload's own failure); a second one stops at once. Only in the
    main thread (elsewhere signals cannot be caught, and nothing changes)."""
    stop: dict[str, str] = {}

    def handler(signum: int, frame: object) -> None:
        if stop:
            raise KeyboardInterrupt  # the second one: stop now, keep nothing
        stop["signal"] = signal.Signals(signum).name

    try:
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        yield stop
        return
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@attrs.define
class _Heartbeat:
    """When a progress line is due on a console that is not a terminal: each minute for
    the first ten minutes of a run, then each ten minutes (times: seconds since its start)."""

    next_at: float = 60.0

    def due(self, elapsed: float) -> bool:
        if elapsed < self.next_at:
            return False
        step = 60.0 if elapsed < 600.0 else 600.0
        self.next_at = (elapsed // step + 1) * step
        return True


def _clock_time(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


def progress_line(description: str, tally: Tally, elapsed: float) -> str:
    """`idempotent/standard: 12,345 seeds (100-12444), 0 failed, 190 a minute, 1:05:00`."""
    n = tally.count
    rate = 60 * n / elapsed if elapsed > 0 else 0.0
    return (
        f"{description}: {n:,} seed{'' if n == 1 else 's'}{tally.seed_range()}, "
        f"{len(tally.failed)} failed, "
        f"{rate:,.0f} a minute, {_clock_time(elapsed)}"
    )


def failure_line(result: SeedResult) -> str:
    """A failing seed as it comes: its class and the command that replays it."""
    replay = replay_command(result.workload, result.seed, None, profile=result.profile)
    return f"seed {result.seed} failed: {result.failure_class}; replay: {replay}"


def _collect_with_progress(
    console: Any,
    description: str,
    total: int | None,
    columns: Sequence[Any],
    runs: Generator[SeedResult, None, None],
    tally: Tally,
) -> SeedRun:
    """Fold `runs` into `tally` under a rich progress line (the description, `columns`,
    the elapsed time), saying failures as they come, until they end or a signal or a
    dead worker stops the run (module doc)."""
    from rich.progress import Progress, TextColumn, TimeElapsedColumn

    interrupted: str | None = None
    started = time.perf_counter()
    heartbeat = None if console.is_terminal else _Heartbeat()
    with (
        _stop_signals() as stop,
        Progress(
            TextColumn("[bold]{task.description}"),
            *columns,
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress,
    ):
        task = progress.add_task(description, total=total, failed=0)
        try:
            for result in runs:
                tally.add(result)
                progress.update(task, advance=1, failed=len(tally.failed))
                if not result.ok:
                    progress.console.print(
                        failure_line(result), style="bold red", markup=False, soft_wrap=True
                    )
                elapsed = time.perf_counter() - started
                if heartbeat is not None and heartbeat.due(elapsed):
                    line = progress_line(description, tally, elapsed)
                    progress.console.print(line, markup=False, highlight=False)
                if stop:
                    break
        except BrokenProcessPool as exc:
            interrupted = f"a worker process died ({exc})"
        finally:
            runs.close()  # the pool stops: running seeds finish, the others are dropped
        interrupted = stop.get("signal", interrupted)
    wall = time.perf_counter() - started
    if interrupted is not None:
        last = "" if tally.first is None else f", seeds {tally.first}-{tally.last}"
        console.print(
            f"[bold yellow]stopped early ({interrupted}) after {tally.count} seed(s)"
            f"{last}[/]: the report holds those"
        )
    return SeedRun(tally, wall, interrupted)


def run_for_budget(
    console: Any,
    workload: str,
    first_seed: int,
    profile: str,
    jobs: int,
    seconds: float,
    max_seeds: int | None,
    imports: tuple[str, ...],
    tally: Tally,
) -> SeedRun:
    from rich.progress import TextColumn

    return _collect_with_progress(
        console,
        f"{workload}/{profile} for {seconds:g} s ({jobs} jobs)",
        None,
        [TextColumn("{task.completed} seeds, {task.fields[failed]} failed")],
        run_for(workload, first_seed, profile, jobs, seconds, max_seeds=max_seeds, imports=imports),
        tally,
    )


def run_with_progress(
    console: Any,
    workload: str,
    seeds: Sequence[int],
    profile: str,
    jobs: int,
    imports: Sequence[str],
    tally: Tally,
) -> SeedRun:
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn

    return _collect_with_progress(
        console,
        f"{workload}/{profile}",
        len(seeds),
        [BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[failed]} failed")],
        run_many(workload, seeds, profile, jobs, imports),
        tally,
    )


def run_on_spark(
    console: Any,
    workload: str,
    seeds: Sequence[int],
    profile: str,
    master: str | None,
    tally: Tally,
) -> SeedRun:
    """The seeds as Spark tasks (`trio_kafka.spark.sweep_on_spark`), folded into `tally`
    in seed order as each Spark job's come back."""
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
    for result in spark.sweep_on_spark(workload, seeds, profile, master=master):
        tally.add(result)
    return SeedRun(tally, time.perf_counter() - started)
