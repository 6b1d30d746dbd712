"""A sweep stopped early keeps what it ran: on SIGINT (Ctrl-C), SIGTERM or a worker that
dies, `trio-kafka simulate` stops starting seeds, and its report and ledger row hold the
seeds finished, a contiguous range from the first; no worker outlives it.

Real processes and real signals (the CLI in a subprocess). How many seeds finish before
the signal depends on the machine; what is checked does not."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

CLI = "from trio_kafka.cli import main; main()"
WARM_UP = 6.0  # seconds before the signal: imports, the pool, some seeds


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CLI, "simulate", *args, "--json", str(tmp_path / "r.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    output, _ = proc.communicate(timeout=120)
    return proc.returncode, output


def check_report(tmp_path: Path, first: int, reason: str) -> dict[str, object]:
    report = json.loads((tmp_path / "r.json").read_text())
    seeds = [r["seed"] for r in report["results"]]
    assert report["interrupted"] is not None and report["interrupted"].startswith(reason)
    assert report["seeds"] == len(seeds) >= 1, "no seed finished before the signal"
    assert seeds == list(range(first, first + len(seeds)))  # contiguous from the first
    return report


def test_ctrl_c_keeps_the_seeds_finished_in_the_report_and_the_ledger(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.csv"
    proc = start(
        tmp_path,
        *("-w", "idempotent", "--seed", "700", "-n", "100000", "-j", "2"),
        *("--ledger", str(ledger)),
    )
    time.sleep(WARM_UP)
    workers = children(proc.pid)
    proc.send_signal(signal.SIGINT)
    code, output = finish(proc)
    assert code == 128 + signal.SIGINT, output
    assert "stopped early (SIGINT)" in output
    report = check_report(tmp_path, 700, "SIGINT")
    (row,) = list(csv.DictReader(ledger.read_text().splitlines()))
    assert (row["first_seed"], row["count"]) == ("700", str(report["seeds"]))
    assert row["note"] == "stopped early: SIGINT"
    assert workers and not any(alive(pid) for pid in workers)


def test_sigterm_stops_a_budgeted_run_in_one_process(tmp_path: Path) -> None:
    proc = start(tmp_path, "-w", "transactional", "--seed", "900", "--budget", "10m", "-j", "1")
    time.sleep(WARM_UP)
    proc.send_signal(signal.SIGTERM)
    code, output = finish(proc)
    assert code == 128 + signal.SIGTERM, output
    check_report(tmp_path, 900, "SIGTERM")


def test_a_worker_that_dies_stops_the_run_and_its_report_is_kept(tmp_path: Path) -> None:
    proc = start(tmp_path, "-w", "idempotent", "--seed", "1100", "-n", "100000", "-j", "2")
    time.sleep(WARM_UP)
    workers = children(proc.pid)
    assert workers, "the pool has no worker yet"
    os.kill(workers[0], signal.SIGKILL)
    code, output = finish(proc)
    assert code == 1, output
    check_report(tmp_path, 1100, "a worker process died")
    assert not any(alive(pid) for pid in workers)  # the other one is ended too


def test_workers_end_when_the_parent_is_killed_outright(tmp_path: Path) -> None:
    proc = start(tmp_path, "-w", "idempotent", "--seed", "1300", "-n", "100000", "-j", "2")
    time.sleep(WARM_UP)
    workers = children(proc.pid)
    assert workers, "the pool has no worker yet"
    proc.kill()  # SIGKILL: no report, but no worker left waiting for work either
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in workers)
