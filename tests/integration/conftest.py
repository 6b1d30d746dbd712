"""Integration fixtures: Tansu, a real Kafka-compatible broker, on a free loopback port;
a certificate authority for the TLS tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trustme

from trio_kafka.testing import TansuBroker, tansu_broker


@pytest.fixture(scope="module")
def tansu() -> Iterator[TansuBroker]:
    """A fresh Tansu per test module (it keeps everything in memory and never frees it).

    Started as `tansu broker --listener-url tcp://127.0.0.1:PORT --advertised-listener-url
    tcp://127.0.0.1:PORT --storage-engine memory://tansu/`, ready once the port accepts,
    terminated after the module.
    """
    with tansu_broker() as broker:
        yield broker


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    """A throwaway certificate authority (trustme) for the module's TLS brokers."""
    return trustme.CA()
