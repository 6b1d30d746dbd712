"""An S3 server for Tansu's durable storage: moto's, from PyPI (`moto[server]`).

Found as $TRIO_KAFKA_MOTO_SERVER (a `moto_server` executable), else `moto_server` on
PATH, else `python -m moto.server` when moto is importable; tests skip when none is.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

from trio_kafka.testing import free_port

BUCKET = "tansu"


def moto_command() -> list[str] | None:
    explicit = os.environ.get("TRIO_KAFKA_MOTO_SERVER")
    if explicit:
        return [explicit]
    found = shutil.which("moto_server")
    if found:
        return [found]
    if importlib.util.find_spec("moto") is not None:
        return [sys.executable, "-m", "moto.server"]
    return None


@contextlib.contextmanager
def moto_s3(command: list[str]) -> Iterator[dict[str, str]]:
    """Run moto's server on a free port with bucket `tansu`; yields Tansu's S3 env."""
    port = free_port()
    process = subprocess.Popen(
        [*command, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                request = urllib.request.Request(f"{endpoint}/{BUCKET}", method="PUT")
                with urllib.request.urlopen(request, timeout=2):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's S3 server did not start on {endpoint}") from None
                time.sleep(0.1)
        yield {
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT": endpoint,
            "AWS_ALLOW_HTTP": "true",
        }
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
