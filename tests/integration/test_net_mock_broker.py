"""Our selector against our mock broker over real TCP: SASL SCRAM-SHA-512 inside TLS."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator

import pytest
import trio
import trustme
from anyio.streams.tls import TLSStream

from trio_kafka.broker import Cluster, HookCall, open_cluster
from trio_kafka.broker import SaslConfig as BrokerSasl
from trio_kafka.errors import AuthenticationError, FatalError
from trio_kafka.net import SaslConfig, TlsTransport, open_selector
from trio_kafka.net._connection import AnyioStream
from trio_kafka.protocol.messages.sasl_authenticate import SaslAuthenticateRequest


@pytest.fixture(scope="module")
def cafile(ca: trustme.CA) -> Iterator[str]:
    with ca.cert_pem.tempfile() as path:
        yield path


@pytest.fixture
async def tls_cluster(ca: trustme.CA) -> AsyncIterator[Cluster]:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server_context)
    sasl = BrokerSasl(users={"alice": "s3cret"}, mechanisms=("SCRAM-SHA-512",))
    async with open_cluster(
        2, sasl=sasl, ssl_context=server_context, topics={"orders": 3}
    ) as cluster:
        yield cluster


async def test_scram_sha_512_over_tls_reaches_every_broker(
    tls_cluster: Cluster, cafile: str
) -> None:
    async with open_selector(
        tls_cluster.bootstrap,
        transport=TlsTransport.create(cafile=cafile),
        sasl=SaslConfig("SCRAM-SHA-512", "alice", "s3cret"),
    ) as selector:
        topic = await selector.wait_for_topic("orders", timeout=5)
        assert topic.partition_count == 3
        for node_id in sorted(selector.metadata.brokers):
            connection = await selector.connection(node_id)
            assert isinstance(connection.stream, AnyioStream)
            assert isinstance(connection.stream.stream, TLSStream)
            info = selector.api_versions(node_id)
            assert info is not None and info.supports_cas  # our broker has the extension
        print(f"\n{selector!r}")


async def test_a_wrong_password_fails_promptly_with_authentication_error(
    tls_cluster: Cluster, cafile: str
) -> None:
    async with open_selector(
        tls_cluster.bootstrap,
        transport=TlsTransport.create(cafile=cafile),
        sasl=SaslConfig("SCRAM-SHA-512", "alice", "wrong"),
    ) as selector:
        attempts: list[HookCall] = []
        tls_cluster.add_hook(SaslAuthenticateRequest, attempts.append)
        with pytest.raises(AuthenticationError) as info:
            await selector.refresh_metadata()
        assert isinstance(info.value, FatalError)
        assert "SASL_AUTHENTICATION_FAILED" in str(info.value)
        # Promptly: the first refusal ends it, no retry loop (SCRAM's client-first and
        # client-final messages are the only two SaslAuthenticate requests).
        assert len(attempts) == 2
        print(f"\n{info.value}")


async def test_an_untrusted_broker_certificate_is_an_authentication_error(
    tls_cluster: Cluster,
) -> None:
    async with open_selector(
        tls_cluster.bootstrap,
        transport=TlsTransport.create(),  # system CAs: the trustme CA is unknown
        sasl=SaslConfig("SCRAM-SHA-512", "alice", "s3cret"),
    ) as selector:
        with trio.fail_after(5), pytest.raises(AuthenticationError, match="certificate"):
            await selector.refresh_metadata()
