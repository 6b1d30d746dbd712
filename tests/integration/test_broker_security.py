"""SASL (PLAIN, SCRAM-SHA-256/512) and TLS, with confluent-kafka as the client."""

from __future__ import annotations

import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")
trustme = pytest.importorskip("trustme")
from confluent_kafka import KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from trio_kafka.broker import SaslConfig, ThreadedCluster, run_in_thread  # noqa: E402

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
QUIET = {"log_level": 0, "logger": lambda *a: None}


@pytest.fixture(scope="module")
def tls_cluster(
    ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ThreadedCluster, Path]]:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    ca_file = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with run_in_thread(1, sasl=SaslConfig(USERS), ssl_context=ctx) as cluster:
        yield cluster, ca_file


def _produce(conf: dict[str, object]) -> list[object]:
    producer = Producer({**conf, **QUIET, "message.timeout.ms": 5000, "socket.timeout.ms": 5000})
    outcomes: list[object] = []
    producer.produce(
        f"t-{uuid.uuid4().hex[:6]}",
        value=b"hello",
        on_delivery=lambda e, m: outcomes.append(e or m.offset()),
    )
    producer.flush(10)
    return outcomes


def _sasl_conf(
    cluster: ThreadedCluster, ca_file: Path, mechanism: str, password: str
) -> dict[str, object]:
    return {
        "bootstrap.servers": cluster.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca_file),
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": password,
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_sasl_over_tls_authenticates_and_produces(
    tls_cluster: tuple[ThreadedCluster, Path], mechanism: str
) -> None:
    cluster, ca_file = tls_cluster
    assert _produce(_sasl_conf(cluster, ca_file, mechanism, USERS["alice"])) == [0]


def test_wrong_scram_password_is_an_authentication_error_not_a_hang(
    tls_cluster: tuple[ThreadedCluster, Path],
) -> None:
    cluster, ca_file = tls_cluster
    errors: list[confluent_kafka.KafkaError] = []
    producer = Producer(
        {
            **_sasl_conf(cluster, ca_file, "SCRAM-SHA-512", "wrong"),
            **QUIET,
            "error_cb": errors.append,
        }
    )
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, "no error reported within 10 s"
    assert errors[0].code() == confluent_kafka.KafkaError._AUTHENTICATION, errors[0]
    assert (
        "SASL authentication error" in errors[0].str() or "Authentication failed" in errors[0].str()
    )
    producer.flush(0)


def test_plaintext_client_is_refused_by_a_tls_listener(
    tls_cluster: tuple[ThreadedCluster, Path],
) -> None:
    cluster, _ = tls_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=2)


def test_sasl_without_tls_and_unauthenticated_requests_are_refused() -> None:
    with run_in_thread(1, sasl=SaslConfig(USERS, mechanisms=("SCRAM-SHA-256",))) as cluster:
        ok = {
            "bootstrap.servers": cluster.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "bob",
            "sasl.password": USERS["bob"],
        }
        assert _produce(ok) == [0]
        # No SASL at all: the broker closes the connection at the first Metadata request.
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **QUIET})
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=2)
        # A mechanism the cluster does not enable.
        plain = AdminClient({**ok, "sasl.mechanism": "PLAIN", **QUIET})
        with pytest.raises(KafkaException):
            plain.list_topics(timeout=2)
