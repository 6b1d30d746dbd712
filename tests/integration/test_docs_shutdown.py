"""docs/shutdown.md's programs do what the page says: each runs in a process of its own
against the mock broker (a process too), gets SIGTERM while it produces, and ends with
every record it handed over acknowledged. Real processes: "_signals"-like timing, so
this file is serial too (SERIAL_PATHS has "_shutdown.py")."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._docs import python_blocks
from tests.integration._helpers import consume_all
from trio_kafka.testing import mock_broker_process

PAGE = Path(__file__).resolve().parents[2] / "docs" / "shutdown.md"
BLOCKS = python_blocks(PAGE)


def test_the_page_has_its_three_programs() -> None:
    assert len(BLOCKS) == 3


def _run(source: str, bootstrap: str) -> tuple[int, str]:
    """Start the program, SIGTERM it a second after it says it is producing. A program
    still running 60 s later fails the test with every thread's stack (faulthandler, on
    SIGABRT)."""
    program = source.replace("127.0.0.1:9092", bootstrap)
    environment = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    with subprocess.Popen(
        [sys.executable, "-c", program],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=environment,
    ) as child:  # leaving it closes the pipe and waits for the child
        try:
            assert child.stdout is not None
            first = child.stdout.readline().decode()
            assert first.startswith("producing until SIGTERM"), first
            time.sleep(1.0)
            child.send_signal(signal.SIGTERM)
            try:
                rest, _ = child.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                child.send_signal(signal.SIGABRT)
                rest = b""
                with contextlib.suppress(subprocess.TimeoutExpired):
                    rest, _ = child.communicate(timeout=10)
                pytest.fail(f"still running 60 s after SIGTERM:\n{first}{rest.decode()}")
            return child.returncode, first + rest.decode()
        finally:
            if child.poll() is None:
                child.kill()


@pytest.mark.parametrize("number", [1, 2], ids=["trio", "asyncio"])
def test_an_async_program_flushes_on_sigterm_and_exits_0(number: int) -> None:
    with mock_broker_process() as bootstrap:
        status, output = _run(BLOCKS[number - 1], bootstrap)
    print(output)
    assert status == 0, output
    last = output.strip().splitlines()[-1]
    handed, acknowledged = int(last.split()[2].rstrip(":")), int(last.split()[3])
    assert handed == acknowledged > 0, last
    assert last.endswith(" 0 failed"), last


def test_the_blocking_program_settles_everything_then_exits_by_its_own_handler() -> None:
    """Every record the program counted acknowledged is in the log, once and in order:
    nothing handed over was lost or written twice, and the report came after the close."""
    with mock_broker_process() as bootstrap:
        status, output = _run(BLOCKS[2], bootstrap)
        print(output)
        assert status == 128 + signal.SIGTERM, output
        last = output.strip().splitlines()[-1]
        assert last.endswith(" acknowledged, 0 failed"), last
        acknowledged = int(last.split()[0])
        assert acknowledged > 0, last
        values = consume_all(bootstrap, "events", 1, "read_committed")
    assert values == [b"event %d" % i for i in range(acknowledged)]
