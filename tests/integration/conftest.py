"""Integration fixtures: Apache Kafka and Tansu, real brokers, on a free loopback port;
a certificate authority for the TLS tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.integration._real import KINDS, RealBroker, real_broker_for
from trio_kafka.testing import KafkaNode, TansuBroker, kafka_broker, tansu_broker


@pytest.fixture(scope="module")
def tansu() -> Iterator[TansuBroker]:
    """A fresh Tansu per test module (it keeps everything in memory and never frees it).

    Started as `tansu broker --listener-url tcp://127.0.0.1:PORT --advertised-listener-url
    tcp://127.0.0.1:PORT --storage-engine memory://tansu/`, ready once the port accepts,
    terminated after the module.
    """
    with tansu_broker() as broker:
        yield broker


#: The shared node's settings beyond kafka_broker()'s: the coordinator looks for
#: transactions past their timeout every 500 ms (not 10 s), so the test of that abort
#: waits seconds, not tens of them.
KAFKA_PROPERTIES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture(scope="module")
def kafka() -> Iterator[KafkaNode]:
    """A fresh Apache Kafka 4.4 node per test module (KRaft, broker and controller in one
    JVM, transactions v2 finalized), from the jars `make kafka` fetched; stopped and its
    directory removed after the module."""
    with kafka_broker(server_properties=KAFKA_PROPERTIES) as node:
        yield node


@pytest.fixture(scope="module", params=KINDS)
def broker_kind(request: pytest.FixtureRequest) -> str:
    """ "kafka" (Apache Kafka 4.4, marked `kafka`), then "tansu" (marked `tansu`)."""
    return str(request.param)


@pytest.fixture(scope="module")
def real_broker(request: pytest.FixtureRequest, broker_kind: str) -> Iterator[RealBroker]:
    """The module's Kafka node or a fresh Tansu (tests/integration/_real.py); modules on
    both anyio backends take `real_broker_per_backend()` instead."""
    with real_broker_for(request, broker_kind, "sy") as broker:
        yield broker


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    """A throwaway certificate authority (trustme) for the module's TLS brokers."""
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's certificate authority as a PEM file, for clients that take a path."""
    path = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return path
