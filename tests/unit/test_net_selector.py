"""KafkaSelector over an in-memory fake cluster (no sockets), with trio's MockClock."""

from __future__ import annotations

import itertools
import random
from typing import Any

import attrs
import pytest
import scramp
import trio
import trio.testing

from trio_kafka.errors import (
    AuthenticationError,
    BrokerConnectionError,
    ErrorCode,
    FatalError,
    UnknownTopicError,
)
from trio_kafka.net import (
    CAS_FEATURE,
    TRANSACTION_VERSION_FEATURE,
    SaslConfig,
    _connection,
    open_selector,
)
from trio_kafka.protocol import REQUEST_CLASSES, FrameSplitter, decode_request, encode_response
from trio_kafka.protocol.messages.api_versions import (
    ApiVersion,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)
from trio_kafka.protocol.messages.metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from trio_kafka.protocol.messages.sasl_authenticate import SaslAuthenticateResponse
from trio_kafka.protocol.messages.sasl_handshake import SaslHandshakeResponse


@attrs.define
class FakeCluster:
    """A Transport whose every connection reaches an in-memory fake broker task."""

    nursery: trio.Nursery
    #: address -> node id the fake broker answers as.
    brokers: dict[tuple[str, int], int] = attrs.field(factory=lambda: {("b1", 9092): 1})
    topics: dict[str, int] = attrs.field(factory=dict)
    refused: set[tuple[str, int]] = attrs.field(factory=set)
    #: Connects to these never complete (a blackholed address).
    hanging: set[tuple[str, int]] = attrs.field(factory=set)
    #: API key -> max version the fake broker claims.
    max_versions: dict[int, int] = attrs.field(factory=dict)
    #: The fake broker answers ApiVersions above this version with UNSUPPORTED_VERSION.
    api_versions_max: int = 4
    features: bool = True
    #: username -> password the fake broker accepts over SASL (PLAIN or SCRAM).
    users: dict[str, str] = attrs.field(factory=dict)
    connects: list[tuple[float, str, int]] = attrs.field(factory=list)
    #: The broker ends of every connection, to drop them.
    server_streams: list[trio.abc.Stream] = attrs.field(factory=list)
    requests: list[tuple[str, int, str, int]] = attrs.field(factory=list)
    #: The topics each MetadataRequest named, sorted (None: every topic).
    metadata_asked: list[list[str] | None] = attrs.field(factory=list)

    async def connect(self, host: str, port: int) -> trio.abc.Stream:
        self.connects.append((trio.current_time(), host, port))
        if (host, port) in self.hanging:
            await trio.sleep_forever()
        if (host, port) in self.refused or (host, port) not in self.brokers:
            raise ConnectionRefusedError(111, f"Connection refused by {host}:{port}")
        client, server = trio.testing.memory_stream_pair()
        self.server_streams.append(server)
        self.nursery.start_soon(self._serve, server, host, port)
        return client

    def count(self, name: str) -> int:
        return sum(1 for r in self.requests if r[2] == name)

    async def _serve(self, stream: trio.abc.Stream, host: str, port: int) -> None:
        splitter = FrameSplitter()
        state: dict[str, Any] = {}
        try:
            while data := await stream.receive_some(65536):
                for frame in splitter.feed(data):
                    header, request = decode_request(frame)
                    name = type(request).__name__
                    self.requests.append((host, port, name, header.api_version))
                    response, version = self._answer(request, header.api_version, state)
                    await stream.send_all(
                        encode_response(
                            response, version=version, correlation_id=header.correlation_id
                        )
                    )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def _answer(self, request: Any, version: int, state: dict[str, Any]) -> tuple[Any, int]:
        match type(request).__name__:
            case "SaslHandshakeRequest":
                offered = ["PLAIN", "SCRAM-SHA-512"]
                state["mechanism"] = request.mechanism
                code = 0 if request.mechanism in offered else ErrorCode.UNSUPPORTED_SASL_MECHANISM
                return SaslHandshakeResponse(error_code=code, mechanisms=offered), version
            case "SaslAuthenticateRequest":
                return self._authenticate(request.auth_bytes, state), version
            case "ApiVersionsRequest":
                keys = [
                    ApiVersion(
                        api_key=key,
                        min_version=cls.MIN_VERSION,
                        max_version=self.max_versions.get(key, cls.MAX_VERSION),
                    )
                    for key, cls in sorted(REQUEST_CLASSES.items())
                ]
                if version > self.api_versions_max:
                    # KIP-511: a v0 answer with the broker's own ApiVersions range.
                    own = [ApiVersion(api_key=18, min_version=0, max_version=self.api_versions_max)]
                    return ApiVersionsResponse(
                        error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=own
                    ), 0
                supported = [SupportedFeatureKey(name=CAS_FEATURE, min_version=1, max_version=1)]
                finalized = [
                    FinalizedFeatureKey(
                        name=TRANSACTION_VERSION_FEATURE, min_version_level=2, max_version_level=2
                    )
                ]
                return ApiVersionsResponse(
                    api_keys=keys,
                    supported_features=supported if self.features else [],
                    finalized_features=finalized if self.features else [],
                    finalized_features_epoch=7 if self.features else -1,
                ), version
            case "MetadataRequest":
                names = (
                    list(self.topics)
                    if request.topics is None
                    else [t.name for t in request.topics]
                )
                self.metadata_asked.append(
                    None if request.topics is None else sorted(t.name for t in request.topics)
                )
                leader = min(self.brokers.values())
                topics = [
                    MetadataResponseTopic(
                        name=name,
                        error_code=0
                        if name in self.topics
                        else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        partitions=[
                            MetadataResponsePartition(
                                partition_index=i,
                                leader_id=leader,
                                leader_epoch=0,
                                replica_nodes=[leader],
                                isr_nodes=[leader],
                            )
                            for i in range(self.topics.get(name, 0))
                        ],
                    )
                    for name in names
                ]
                brokers = [
                    MetadataResponseBroker(node_id=node, host=host, port=port)
                    for (host, port), node in self.brokers.items()
                ]
                return MetadataResponse(brokers=brokers, topics=topics, cluster_id="fake"), version
        raise AssertionError(f"the fake broker does not answer {request!r}")

    def _authenticate(self, token: bytes, state: dict[str, Any]) -> SaslAuthenticateResponse:
        failed = ErrorCode.SASL_AUTHENTICATION_FAILED
        if state["mechanism"] == "PLAIN":
            _, user, password = token.decode().split("\0")
            if self.users.get(user) != password:
                return SaslAuthenticateResponse(error_code=failed, error_message="bad password")
            return SaslAuthenticateResponse()
        mechanism = scramp.ScramMechanism("SCRAM-SHA-512")
        try:
            if "scram" not in state:
                server = mechanism.make_server(
                    lambda user: mechanism.make_auth_info(
                        self.users.get(user, "?"), 4096, b"salt-of-the-fake"
                    )
                )
                server.set_client_first(token.decode())
                state["scram"] = server
                return SaslAuthenticateResponse(auth_bytes=server.get_server_first().encode())
            server = state["scram"]
            server.set_client_final(token.decode())
            return SaslAuthenticateResponse(auth_bytes=server.get_server_final().encode())
        except scramp.ScramException as exc:
            return SaslAuthenticateResponse(error_code=failed, error_message=str(exc))


async def test_versions_are_negotiated_and_features_exposed(nursery: trio.Nursery) -> None:
    cluster = FakeCluster(nursery, max_versions={3: 5})
    async with open_selector("b1:9092", transport=cluster) as selector:
        connection = await selector.connection(-1)
        info = selector.api_versions(-1)
        assert info is not None
        assert info.api_versions_version == 4
        assert info.version_for(3) == 5  # Metadata: the broker's max is below ours
        assert info.version_for(0) == REQUEST_CLASSES[0].MAX_VERSION
        assert connection.api_versions[3] == 5
        assert info.supports_cas
        assert info.supports_feature(CAS_FEATURE, 1)
        assert not info.supports_feature(CAS_FEATURE, 2)
        assert info.finalized_level(TRANSACTION_VERSION_FEATURE) == 2
        assert info.finalized_features_epoch == 7
        await selector.refresh_metadata()
        assert ("b1", 9092, "MetadataRequest", 5) in cluster.requests


async def test_a_broker_without_features_does_not_support_cas(nursery: trio.Nursery) -> None:
    cluster = FakeCluster(nursery, features=False)
    async with open_selector("b1:9092", transport=cluster) as selector:
        await selector.connection(-1)
        info = selector.api_versions(-1)
        assert info is not None and not info.supports_cas
        assert info.finalized_level(TRANSACTION_VERSION_FEATURE) is None


async def test_api_versions_is_retried_at_the_brokers_version_on_unsupported_version(
    nursery: trio.Nursery,
) -> None:
    cluster = FakeCluster(nursery, api_versions_max=2)
    async with open_selector("b1:9092", transport=cluster) as selector:
        await selector.connection(-1)
        info = selector.api_versions(-1)
        assert info is not None and info.api_versions_version == 2
        versions = [r[3] for r in cluster.requests if r[2] == "ApiVersionsRequest"]
        assert versions == [4, 2]
        assert len(cluster.connects) == 1  # same connection, as KIP-511 intends


async def test_api_versions_falls_back_to_v0_when_the_broker_names_no_range(
    nursery: trio.Nursery,
) -> None:
    cluster = FakeCluster(nursery, api_versions_max=0)
    async with open_selector("b1:9092", transport=cluster) as selector:
        await selector.connection(-1)
        info = selector.api_versions(-1)
        assert info is not None and info.api_versions_version == 0
        assert info.version_for(3) is not None


async def test_the_same_api_versions_answer_is_decoded_once_for_every_connection(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    decoded: list[str] = []
    decode = _connection.decode_response

    def counting(request_class: Any, version: int, frame: bytes) -> Any:
        decoded.append(request_class.__name__)
        return decode(request_class, version, frame)

    monkeypatch.setattr(_connection, "decode_response", counting)
    # An answer no other test gives (Metadata up to v7 only), so none is remembered yet.
    brokers = {("b1", 9092): 1, ("b2", 9092): 2, ("b3", 9092): 3}
    cluster = FakeCluster(nursery, brokers=brokers, max_versions={3: 7})
    async with open_selector("b1:9092,b2:9092,b3:9092", transport=cluster) as selector:
        for node_id in (-1, -2, -3):
            await selector.connection(node_id)
        infos = [selector.api_versions(node_id) for node_id in (-1, -2, -3)]
    assert cluster.count("ApiVersionsRequest") == 3  # every connection still asks
    assert decoded.count("ApiVersionsRequest") == 1
    assert all(info is not None and info.version_for(3) == 7 for info in infos)


async def test_a_different_api_versions_answer_is_negotiated_afresh(
    nursery: trio.Nursery,
) -> None:
    negotiated = []
    for metadata_max in (6, 5, 6):
        cluster = FakeCluster(nursery, max_versions={3: metadata_max})
        async with open_selector("b1:9092", transport=cluster) as selector:
            connection = await selector.connection(-1)
            info = selector.api_versions(-1)
            assert info is not None
            negotiated.append((info.version_for(3), connection.api_versions[3]))
    assert negotiated == [(6, 6), (5, 5), (6, 6)]


async def test_idle_connections_are_closed_after_connections_max_idle(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = FakeCluster(nursery)
    async with open_selector("b1:9092", transport=cluster, connections_max_idle=540.0) as selector:
        connection = await selector.connection(-1)
        opened = trio.current_time()
        await trio.sleep(539.0)
        assert connection.is_open
        await selector.request(-1, REQUEST_CLASSES[18](), version=0)  # activity resets idleness
        await trio.sleep(539.0)
        assert connection.is_open
        await connection.wait_closed()
        assert trio.current_time() - opened == pytest.approx(539.0 + 540.0)
        assert "ready 0" in repr(selector)
        again = await selector.connection(-1)  # reopened on demand, no backoff
        assert again is not connection and again.is_open
        assert len(cluster.connects) == 2


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


async def _refused_attempt_times(nursery: trio.Nursery, seed: int, attempts: int) -> list[float]:
    cluster = FakeCluster(nursery, refused={("b1", 9092)})
    async with open_selector(
        "b1:9092",
        transport=cluster,
        rng=random.Random(seed),
        reconnect_backoff=0.05,
        reconnect_backoff_max=1.0,
    ) as selector:
        for _ in range(attempts):
            with pytest.raises(BrokerConnectionError, match="Connection refused"):
                await selector.connection(-1)
        assert "backing off 1" in repr(selector)
    return [t for t, _, _ in cluster.connects]


async def test_reconnect_backoff_grows_exponentially_with_jitter_within_bounds(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    gaps = _gaps(await _refused_attempt_times(nursery, seed=1, attempts=10))
    for failures, gap in enumerate(gaps):
        nominal = 0.05 * 2**failures
        # Java's ExponentialBackoff: jitter of +-20% around the term, the term capped at the
        # maximum, the result capped at the maximum too.
        assert 0.8 * min(nominal, 1.0) - 1e-9 <= gap <= min(1.2 * nominal, 1.0) + 1e-9
    assert gaps[:4] != [0.05, 0.1, 0.2, 0.4]  # jittered, not exact
    assert max(gaps) <= 1.0 + 1e-9  # the cap (clock arithmetic adds float noise)
    assert gaps[-1] >= 0.8  # reached the cap


async def test_reconnect_backoff_jitter_comes_from_the_injected_rng(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    first = await _refused_attempt_times(nursery, seed=7, attempts=6)
    origin = first[0]
    second = await _refused_attempt_times(nursery, seed=7, attempts=6)
    third = await _refused_attempt_times(nursery, seed=8, attempts=6)
    assert _gaps(first) == pytest.approx(_gaps(second), abs=1e-9)
    assert _gaps(first) != pytest.approx(_gaps(third), abs=1e-9)
    assert origin == 0.0


async def test_concurrent_metadata_refreshes_share_one_request(nursery: trio.Nursery) -> None:
    cluster = FakeCluster(nursery, topics={"orders": 3})
    async with open_selector("b1:9092", transport=cluster) as selector:
        results = []

        async def refresh() -> None:
            results.append(await selector.refresh_metadata(["orders"]))

        async with trio.open_nursery() as inner:
            for _ in range(5):
                inner.start_soon(refresh)
        assert cluster.count("MetadataRequest") == 1
        assert all(r is results[0] for r in results)
        assert results[0].topic("orders") is not None


async def test_metadata_gives_node_ids_and_leaders(nursery: trio.Nursery) -> None:
    cluster = FakeCluster(nursery, brokers={("b1", 9092): 1, ("b2", 9092): 2}, topics={"orders": 2})
    async with open_selector("b2:9092", transport=cluster) as selector:
        assert selector.node_ids == [-1]
        topic = await selector.wait_for_topic("orders")
        assert topic.partition_count == 2
        assert selector.node_ids == [-1, 1, 2]
        leader = selector.metadata.leader_for("orders", 0)
        assert leader is not None and (leader.node_id, leader.host) == (1, "b1")
        response = await selector.request(1, REQUEST_CLASSES[18](), version=0)
        assert response.error_code == 0
        assert ("b1", 9092) in {(h, p) for _, h, p in cluster.connects}
        assert "metadata: 2 brokers, 1 topics" in repr(selector)


async def test_metadata_is_refreshed_when_older_than_metadata_max_age(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = FakeCluster(nursery, topics={"orders": 1})
    async with open_selector("b1:9092", transport=cluster, metadata_max_age=300.0) as selector:
        await selector.refresh_metadata(["orders"])
        await trio.sleep(299.0)
        assert cluster.count("MetadataRequest") == 1
        await trio.sleep(2.0)
        assert cluster.count("MetadataRequest") == 2
        assert selector.metadata.updated_at == pytest.approx(300.0)


async def test_new_topics_are_asked_for_alone_and_do_not_put_off_the_periodic_refresh(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    # KIP-526, as Java: a refresh for a new topic names that topic only, and the
    # metadata's age counts from the last refresh of every topic of interest.
    cluster = FakeCluster(nursery, topics={"a": 1, "b": 1, "c": 1})
    async with open_selector(
        "b1:9092", transport=cluster, metadata_max_age=300.0, metadata_max_idle=1000.0
    ) as selector:
        await selector.refresh_metadata(["a"])
        await trio.sleep(200.0)
        await selector.refresh_metadata(["b"])
        assert cluster.metadata_asked == [["a"], ["b"]]
        await trio.sleep(101.0)  # t=301: every topic of interest
        assert cluster.metadata_asked == [["a"], ["b"], ["a", "b"]]
        await trio.sleep(200.0)  # t=501: a new topic
        await selector.refresh_metadata(["c"])
        await trio.sleep(100.0)  # t=601: 300 s after the last full refresh, not 100
        assert cluster.metadata_asked == [["a"], ["b"], ["a", "b"], ["c"], ["a", "b", "c"]]
        await selector.refresh_metadata()  # after an error: every topic of interest too
        assert cluster.metadata_asked[-1] == ["a", "b", "c"]
        assert set(selector.metadata.topics) == {"a", "b", "c"}


async def test_a_topic_unused_for_metadata_max_idle_leaves_the_metadata(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    # Java's metadata.max.idle.ms: a producer that once wrote to a topic does not ask
    # for it at every periodic refresh for ever.
    cluster = FakeCluster(nursery, topics={"a": 1, "b": 1})
    async with open_selector(
        "b1:9092", transport=cluster, metadata_max_age=300.0, metadata_max_idle=250.0
    ) as selector:
        await selector.refresh_metadata(["a", "b"])
        await trio.sleep(200.0)
        selector.touch(["a"])  # a batch of "a" was sent
        await trio.sleep(101.0)  # t=301: "b" unused for 301 s, "a" for 101 s
        assert cluster.metadata_asked == [["a", "b"], ["a"]]
        assert set(selector.metadata.topics) == {"a"}  # "b" is no longer kept
        selector.touch(["b"])  # not of interest: touching does not bring it back
        assert (await selector.wait_for_topic("b")).partition_count == 1  # asking does
        assert cluster.metadata_asked[-1] == ["b"]
        await trio.sleep(200.0)
        selector.touch(["b"])  # t=501
        await trio.sleep(100.0)  # t=601: "b" used 100 s ago, "a" 401 s ago
        assert cluster.metadata_asked == [["a", "b"], ["a"], ["b"], ["b"]]
        assert set(selector.metadata.topics) == {"b"}


async def test_topics_named_while_a_request_is_out_go_together_in_the_next(
    nursery: trio.Nursery,
) -> None:
    cluster = FakeCluster(nursery, topics=dict.fromkeys("abcdef", 1))
    async with open_selector("b1:9092", transport=cluster) as selector:
        async with trio.open_nursery() as inner:
            for name in "abcdef":
                inner.start_soon(selector.refresh_metadata, [name])
        # The first to run starts a request for itself; the five named while it was out
        # share the next one (trio runs new tasks in no fixed order).
        first, second = cluster.metadata_asked
        assert first is not None and second is not None
        assert (len(first), sorted(first + second)) == (1, list("abcdef"))
        assert set(selector.metadata.topics) == set("abcdef")


async def test_a_missing_topic_raises_unknown_topic_after_max_block(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = FakeCluster(nursery)
    # max_block shorter than the propagation window: the whole max_block is waited.
    async with open_selector("b1:9092", transport=cluster, max_block=1.5) as selector:
        with pytest.raises(UnknownTopicError, match="Create it") as info:
            await selector.wait_for_topic("nope")
        assert info.value.topic == "nope"
        assert "UNKNOWN_TOPIC_OR_PARTITION" in str(info.value)
        assert trio.current_time() == pytest.approx(1.5)
        assert cluster.count("MetadataRequest") > 2  # retried with backoff meanwhile


async def test_a_topic_created_while_waiting_is_found(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = FakeCluster(nursery)

    async def create_later() -> None:
        await trio.sleep(1.0)
        cluster.topics["late"] = 4

    nursery.start_soon(create_later)
    async with open_selector("b1:9092", transport=cluster) as selector:
        topic = await selector.wait_for_topic("late")
        assert topic.partition_count == 4


async def test_no_reachable_broker_names_every_address_and_the_os_error(
    nursery: trio.Nursery,
) -> None:
    cluster = FakeCluster(nursery, brokers={})
    async with open_selector(["a:1", "b:2", "c:3"], transport=cluster) as selector:
        with pytest.raises(BrokerConnectionError) as info:
            await selector.refresh_metadata()
    message = str(info.value)
    for address in ("a:1", "b:2", "c:3"):
        assert address in message
    assert "Connection refused" in message


async def test_a_hanging_connect_does_not_hold_a_metadata_refresh(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    # Sim transactional seed 62: a refresh waited connection_setup_timeout (all of a
    # send()'s max_block) on one blackholed broker while another answered.
    cluster = FakeCluster(nursery, brokers={("b1", 9092): 1, ("b2", 9092): 2})
    async with open_selector("b1:9092", transport=cluster, rng=random.Random(0)) as selector:
        await selector.refresh_metadata()
        await selector.disconnect(-1)
        cluster.hanging.add(("b1", 9092))
        start, before = trio.current_time(), len(cluster.connects)
        await selector.refresh_metadata()
        # (This rng asks node 1 first.) Not 10 s: one hedge delay, then node 2.
        assert [host for _, host, _ in cluster.connects[before:]] == ["b1", "b2"]
        assert trio.current_time() - start == pytest.approx(1.0)


async def test_an_open_bootstrap_connection_answers_before_a_new_connect(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = FakeCluster(nursery, brokers={("b1", 9092): 1, ("b2", 9092): 2})
    async with open_selector("b2:9092", transport=cluster, rng=random.Random(1)) as selector:
        await selector.refresh_metadata()
        cluster.hanging.add(("b1", 9092))
        before = len(cluster.connects)
        for _ in range(5):
            await selector.refresh_metadata()
        assert len(cluster.connects) == before  # asked over the open one, every time


async def test_the_selector_repr_tells_the_state(nursery: trio.Nursery) -> None:
    cluster = FakeCluster(nursery)
    async with open_selector("b1:9092", transport=cluster) as selector:
        assert repr(selector) == (
            "<KafkaSelector [OPEN, nodes 1: ready 0, connecting 0, backing off 0; "
            "metadata: 0 brokers, 0 topics]>"
        )
        await selector.connection(-1)
        assert "ready 1" in repr(selector)
    assert repr(selector).startswith("<KafkaSelector [CLOSED")


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_sasl_authenticates_before_the_connection_is_handed_out(
    nursery: trio.Nursery, mechanism: str
) -> None:
    cluster = FakeCluster(nursery, users={"alice": "s3cret"})
    sasl = SaslConfig(mechanism, "alice", "s3cret")
    async with open_selector("b1:9092", transport=cluster, sasl=sasl) as selector:
        await selector.refresh_metadata()
    names = [r[2] for r in cluster.requests]
    rounds = 2 if mechanism.startswith("SCRAM") else 1
    assert (
        names[: 2 + rounds]
        == ["ApiVersionsRequest", "SaslHandshakeRequest"] + ["SaslAuthenticateRequest"] * rounds
    )
    assert names[2 + rounds] == "MetadataRequest"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_a_wrong_password_is_an_authentication_error(
    nursery: trio.Nursery, mechanism: str
) -> None:
    cluster = FakeCluster(nursery, users={"alice": "s3cret"})
    sasl = SaslConfig(mechanism, "alice", "wrong")
    async with open_selector("b1:9092", transport=cluster, sasl=sasl) as selector:
        with pytest.raises(AuthenticationError, match="alice") as info:
            await selector.connection(-1)
        assert isinstance(info.value, FatalError)
        assert "SASL_AUTHENTICATION_FAILED" in str(info.value)
        assert "wrong" not in repr(sasl)  # the password stays out of reprs


async def test_an_unsupported_sasl_mechanism_names_the_offered_ones(nursery: trio.Nursery) -> None:
    cluster = FakeCluster(nursery, users={"alice": "s3cret"})
    sasl = SaslConfig("SCRAM-SHA-256", "alice", "s3cret")
    async with open_selector("b1:9092", transport=cluster, sasl=sasl) as selector:
        with pytest.raises(AuthenticationError, match="PLAIN, SCRAM-SHA-512"):
            await selector.connection(-1)


async def test_a_dropped_connection_is_reopened_after_a_jittered_backoff(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = FakeCluster(nursery)
    async with open_selector("b1:9092", transport=cluster, reconnect_backoff=0.05) as selector:
        first = await selector.connection(-1)
        await cluster.server_streams[0].aclose()
        await first.wait_closed()
        dropped = trio.current_time()
        second = await selector.connection(-1)
        assert second is not first and second.is_open
        waited = trio.current_time() - dropped
        assert 0.04 <= waited <= 0.06
        # A successful setup resets the failure count: the next drop backs off 50 ms again.
        await cluster.server_streams[1].aclose()
        await second.wait_closed()
        dropped = trio.current_time()
        await selector.connection(-1)
        assert 0.04 <= trio.current_time() - dropped <= 0.06


async def test_disconnect_closes_without_backoff(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = FakeCluster(nursery)
    async with open_selector("b1:9092", transport=cluster) as selector:
        first = await selector.connection(-1)
        assert selector.is_ready(-1)
        await selector.disconnect(-1)
        assert not first.is_open and not selector.is_ready(-1)
        before = trio.current_time()
        await selector.connection(-1)
        assert trio.current_time() == before


async def test_the_body_error_leaves_open_selector_unwrapped(nursery: trio.Nursery) -> None:
    # trio's nursery would wrap it in an ExceptionGroup: `except KafkaError` must work.
    cluster = FakeCluster(nursery, brokers={})
    with pytest.raises(BrokerConnectionError, match="b9:9092"):
        async with open_selector("b9:9092", transport=cluster) as selector:
            await selector.refresh_metadata()


async def test_the_hint_to_start_a_broker_names_the_port_that_was_tried(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    # It said `--port 9092` whatever the address.
    cluster = FakeCluster(nursery, brokers={})
    async with open_selector("b9:19092", transport=cluster, max_block=2.0) as selector:
        with pytest.raises(BrokerConnectionError, match="trio-kafka broker --port 19092`"):
            await selector.wait_for_topic("events")


async def test_the_body_error_leaves_unwrapped_when_a_scope_around_is_cancelled_too(
    nursery: trio.Nursery,
) -> None:
    # The selector's own tasks end Cancelled beside the body's error (the cancellation
    # is not the selector's): that is not a second error, the caller gets the one.
    cluster = FakeCluster(nursery)
    with trio.CancelScope() as scope, pytest.raises(KeyError, match="body"):
        async with open_selector("b1:9092", transport=cluster) as selector:
            await selector.connection(-1)
            scope.cancel()
            raise KeyError("body")


async def test_a_broker_never_reached_is_a_connection_error_not_an_unknown_topic(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    cluster = FakeCluster(nursery, brokers={})
    async with open_selector("b9:9092", transport=cluster, max_block=2.0) as selector:
        with pytest.raises(BrokerConnectionError) as info:
            await selector.wait_for_topic("events")
    assert "Is a broker running at b9:9092?" in str(info.value)
    assert "'events'" in str(info.value)
