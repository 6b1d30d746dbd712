"""TLS and SASL from `open_producer`, `open_bulk_loader` and `open_conditional_writer`,
against our mock broker over TLS + SCRAM.

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
    BrokerConnectionError,
    ConfigError,
    SaslConfig,
    open_producer,
    tls_context,
)
from trio_kafka.broker import Cluster, open_cluster
from trio_kafka.broker import SaslConfig as BrokerSasl
from trio_kafka.client import open_bulk_loader, open_conditional_writer
from trio_kafka.net import TlsTransport, open_selector

trustme = pytest.importorskip("trustme")

USERS = {"alice": "alice-secret"}


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
        (
            {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"},
            "needs sasl_oauthbearer_token_provider",
        ),
        (
            {"sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": lambda: "t.k."}
            | {"sasl_plain_username": "alice"},
            "not a username and password",
        ),
        (
            {"sasl_mechanism": "PLAIN", "sasl_oauthbearer_token_provider": lambda: "t.k."}
            | {"sasl_plain_username": "alice", "sasl_plain_password": "pw"},
            "a token provider is for SASL OAUTHBEARER, not PLAIN",
        ),
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


async def test_a_certificate_the_ca_file_does_not_trust_names_the_file(
    secure_cluster: Cluster, tmp_path: Path
) -> None:
    other_ca = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    with pytest.raises(AuthenticationError) as info:
        await _acknowledged(
            secure_cluster,
            security_protocol="SASL_SSL",
            sasl_mechanism="PLAIN",
            sasl_plain_username="alice",
            sasl_plain_password=USERS["alice"],
            ssl_cafile=str(other_ca),
        )
    assert (
        "certificate verify failed: unable to get local issuer certificate "
        f"(is the CA right? ssl_cafile={str(other_ca)!r})"
    ) in str(info.value)


# -- the bulk loader and the conditional writer take the same options -------------------

KAFKA_NAMES = {
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-256",
    "sasl_plain_username": "alice",
    "sasl_plain_password": USERS["alice"],
}


def values_in(cluster: Cluster, topic: str, partitions: int) -> list[bytes | None]:
    return [
        r.value
        for p in range(partitions)
        for b in cluster.decoded(topic, p)
        if not b.is_control
        for r in b.records
    ]


@pytest.mark.parametrize("names", ["ours", "kafka"])
async def test_a_bulk_loader_loads_over_tls_and_sasl(
    secure_cluster: Cluster, ca_file: Path, names: str
) -> None:
    secure_cluster.create_topic("loaded", 2)
    security: dict[str, Any] = (
        {
            "tls": tls_context(cafile=str(ca_file)),
            "sasl": SaslConfig("PLAIN", "alice", "alice-secret"),
        }
        if names == "ours"
        else {**KAFKA_NAMES, "ssl_cafile": str(ca_file)}
    )
    rows = [b"row-%d" % i for i in range(500)]
    async with open_bulk_loader(
        "loaded", "L", bootstrap=secure_cluster.bootstrap, batch_bytes=1024, **security
    ) as loader:
        result = await loader.run(rows)
    assert (result.loaded, result.guarantee) == (500, "transactional")
    assert sorted(values_in(secure_cluster, "loaded", 2)) == sorted(rows)


async def test_a_bulk_loader_with_a_wrong_password_is_an_authentication_error(
    secure_cluster: Cluster, ca_file: Path
) -> None:
    secure_cluster.create_topic("loaded", 1)
    with pytest.raises(AuthenticationError):
        async with open_bulk_loader(
            "loaded",
            "L",
            bootstrap=secure_cluster.bootstrap,
            tls=tls_context(cafile=str(ca_file)),
            sasl=SaslConfig("SCRAM-SHA-512", "alice", "wrong"),
        ) as loader:
            await loader.run([b"row"])
    assert values_in(secure_cluster, "loaded", 1) == []


@pytest.mark.parametrize("names", ["ours", "kafka"])
async def test_a_conditional_writer_appends_over_tls_and_sasl(
    secure_cluster: Cluster, ca_file: Path, names: str
) -> None:
    secure_cluster.create_topic("log", 1, {"expected.offset.check.enable": "true"})
    security: dict[str, Any] = (
        {
            "tls": tls_context(cafile=str(ca_file)),
            "sasl": SaslConfig("SCRAM-SHA-512", "alice", "alice-secret"),
        }
        if names == "ours"
        else {**KAFKA_NAMES, "ssl_cafile": str(ca_file)}
    )
    async with open_conditional_writer(
        "log", 0, bootstrap=secure_cluster.bootstrap, max_block=10.0, **security
    ) as log:
        assert [r async for r in log.read_to_end()] == []
        assert (await log.append(b"state-1")).offset == 0
        assert (await log.append(b"state-2")).offset == 1
    assert log.guarantee == "exactly_once_cas"
    assert values_in(secure_cluster, "log", 1) == [b"state-1", b"state-2"]


async def test_security_options_beside_a_shared_selector_or_producer_are_refused(
    secure_cluster: Cluster, ca_file: Path
) -> None:
    tls = tls_context(cafile=str(ca_file))
    sasl = SaslConfig("PLAIN", "alice", USERS["alice"])
    async with open_selector(
        secure_cluster.bootstrap, transport=TlsTransport(ssl_context=tls), sasl=sasl
    ) as selector:
        with pytest.raises(ConfigError, match="belong to the selector"):
            async with open_bulk_loader("t", "L", selector=selector, tls=tls):
                pass
        with pytest.raises(ConfigError, match="belong to the selector"):
            async with open_bulk_loader("t", "L", selector=selector, security_protocol="SSL"):
                pass
    async with open_producer(secure_cluster.bootstrap, tls=tls, sasl=sasl) as producer:
        with pytest.raises(ConfigError, match=r"\['tls', 'sasl'\] belong to the producer"):
            async with open_conditional_writer("log", 0, producer=producer, tls=tls, sasl=sasl):
                pass


async def test_bulk_loader_security_contradictions_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="security_protocol='TLS' is not allowed"):
        async with open_bulk_loader("t", "L", bootstrap="127.0.0.1:9", security_protocol="TLS"):
            pass
    with pytest.raises(ConfigError, match="needs sasl_plain_password"):
        async with open_conditional_writer(
            "t", 0, bootstrap="127.0.0.1:9", sasl_mechanism="PLAIN", sasl_plain_username="a"
        ):
            pass


async def test_tls_to_a_plaintext_listener_says_the_handshake_was_closed() -> None:
    # It raised a bare anyio.EndOfStream: no message, no address.
    async with open_cluster() as cluster:
        with pytest.raises(BrokerConnectionError, match="closed the connection during the TLS"):
            async with open_producer(cluster.bootstrap, tls=True, max_block=1.0) as producer:
                await producer.send("t", b"x")


async def test_no_credentials_for_a_sasl_listener_suggests_security_protocol() -> None:
    # It asked "Is a broker running at ...?" of a broker that was running; then it
    # named security_protocol, but only after max_block (test_net_listener_mismatch.py).
    async with open_cluster(sasl=BrokerSasl(USERS)) as cluster:
        with pytest.raises(AuthenticationError, match="is it a SASL listener") as info:
            async with open_producer(cluster.bootstrap) as producer:
                await producer.send("t", b"x")
    assert "security_protocol='SASL_PLAINTEXT'" in str(info.value)
    assert "Is a broker running" not in str(info.value)


def test_a_tls_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    # FileNotFoundError said "[Errno 2] No such file or directory", naming no file.
    missing = tmp_path / "ca.pem"
    with pytest.raises(ConfigError, match=f"cafile='{missing}'"):
        tls_context(cafile=str(missing))
    with pytest.raises(ConfigError, match="certfile="):
        tls_context(certfile=str(missing))
