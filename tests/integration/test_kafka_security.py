"""TLS and SASL against Apache Kafka 4.4: one node (`kafka_broker`) serving PLAINTEXT,
SASL_PLAINTEXT, SSL and SASL_SSL, with PLAIN, SCRAM-SHA-512 and OAUTHBEARER (unsecured
JWTs) enabled and SCRAM-SHA-256 left out, so that a mechanism the broker does not enable
can be asked for.

Every refusal (a wrong password, a mechanism the broker does not enable, a token it
rejects, a certificate the client does not trust) fails the first send within seconds,
not after `max_block` (60 s), with an error that names the cause.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._docs import example_tests, python_blocks
from trio_kafka import (
    Acknowledged,
    AuthenticationError,
    OAuthBearerToken,
    SaslConfig,
    open_producer,
    tls_context,
)
from trio_kafka.testing import KafkaNode, kafka_broker, unsecured_jwt

DOCS = Path(__file__).resolve().parents[2] / "docs"
USERS = {"alice": "alice-secret"}
ENABLED = ("PLAIN", "SCRAM-SHA-512", "OAUTHBEARER")
#: Refusals must come long before max_block's 60 s (generous slack for a shared machine).
FAST = 15.0


@pytest.fixture(scope="module")
def secure_kafka() -> Iterator[KafkaNode]:
    with kafka_broker(
        listeners=("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"),
        sasl_users=USERS,
        sasl_mechanisms=ENABLED,
    ) as node:
        yield node


def _token() -> str:
    return unsecured_jwt("alice", issued_at=time.time())


async def _acknowledged(bootstrap: str, **options: Any) -> None:
    async with open_producer(bootstrap, max_block=30.0, **options) as producer:
        ack = await producer.send_and_wait("secure", b"hello")
    assert isinstance(ack, Acknowledged)


async def _refused(bootstrap: str, **options: Any) -> str:
    """The message of the AuthenticationError the first send raises, checked to come
    well before max_block (left at its default, 60 s)."""
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        async with open_producer(bootstrap, **options) as producer:
            await producer.send_and_wait("secure", b"hello")
    assert time.monotonic() - started < FAST
    return str(info.value)


# -- each mechanism and protocol, accepted ----------------------------------------------


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_sasl_plaintext_with_a_password(secure_kafka: KafkaNode, mechanism: str) -> None:
    await _acknowledged(
        secure_kafka.address("SASL_PLAINTEXT"),
        sasl=SaslConfig(mechanism, "alice", USERS["alice"]),
    )


async def test_tls_with_the_ca_of_the_test_broker(secure_kafka: KafkaNode) -> None:
    await _acknowledged(
        secure_kafka.address("SSL"),
        security_protocol="SSL",
        ssl_cafile=str(secure_kafka.ca_file),
    )


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_sasl_ssl_with_kafkas_names(secure_kafka: KafkaNode, mechanism: str) -> None:
    await _acknowledged(
        secure_kafka.address("SASL_SSL"),
        security_protocol="SASL_SSL",
        sasl_mechanism=mechanism,
        sasl_plain_username="alice",
        sasl_plain_password=USERS["alice"],
        ssl_cafile=str(secure_kafka.ca_file),
    )


async def test_oauthbearer_with_a_plain_function(secure_kafka: KafkaNode) -> None:
    await _acknowledged(
        secure_kafka.address("SASL_PLAINTEXT"),
        sasl=SaslConfig("OAUTHBEARER", token_provider=_token),
    )


async def test_oauthbearer_over_tls_with_an_async_provider_and_extensions(
    secure_kafka: KafkaNode,
) -> None:
    asked: list[str] = []

    async def provider() -> OAuthBearerToken:
        asked.append("token")
        return OAuthBearerToken(_token(), {"logicalCluster": "lkc-test"})

    await _acknowledged(
        secure_kafka.address("SASL_SSL"),
        security_protocol="SASL_SSL",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauthbearer_token_provider=provider,
        ssl_cafile=str(secure_kafka.ca_file),
    )
    assert asked  # once per connection set up


async def test_oauthbearer_with_a_kafka_python_style_token_provider(
    secure_kafka: KafkaNode,
) -> None:
    class Provider:
        def token(self) -> str:
            return _token()

    await _acknowledged(
        secure_kafka.address("SASL_PLAINTEXT"),
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=Provider(),
    )


# -- each refusal, at once and named ----------------------------------------------------


@pytest.mark.parametrize(
    ("mechanism", "reason"),
    [
        ("PLAIN", "Invalid username or password"),
        ("SCRAM-SHA-512", "invalid credentials with SASL mechanism SCRAM-SHA-512"),
    ],
    ids=["PLAIN", "SCRAM-SHA-512"],
)
async def test_a_wrong_password_fails_at_once_with_the_brokers_reason(
    secure_kafka: KafkaNode, mechanism: str, reason: str
) -> None:
    message = await _refused(
        secure_kafka.address("SASL_PLAINTEXT"),
        sasl=SaslConfig(mechanism, "alice", "wrong"),
    )
    assert "authentication of user 'alice' (SASL_AUTHENTICATION_FAILED)" in message
    assert reason in message  # Kafka's own words


async def test_a_mechanism_the_broker_does_not_enable_fails_at_once(
    secure_kafka: KafkaNode,
) -> None:
    message = await _refused(
        secure_kafka.address("SASL_PLAINTEXT"),
        sasl=SaslConfig("SCRAM-SHA-256", "alice", USERS["alice"]),
    )
    assert (
        "refused SASL mechanism SCRAM-SHA-256 (UNSUPPORTED_SASL_MECHANISM); "
        "it offers: PLAIN, SCRAM-SHA-512, OAUTHBEARER"
    ) in message


async def test_an_expired_oauthbearer_token_fails_at_once_with_the_brokers_reason(
    secure_kafka: KafkaNode,
) -> None:
    expired = unsecured_jwt("alice", issued_at=time.time() - 7200, lifetime=60)
    message = await _refused(
        secure_kafka.address("SASL_PLAINTEXT"),
        sasl=SaslConfig("OAUTHBEARER", token_provider=lambda: expired),
    )
    assert (
        "rejected SASL OAUTHBEARER authentication (SASL_AUTHENTICATION_FAILED): "
        '{"status":"invalid_token"}'
    ) in message


async def test_a_failing_token_provider_fails_at_once_naming_it(
    secure_kafka: KafkaNode,
) -> None:
    def identity_provider_down() -> str:
        raise OSError("the identity provider did not answer")

    message = await _refused(
        secure_kafka.address("SASL_PLAINTEXT"),
        sasl=SaslConfig("OAUTHBEARER", token_provider=identity_provider_down),
    )
    assert "identity_provider_down raised OSError: the identity provider" in message


async def test_an_untrusted_certificate_fails_at_once_naming_the_ca_file(
    secure_kafka: KafkaNode, ca: Any, tmp_path: Path
) -> None:
    other_ca = tmp_path / "other-ca.pem"
    ca.cert_pem.write_to_path(str(other_ca))
    message = await _refused(
        secure_kafka.address("SSL"), security_protocol="SSL", ssl_cafile=str(other_ca)
    )
    assert (
        "failed verification: certificate verify failed: unable to get local issuer "
        f"certificate (is the CA right? ssl_cafile={str(other_ca)!r})"
    ) in message


async def test_an_untrusted_certificate_over_sasl_ssl_fails_at_once(
    secure_kafka: KafkaNode,
) -> None:
    message = await _refused(
        secure_kafka.address("SASL_SSL"),
        tls=tls_context(),  # the system's CAs, which never signed the test CA
        sasl=SaslConfig("PLAIN", "alice", USERS["alice"]),
    )
    assert "certificate verify failed" in message
    assert "is the CA right? the CAs loaded into the tls= SSLContext" in message


async def test_the_plaintext_listener_beside_them(secure_kafka: KafkaNode) -> None:
    # Also: a produced batch's baseOffset is 0 for Kafka, which refuses our -1 ("no
    # expected offset", the CAS extension's) with INVALID_RECORD.
    await _acknowledged(secure_kafka.bootstrap)


# -- docs/testing.md's examples on this node ---------------------------------------------


@pytest.mark.parametrize("number", [1, 4])
async def test_the_docs_examples_pass_on_this_node(secure_kafka: KafkaNode, number: int) -> None:
    namespace = example_tests("testing.md", number)
    for name, test in namespace.items():
        if name.startswith("test_"):
            await test(secure_kafka)


async def test_the_oauthbearer_docs_example_passes_on_this_node(secure_kafka: KafkaNode) -> None:
    class IdentityProvider:
        async def client_credentials(self, client_id: str) -> str:
            return unsecured_jwt(client_id, issued_at=time.time())

    source = python_blocks(DOCS / "security.md")[2]
    source = source.replace("broker:9093", secure_kafka.address("SASL_SSL"))
    source = source.replace('"ca.pem"', repr(str(secure_kafka.ca_file)))
    body = textwrap.indent(source, "    ")
    namespace: dict[str, Any] = {"identity_provider": IdentityProvider()}
    exec(compile(f"async def example():\n{body}\n", "docs/security.md block 3", "exec"), namespace)
    await namespace["example"]()


# -- the blocking producer takes the same options -----------------------------------------


def test_the_blocking_producer_over_sasl_ssl_with_kafkas_names(secure_kafka: KafkaNode) -> None:
    from trio_kafka.sync import Producer

    with Producer(
        secure_kafka.address("SASL_SSL"),
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password=USERS["alice"],
        ssl_cafile=str(secure_kafka.ca_file),
        max_block=30.0,
    ) as producer:
        ack = producer.send("secure", b"hello").result(timeout=30)
    assert isinstance(ack, Acknowledged)


def test_the_blocking_producer_over_tls_with_a_context(secure_kafka: KafkaNode) -> None:
    from trio_kafka.sync import Producer

    with Producer(
        secure_kafka.address("SSL"),
        tls=tls_context(cafile=str(secure_kafka.ca_file)),
        max_block=30.0,
    ) as producer:
        ack = producer.send("secure", b"hello").result(timeout=30)
    assert isinstance(ack, Acknowledged)
