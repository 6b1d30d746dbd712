"""The demo's output: a rich console that reads well on a terminal and in a CI log.

On a terminal the long steps show live rich progress bars. Without one (a pipe, a CI
log) rich draws nothing live and prints each bar once when it stops, so `Bar` adds a
plain line at every tenth of the way: a log shows the step moving without escape codes.
"""

from __future__ import annotations

import os
import time
from types import TracebackType
from typing import Any

import attrs
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def make_console() -> Console:
    """stdout; 110 columns when it is not a terminal and COLUMNS does not say (a log has
    no width, and rich's 80 would fold the final table)."""
    probe = Console()
    if probe.is_terminal or "COLUMNS" in os.environ:
        return probe
    return Console(width=110)


@attrs.frozen
class Check:
    """One row of the final table."""

    guarantee: str
    how: str
    numbers: str
    #: True: passed; False: failed; None: not available in this build or on this broker
    #: (not run; its `numbers` say why).
    ok: bool | None


class Bar:
    """A progress bar over `total` units (records, or seeds with `unit="seeds"`), with
    MB/s when `add` is given bytes, and ETA. A context manager."""

    def __init__(self, console: Console, label: str, total: int, unit: str = "records") -> None:
        self.console = console
        self.label = label
        self.total = max(total, 1)
        self.unit = unit
        self.done = 0
        self.bytes = 0
        self.failed = 0
        self._started = time.perf_counter()
        self._next_line = 0.1  # fraction of the way at which the next plain line prints
        columns: list[Any] = [
            TextColumn(f"[bold]{label}"),
            BarColumn(bar_width=30),
            MofNCompleteColumn(),
            TextColumn(unit),
        ]
        if unit == "records":
            columns.append(TextColumn("{task.fields[mbps]:6.1f} MB/s"))
        else:
            columns.append(TextColumn("{task.fields[failed]} failed"))
        columns += [TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
        self._progress = Progress(*columns, console=console)
        self._task: TaskID = self._progress.add_task(label, total=self.total, mbps=0.0, failed=0)

    def __enter__(self) -> Bar:
        self._started = time.perf_counter()
        self._progress.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()

    @property
    def elapsed(self) -> float:
        return max(time.perf_counter() - self._started, 1e-9)

    @property
    def mbps(self) -> float:
        return self.bytes / self.elapsed / 1e6

    def set(self, done: int, nbytes: int = 0, failed: int = 0) -> None:
        self.done, self.bytes, self.failed = done, nbytes, failed
        self._progress.update(self._task, completed=done, mbps=self.mbps, failed=failed)
        fraction = done / self.total
        if not self.console.is_terminal and fraction >= self._next_line:
            rate = f"{self.mbps:.1f} MB/s" if self.unit == "records" else f"{failed} failed"
            self.console.print(
                f"  {self.label}: {100 * min(fraction, 1.0):3.0f}% "
                f"({done:,}/{self.total:,} {self.unit}, {rate}, {self.elapsed:.1f} s)",
                highlight=False,
            )
            # The next line at the next tenth past this one (one line per update at most).
            self._next_line = (int(fraction * 10) + 1) / 10

    def add(self, done: int, nbytes: int = 0, failed: int = 0) -> None:
        self.set(self.done + done, self.bytes + nbytes, self.failed + failed)


def step(console: Console, number: int, title: str) -> None:
    console.print()
    console.rule(f"[bold]{number}. {title}", align="left")


__all__ = ["Bar", "Check", "make_console", "step"]
