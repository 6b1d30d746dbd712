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
