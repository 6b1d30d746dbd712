"""A run's seeds folded as they come (`trio_kafka._cli.simulate_tally`): the report's
counts are those of its seeds, its memory does not grow with them, and the JSON report
lists every seed, streamed from disk."""

from __future__ import annotations

import errno
import io
import json
import pickle
import tracemalloc
from pathlib import Path

import attrs
from click.testing import CliRunner

from trio_kafka._cli.simulate_tally import Tally, write_report
from trio_kafka.cli import main
from trio_kafka.sim.runner import SeedResult, run_seed


def _result(seed: int) -> SeedResult:
    return run_seed("idempotent", seed, profile="lite").result


def test_the_reports_counts_are_the_sums_over_its_seeds(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    run = CliRunner().invoke(
        main, ["simulate", "--seed", "40", "--seeds", "6", "--jobs", "2", "--json", str(report)]
    )
    assert run.exit_code == 0, run.output
    data = json.loads(report.read_text())
    seeds = data["results"]
    assert [s["seed"] for s in seeds] == list(range(40, 46)) and data["seeds"] == 6
    for kind, counts in data["faults"].items():
        assert counts["seeds"] == sum(s["faults"][kind] > 0 for s in seeds), kind
        assert counts["fired"] == sum(s["faults"][kind] for s in seeds), kind
    ops: dict[str, int] = {}
    for s in seeds:
        for status, n in s["ops"].items():
            ops[status] = ops.get(status, 0) + n
    assert data["ops"] == ops
    assert data["virtual_time"] == sum(s["virtual_time"] for s in seeds)
    for site, n in data["buggify_sites"].items():
        assert n == sum(site in s["buggify_sites"] for s in seeds), site


def test_a_tally_holds_no_passing_seed() -> None:
    """Ten thousand passing seeds, each unpickled as from a worker process, leave
    counts, not results: keeping them would hold ~2.3 KB each (23 MB here, measured;
    a night's sweep of millions, GBs)."""
    passing = _result(3).for_sweep()
    assert passing.ok
    blob = pickle.dumps(passing)
    tally = Tally()
    tally.add(attrs.evolve(passing, seed=0))
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for seed in range(1, 10_000):
            tally.add(attrs.evolve(pickle.loads(blob), seed=seed))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert (tally.count, tally.first, tally.last, tally.failed) == (10_000, 0, 9_999, [])
    # (Not zero: tracemalloc sees the whole process, pytest's and xdist's threads too.)
    assert grown < 1_000_000, f"the tally grew by {grown} bytes over 9,999 seeds"


def test_a_failing_seed_is_kept_whole_with_the_faults_it_fired() -> None:
    full = _result(3)
    failing = attrs.evolve(full, failure_class="duplicate", classes=("duplicate",))
    tally = Tally()
    for result in (full.for_sweep(), failing, attrs.evolve(full, seed=4).for_sweep()):
        tally.add(result)
    assert tally.failed == [failing] and tally.failed[0].fired == full.fired
    assert tally.violations == {"duplicate": 1} and tally.seed_range() == " (3-4)"


def test_the_json_report_lists_every_seed_spooled(tmp_path: Path) -> None:
    results = [attrs.evolve(_result(5), seed=s) for s in (5, 6, 7)]
    tally = Tally.keeping_results(True)
    try:
        for result in results:
            tally.add(result)
        path = tmp_path / "r.json"
        write_report(path, {"seeds": tally.count, "workload": "idempotent"}, tally)
        data = json.loads(path.read_text())
        assert data["seeds"] == 3 and data["results"] == [r.to_json() for r in results]
        write_report(path, {"seeds": 3}, tally)  # written twice: the same seeds
        assert json.loads(path.read_text())["results"] == data["results"]
    finally:
        tally.close()
    empty = Tally.keeping_results(True)
    write_report(tmp_path / "e.json", {"seeds": 0}, empty)
    empty.close()
    assert json.loads((tmp_path / "e.json").read_text()) == {"seeds": 0, "results": []}
    write_report(tmp_path / "e.json", {}, empty)  # (nothing but the results)
    assert json.loads((tmp_path / "e.json").read_text()) == {"results": []}
    assert Tally().seed_range() == ""


class _FullDisk(io.StringIO):
    """A spool that takes two lines, then answers as a full disk does."""

    def write(self, text: str) -> int:
        if self.getvalue().count("\n") >= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(text)


def test_a_full_disk_loses_the_seed_list_not_the_run(tmp_path: Path) -> None:
    tally = Tally(spool=_FullDisk())
    results = [attrs.evolve(_result(5), seed=s) for s in range(5, 10)]
    for result in results:
        tally.add(result)
    assert tally.count == 5 and tally.ops == {
        k: 5 * v for k, v in results[0].ops.items()
    }  # every seed counted
    assert tally.spool is None and tally.spool_error is not None
    assert "from seed 7 on" in tally.spool_error and "No space left" in tally.spool_error
    path = tmp_path / "r.json"
    write_report(path, {"seeds": tally.count}, tally)
    data = json.loads(path.read_text())
    assert data["seeds"] == 5 and data["results"] is None
    assert data["results_error"] == tally.spool_error
