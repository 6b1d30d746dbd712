"""A run's seeds as `trio-kafka simulate` keeps them: folded into counts as they come.

A sweep may run for a night (`--budget 8h`, `--seeds 1000000`): millions of lite seeds.
Holding each seed's result until the report would grow with the run (about 1 KB a
passing seed, then as much again to render the JSON report), so a `Tally` keeps only
what the report needs: the counts per fault kind, BUGGIFY site, violation class and
operation status, the sums of virtual and CPU time, the seed range, and the whole result
of each failing seed (its minimizing and replay need the faults it fired). When the run
writes a `--json` report, each seed's line goes to a temporary file as it comes, and the
report's `results` array is copied from it at the end. The run's memory is then the
same after ten seeds and after ten million.
"""

from __future__ import annotations

import json
import tempfile
from typing import IO, Any

import attrs

from trio_kafka.sim.faults import BUGGIFY_SITES, FaultKind
from trio_kafka.sim.runner import SeedResult


def _zero_kinds() -> dict[str, int]:
    return {k.value: 0 for k in FaultKind}


@attrs.define(eq=False)
class Tally:
    """What a run's seeds come to so far (see the module doc). `add` each result in seed
    order; `close` drops the spooled results."""

    #: Seeds added; the first and the last (None before the first).
    count: int = 0
    first: int | None = None
    last: int | None = None
    #: Sums over the seeds of the virtual time simulated and of each seed's own run time.
    virtual: float = 0.0
    cpu: float = 0.0
    #: Fault kind -> seeds in which it fired; fault kind -> times fired in all.
    kinds: dict[str, int] = attrs.field(factory=_zero_kinds)
    totals: dict[str, int] = attrs.field(factory=_zero_kinds)
    #: BUGGIFY site -> seeds in which it fired (every registered site listed).
    sites: dict[str, int] = attrs.field(factory=lambda: dict.fromkeys(BUGGIFY_SITES.names(), 0))
    #: Violation class -> seeds with at least one of that class.
    violations: dict[str, int] = attrs.field(factory=dict)
    #: Operations per final status, over every seed.
    ops: dict[str, int] = attrs.field(factory=dict)
    #: The failing seeds' results, whole, in seed order.
    failed: list[SeedResult] = attrs.field(factory=list)
    #: Each seed's JSON line (`SeedResult.to_json`), when the report is to list them.
    spool: IO[str] | None = None
    #: Why the spool stopped, if a write to it failed (a full disk): the run goes on,
    #: its counts whole, and its report says the per-seed list is missing, and why.
    spool_error: str | None = None

    @classmethod
    def keeping_results(cls, keep: bool) -> Tally:
        """A tally that also spools each seed's JSON line (for `--json`), or not."""
        return cls(spool=tempfile.TemporaryFile("w+", encoding="utf-8") if keep else None)

    def add(self, result: SeedResult) -> None:
        if self.first is None:
            self.first = result.seed
        self.last = result.seed
        self.count += 1
        self.virtual += result.virtual_time
        self.cpu += result.wall_time
        for kind, fired in result.faults.items():
            self.totals[kind] = self.totals.get(kind, 0) + fired
            self.kinds[kind] = self.kinds.get(kind, 0) + (fired > 0)
        for site in result.buggify_sites:
            self.sites[site] = self.sites.get(site, 0) + 1
        for cls in dict.fromkeys(result.classes):
            self.violations[cls] = self.violations.get(cls, 0) + 1
        for status, n in result.ops.items():
            self.ops[status] = self.ops.get(status, 0) + n
        if not result.ok:
            self.failed.append(result)
        if self.spool is not None:
            try:
                self.spool.write(json.dumps(result.to_json(), sort_keys=True) + "\n")
            except OSError as exc:
                self.spool_error = (
                    f"the per-seed results could not be written to a temporary file from "
                    f"seed {result.seed} on ({exc}); the report's counts hold every seed"
                )
                self.close()

    def seed_range(self) -> str:
        """` (100-12444)` (after a count in a line), or nothing before the first seed."""
        return "" if self.first is None else f" ({self.first}-{self.last})"

    def write_results(self, out: IO[str]) -> None:
        """The spooled results as a JSON array, one seed a line, without reading them
        all into memory (an empty array when nothing was spooled)."""
        out.write("[")
        if self.spool is not None:
            self.spool.flush()
            self.spool.seek(0)
            sep = "\n"
            for line in self.spool:
                out.write(sep + line.rstrip("\n"))
                sep = ",\n"
            self.spool.seek(0, 2)  # on at the end, should more seeds come
        out.write("\n]")

    def close(self) -> None:
        if self.spool is not None:
            self.spool.close()
            self.spool = None


def write_report(path: Any, report: dict[str, Any], tally: Tally | None = None) -> None:
    """`report` as JSON to `path` (keys sorted, one per line), with the tally's spooled
    results as its `results` array when a tally is given (streamed: see the module doc)."""
    with open(path, "w", encoding="utf-8") as out:
        if tally is None:
            out.write(json.dumps(report, indent=1, sort_keys=True) + "\n")
            return
        head = json.dumps(
            {k: v for k, v in report.items() if k != "results"}, indent=1, sort_keys=True
        )
        head = head[:-1].rstrip()  # without its closing brace, the results follow
        out.write(head + (',\n "results": ' if head != "{" else '\n "results": '))
        if tally.spool_error is None:
            tally.write_results(out)
        else:
            out.write(
                "null,\n " + json.dumps("results_error") + ": " + json.dumps(tally.spool_error)
            )
        out.write("\n}\n")
