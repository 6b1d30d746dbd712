"""`trio-kafka demo --quick`: the main job at small sizes ends with every guarantee passed.

Runs the command as a user would (a subprocess, output piped, so rich draws no live
display), with a fixed seed so a failure replays.
"""

from __future__ import annotations

import os
import subprocess
import sys

_TRIO_KAFKA = [sys.executable, "-c", "from trio_kafka.cli import main; main()"]


def test_the_quick_demo_passes_every_guarantee() -> None:
    completed = subprocess.run(
        [*_TRIO_KAFKA, "demo", "--quick", "--seed", "7"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        # Wide enough that each guarantee's name stays on one line of the table.
        env={**os.environ, "COLUMNS": "200"},
    )
    output = completed.stdout
    print(output, completed.stderr)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "5. the guarantees" in output
    table = output[output.index("5. the guarantees") :]
    for guarantee in (
        "bulk load survives a crash",
        "exactly once: nothing lost, nothing twice",
        "order kept per partition",
        "commit log: at most one",
        "simulator: idempotent producer",
        "simulator: CAS writers",
    ):
        assert guarantee in table
    assert "FAIL" not in table
    assert "every guarantee passed" in table
    assert "\x1b[" not in output  # no escape codes when the output is not a terminal


def test_the_quick_demo_passes_every_guarantee_on_asyncio() -> None:
    """The client steps (bulk load killed and resumed, commit-log race, transactions)
    under asyncio, the mock broker in a trio thread; the simulator stays on trio."""
    completed = subprocess.run(
        [*_TRIO_KAFKA, "demo", "--quick", "--seed", "7", "--backend", "asyncio", "--seeds", "3"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )
    output = completed.stdout
    print(output, completed.stderr)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "the client runs on asyncio" in output
    table = output[output.index("5. the guarantees") :]
    for guarantee in (
        "bulk load survives a crash",
        "exactly once: nothing lost, nothing twice",
        "commit log: at most one",
        "transactions: atomic",
    ):
        assert guarantee in table
    assert "FAIL" not in table
    assert "every guarantee passed" in table
