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
