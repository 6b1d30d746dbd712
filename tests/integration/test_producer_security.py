"""TLS and SASL from `open_producer`, against our mock broker over TLS + SCRAM.

Both ways in: our options (`tls=`, `sasl=`) and Kafka's names (`security_protocol`,
`sasl_mechanism`, `sasl_plain_username`, ...). A contradiction or half the credentials
is a `ConfigError`, never a silently plaintext or unauthenticated connection.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from trio_kafka import (
    Acknowledged,
    AuthenticationError,
    ConfigError,
    SaslConfig,
    open_producer,
    tls_context,
)
from trio_kafka.broker import Cluster, open_cluster
from trio_kafka.broker import SaslConfig as BrokerSasl

trustme = pytest.importorskip("trustme")

USERS = {"alice": "alice-secret"}


@pytest.fixture(scope="module")
def ca_file(ca: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tls") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return path


@pytest.fixture
async def secure_cluster(ca: Any) -> AsyncIterator[Cluster]:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server)
    async with open_cluster(sasl=BrokerSasl(USERS), ssl_context=server) as cluster:
        yield cluster


async def _acknowledged(cluster: Cluster, **options: Any) -> None:
    async with open_producer(cluster.bootstrap, max_block=10.0, **options) as producer:
        ack = await producer.send_and_wait("secure", b"hello")
    assert isinstance(ack, Acknowledged)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_tls_and_sasl_with_our_options(
    secure_cluster: Cluster, ca_file: Path, mechanism: str
) -> None:
    await _acknowledged(
        secure_cluster,
        tls=tls_context(cafile=str(ca_file)),
        sasl=SaslConfig(mechanism, "alice", USERS["alice"]),
    )


async def test_tls_and_sasl_with_kafkas_names(secure_cluster: Cluster, ca_file: Path) -> None:
    await _acknowledged(
        secure_cluster,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=USERS["alice"],
        ssl_cafile=str(ca_file),
    )


async def test_tls_and_sasl_with_the_java_dotted_names(
    secure_cluster: Cluster, ca_file: Path
) -> None:
    await _acknowledged(
        secure_cluster,
        **{
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": USERS["alice"],
            "ssl.ca.location": str(ca_file),
        },
    )


async def test_a_wrong_password_is_an_authentication_error(
    secure_cluster: Cluster, ca_file: Path
) -> None:
    with pytest.raises(AuthenticationError):
        await _acknowledged(
            secure_cluster,
            tls=tls_context(cafile=str(ca_file)),
            sasl=SaslConfig("SCRAM-SHA-512", "alice", "wrong"),
        )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"security_protocol": "TLS"}, "security_protocol='TLS' is not allowed: use one of"),
        ({"security_protocol": "SASL_SSL"}, "needs sasl_mechanism, sasl_plain_username"),
        (
            {"sasl_mechanism": "PLAIN", "sasl_plain_username": "alice"},
            "needs sasl_plain_password",
        ),
        (
            {"security_protocol": "SSL", "sasl_plain_username": "a"},
            "does not authenticate: use SASL_SSL",
        ),
        ({"security_protocol": "PLAINTEXT", "tls": True}, "contradicts tls="),
        ({"security_protocol": "SSL", "tls": False}, "tls=False contradicts"),
        ({"tls": "yes"}, "tls='yes' is not allowed"),
        ({"sasl": ("PLAIN", "a", "b")}, "is not allowed: pass trio_kafka.SaslConfig"),
        ({"sasl_mechanism": "GSSAPI", "sasl_username": "a", "sasl_password": "b"}, "GSSAPI"),
    ],
)
async def test_security_contradictions_are_config_errors(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        async with open_producer("127.0.0.1:9", **options):
            pass
    assert message in str(info.value)


async def test_tls_true_refuses_a_certificate_the_system_does_not_trust(
    secure_cluster: Cluster,
) -> None:
    with pytest.raises(AuthenticationError, match="failed verification"):
        await _acknowledged(
            secure_cluster, tls=True, sasl=SaslConfig("PLAIN", "alice", USERS["alice"])
        )
