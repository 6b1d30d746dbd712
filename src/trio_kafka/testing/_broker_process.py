"""The mock broker in a process of its own (`trio-kafka broker`), as Tansu runs: for
benchmarks and tests that must not share a CPU core or a GIL with it."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

from trio_kafka.testing._tansu import free_port


@contextlib.contextmanager
def mock_broker_process(partitions: int = 1, startup_timeout: float = 20.0) -> Iterator[str]:
    """Start `trio-kafka broker` on a free 127.0.0.1 port (auto-created topics get
    `partitions` partitions); yield its bootstrap "127.0.0.1:port"; stop it on exit.

    Raises `RuntimeError` if it does not accept connections within `startup_timeout`
    seconds (or exits first)."""
    port = free_port()
    command = [sys.executable, "-c", "from trio_kafka.cli import main; main()", "broker"]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--partitions", str(partitions)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + startup_timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"the mock broker exited with status {process.returncode} before it "
                        f"listened on 127.0.0.1:{port}"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the mock broker did not listen on 127.0.0.1:{port} within "
                        f"{startup_timeout} s"
                    ) from None
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
