"""The chaos suite's tiers: the quick tier always runs; the long one (`chaos_long`) only
with `--chaos-long` or TRIO_KAFKA_CHAOS_LONG=1. `--chaos-seed N` replays one seed."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos_long: the long chaos tier (--chaos-long)")


def _long(config: pytest.Config) -> bool:
    return bool(config.getoption("--chaos-long", default=False)) or os.environ.get(
        "TRIO_KAFKA_CHAOS_LONG", ""
    ) not in ("", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _long(config):
        return
    skip = pytest.mark.skip(reason="the long chaos tier: --chaos-long or TRIO_KAFKA_CHAOS_LONG=1")
    for item in items:
        if "chaos_long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def chaos_seed(request: pytest.FixtureRequest) -> int:
    """The test's seed (its parameter), or --chaos-seed's."""
    forced = request.config.getoption("--chaos-seed", default=None)
    if forced is not None:
        return int(forced)
    return int(getattr(request, "param", 1))
