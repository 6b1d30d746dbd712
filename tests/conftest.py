"""Shared test fixtures: where the shared reference data lives."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
KAFKA_PROTOCOL = SHARED / "kafka-protocol"


@pytest.fixture(scope="session")
def kafka_protocol_dir() -> Path:
    """The official Kafka message definitions and error table (../shared/kafka-protocol)."""
    if not KAFKA_PROTOCOL.is_dir():
        pytest.fail(f"the shared Kafka protocol reference is missing: {KAFKA_PROTOCOL}")
    return KAFKA_PROTOCOL


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "the chaos suite (tests/chaos)")
    group.addoption(
        "--chaos-long",
        action="store_true",
        help="also run the long chaos tier (or set TRIO_KAFKA_CHAOS_LONG=1)",
    )
    group.addoption(
        "--chaos-seed",
        type=int,
        default=None,
        help="run every chaos test with this one seed (replays a failure)",
    )


# -- both backends (issue 16) ---------------------------------------------------------
# A module marked `pytestmark = pytest.mark.anyio` runs each async test on trio, then on
# asyncio, through anyio's pytest plugin. pytest-trio's trio_mode marks every async test
# for trio first; for anyio-marked tests that mark is taken back, so the anyio plugin
# (not pytest-trio) runs them, on the backend of the `anyio_backend` parameter. Such
# tests use no async fixtures (pytest-trio would claim those too).


@pytest.fixture(scope="module", params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """trio first (the simulator's backend), then asyncio."""
    return str(request.param)


# -- `make test` runs on a pytest-xdist worker per core (`--dist loadgroup`) --------------
# Tests that run in real time against real processes (the chaos suite's brokers and
# proxies, Spark's JVM, the loaders killed by SIGKILL) are timing-sensitive: they go to one
# group, so one worker runs them one after another while the others take everything else.
SERIAL_PATHS = ("tests/chaos/", "tests/spark/", "_sigkill.py", "_signals.py", "_shutdown.py")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    serial = pytest.mark.xdist_group("serial")
    for item in items:
        if item.get_closest_marker("anyio") is not None:
            item.own_markers[:] = [m for m in item.own_markers if m.name != "trio"]
        path = item.path.as_posix()
        if any(part in path for part in SERIAL_PATHS):
            item.add_marker(serial)
