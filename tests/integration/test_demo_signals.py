"""`trio-kafka demo` stopped by SIGTERM during its bulk-load step, and during the
simulator step: it stops the step, shows the checks done so far and exits 143, leaving
no child process behind (its loader child and simulator workers go with it)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

_DEMO = [sys.executable, "-c", "from trio_kafka.cli import main; main()", "demo", "--seed", "7"]


def _stop_at(marker: str, options: list[str]) -> tuple[int, str]:
    output: list[str] = []
    # Leaving the block closes the pipe and reaps the child (killed if still running): a
    # pipe left open failed a later test with a ResourceWarning.
    with subprocess.Popen(
        [*_DEMO, *options], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    ) as child:
        try:
            assert child.stdout is not None
            for raw in child.stdout:
                line = raw.decode(errors="replace")
                output.append(line)
                if marker in line:
                    time.sleep(0.5)
                    child.send_signal(signal.SIGTERM)
                    break
            rest, _ = child.communicate(timeout=60)
            output.append(rest.decode(errors="replace"))
            return child.returncode, "".join(output)
        finally:
            if child.poll() is None:
                child.kill()


@pytest.mark.parametrize(
    ("marker", "options"),
    [
        ("2. bulk load", ["--records", "400000", "--seeds", "3"]),
        ("4. the simulator", ["--records", "2000", "--seeds", "600", "--jobs", "2"]),
        ("2. bulk load", ["--records", "400000", "--seeds", "3", "--backend", "asyncio"]),
    ],
    ids=["bulk-load", "simulator", "bulk-load-asyncio"],
)
def test_sigterm_stops_the_demo_with_143_and_the_checks_so_far(
    marker: str, options: list[str]
) -> None:
    started = time.monotonic()
    status, output = _stop_at(marker, options)
    print(output[-2000:])
    assert status == 143, output[-2000:]
    assert "stopped by a signal" in output
    assert "5. the guarantees" not in output
    assert time.monotonic() - started < 120
