"""The simulation ledger: one CSV row per `trio-kafka simulate` run, and its totals.

`trio-kafka simulate ... --ledger simulations/ledger.csv` appends a row when the run ends
(date, commit, workload, profile, first seed, count, failed, ops, note); `trio-kafka
simulate --ledger-summary simulations/ledger.csv` prints, per workload and profile, how
many distinct seeds were run (a seed run twice counts once), how many seed runs, failed
seed runs and operations, as a Markdown table (what docs/simulator.md shows). Seeds of a
run are consecutive (`first_seed` .. `first_seed + count - 1`), so a row is an interval
and the distinct count is the size of the union of a workload's intervals.

`failed` and `ops` may be empty in rows written by hand for runs whose report did not
keep them (the sweeps of earlier sessions); the summary says how many rows lack them.
"""

from __future__ import annotations

import csv
import datetime
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

import attrs

import trio_kafka

COLUMNS = (
    "date",
    "commit",
    "workload",
    "profile",
    "first_seed",
    "count",
    "failed",
    "ops",
    "note",
)


class LedgerError(ValueError):
    """A ledger file that is not one (wrong header, a bad row)."""


@attrs.frozen(slots=True)
class LedgerRow:
    date: str
    commit: str
    workload: str
    profile: str
    first_seed: int
    count: int
    #: Failed seeds of the run (None: not recorded).
    failed: int | None
    #: Operations of the run's histories, all statuses (None: not recorded).
    ops: int | None
    note: str = ""

    def as_csv(self) -> list[str]:
        return [
            self.date,
            self.commit,
            self.workload,
            self.profile,
            str(self.first_seed),
            str(self.count),
            "" if self.failed is None else str(self.failed),
            "" if self.ops is None else str(self.ops),
            self.note,
        ]


def code_commit() -> str:
    """The git commit the running code was checked out at (`-dirty` with uncommitted
    changes), or the package version when it is not a git checkout."""
    root = Path(trio_kafka.__file__).resolve().parent.parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "src"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return f"v{trio_kafka.__version__}"
    return f"{head}-dirty" if dirty else head


def now_utc() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_row(
    report: Mapping[str, object],
    first_seed: int,
    *,
    started: str | None = None,
    commit: str | None = None,
    note: str = "",
) -> LedgerRow:
    """The row of a finished run, from its report (`report_results` in
    simulate_report.py); `started` and `commit` are best taken when the run starts (the
    checkout may move meanwhile)."""
    ops = report.get("ops")
    return LedgerRow(
        date=started or now_utc(),
        commit=commit or code_commit(),
        workload=str(report["workload"]),
        profile=str(report["profile"]),
        first_seed=first_seed,
        count=_int(report["seeds"], "seeds"),
        failed=_int(report["failed"], "failed"),
        ops=sum(_int(v, "ops") for v in ops.values()) if isinstance(ops, Mapping) else None,
        note=note,
    )


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise LedgerError(f"{what} must be an integer, not {value!r}")
    return value


def append(path: Path, row: LedgerRow) -> None:
    """Append `row` to the ledger at `path` (created, with its header, if missing)."""
    if path.exists() and path.stat().st_size:
        read(path)  # refuse to append to a file that is not a ledger
        with path.open("a", newline="") as f:
            csv.writer(f).writerow(row.as_csv())
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        writer.writerow(row.as_csv())


def read(path: Path) -> list[LedgerRow]:
    """Every row of the ledger; a wrong header or a bad value is refused, naming the line."""
    with path.open(newline="") as f:
        lines = list(csv.reader(f))
    if not lines or tuple(lines[0]) != COLUMNS:
        found = ",".join(lines[0]) if lines else "an empty file"
        raise LedgerError(
            f"{path} is not a simulation ledger: its header is {found!r}, "
            f"expected {','.join(COLUMNS)!r}"
        )
    rows = []
    for number, fields in enumerate(lines[1:], start=2):
        if not fields:
            continue
        if len(fields) != len(COLUMNS):
            raise LedgerError(
                f"{path}:{number}: {len(fields)} fields, expected {len(COLUMNS)} ({fields!r})"
            )
        values = dict(zip(COLUMNS, fields, strict=True))
        try:
            row = LedgerRow(
                date=values["date"],
                commit=values["commit"],
                workload=values["workload"],
                profile=values["profile"],
                first_seed=int(values["first_seed"]),
                count=int(values["count"]),
                failed=int(values["failed"]) if values["failed"] else None,
                ops=int(values["ops"]) if values["ops"] else None,
                note=values["note"],
            )
        except ValueError as exc:
            raise LedgerError(f"{path}:{number}: {exc}") from None
        if row.count < 0 or not row.workload or row.profile not in ("lite", "standard"):
            raise LedgerError(
                f"{path}:{number}: a row needs a workload, a profile (lite or standard) "
                f"and a count >= 0 ({fields!r})"
            )
        rows.append(row)
    return rows


@attrs.frozen(slots=True)
class Total:
    workload: str
    profile: str
    #: Seed numbers run at least once (the union of the rows' intervals).
    distinct_seeds: int
    #: Seeds run, counting reruns.
    seed_runs: int
    runs: int
    #: Failed seed runs, over the rows that recorded it.
    failed: int
    ops: int
    #: Rows that did not record `failed` / `ops`.
    rows_without_failed: int
    rows_without_ops: int


def next_seed(rows: Iterable[LedgerRow], workload: str, profile: str) -> int:
    """The seed after the highest that a run of `workload` at `profile` recorded (0 if
    none did): where a sweep of fresh seeds starts (`--seed next`)."""
    ends = [r.first_seed + r.count for r in rows if (r.workload, r.profile) == (workload, profile)]
    return max(ends, default=0)


def totals(rows: Iterable[LedgerRow]) -> list[Total]:
    """Per (workload, profile), in first-seen order."""
    groups: dict[tuple[str, str], list[LedgerRow]] = {}
    for row in rows:
        groups.setdefault((row.workload, row.profile), []).append(row)
    out = []
    for (workload, profile), group in groups.items():
        out.append(
            Total(
                workload=workload,
                profile=profile,
                distinct_seeds=_union_size((r.first_seed, r.first_seed + r.count) for r in group),
                seed_runs=sum(r.count for r in group),
                runs=len(group),
                failed=sum(r.failed or 0 for r in group),
                ops=sum(r.ops or 0 for r in group),
                rows_without_failed=sum(r.failed is None for r in group),
                rows_without_ops=sum(r.ops is None for r in group),
            )
        )
    return out


def _union_size(intervals: Iterable[tuple[int, int]]) -> int:
    size = 0
    end = None
    for lo, hi in sorted(intervals):
        if end is None or lo >= end:
            size += hi - lo
            end = hi
        elif hi > end:
            size += hi - end
            end = hi
    return size


def markdown(rows_total: Iterable[Total]) -> str:
    """The totals as the Markdown table docs/simulator.md shows."""
    lines = [
        "| workload | profile | distinct seeds | seed runs | runs | failed seed runs | ops |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for t in rows_total:
        failed = _partial(t.failed, t.rows_without_failed, t.runs)
        ops = _partial(t.ops, t.rows_without_ops, t.runs)
        lines.append(
            f"| {t.workload} | {t.profile} | {t.distinct_seeds:,} | {t.seed_runs:,} | "
            f"{t.runs} | {failed} | {ops} |"
        )
    return "\n".join(lines) + "\n"


def _partial(value: int, unrecorded: int, runs: int) -> str:
    if unrecorded == runs:
        return "not recorded"
    return f"{value:,}" + (f" (+{unrecorded} run(s) not recorded)" if unrecorded else "")
