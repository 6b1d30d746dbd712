"""The mock broker over the wire: a tiny raw client, our own codec, TCP and memory streams."""

from __future__ import annotations

import struct
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from tests.integration._helpers import open_cluster_for_clients, tcp_client
from trio_kafka.broker import DROP, Cluster, ClusterOptions, HookCall
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol import FrameSplitter, decode_response, encode_request
from trio_kafka.protocol.messages.api_versions import ApiVersionsRequest
from trio_kafka.protocol.messages.create_topics import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from trio_kafka.protocol.messages.end_txn import EndTxnRequest
from trio_kafka.protocol.messages.fetch import FetchPartition, FetchRequest, FetchTopic
from trio_kafka.protocol.messages.find_coordinator import FindCoordinatorRequest
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdRequest
from trio_kafka.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from trio_kafka.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from trio_kafka.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from trio_kafka.records import BatchBuilder
from trio_kafka.testing import make_cluster

NOW = 1_700_000_000_000


class RawClient:
    """Sends requests over any stream with our codec and reads the answers."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.splitter = FrameSplitter()
        self.frames: list[bytes] = []
        self.correlation = 0

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def read_frame(self) -> bytes | None:
        while not self.frames:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.frames.extend(self.splitter.feed(data))
        return self.frames.pop(0)

    async def request(self, message: Any, version: int) -> Any:
        self.correlation += 1
        await self.stream.send_all(
            encode_request(
                message, version=version, correlation_id=self.correlation, client_id="raw"
            )
        )
        frame = await self.read_frame()
        assert frame is not None, "the broker closed the connection"
        correlation, body = decode_response(type(message), version, frame)
        assert correlation == self.correlation
        return body


def batch(
    n: int = 1,
    *,
    base_offset: int = 0,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    txn: bool = False,
) -> bytes:
    builder = BatchBuilder()
    for i in range(n):
        builder.append(NOW, None, b"value-%d" % i)
    return builder.build(
        base_offset=base_offset,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


def produce_req(
    topic: str, data: bytes, partition: int = 0, acks: int = -1, txn_id: str | None = None
) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=txn_id,
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(index=partition, records=data)]
            )
        ],
    )


def fetch_req(topic: str, offset: int, *, max_wait_ms: int, partition: int = 0) -> FetchRequest:
    """A one-partition Fetch that waits up to `max_wait_ms` for one byte."""
    return FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        topics=[
            FetchTopic(
                topic=topic,
                partitions=[
                    FetchPartition(
                        partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20
                    )
                ],
            )
        ],
    )


def connect(cluster: Cluster, node: int = 0) -> tuple[RawClient, Any]:
    """A client connected to `node` over an in-memory stream (the simulator's way)."""
    client_side, server_side = trio.testing.memory_stream_pair()
    return RawClient(client_side), (cluster.serve_stream, node, server_side)


def memory_client(cluster: Cluster, nursery: trio.Nursery, node: int = 0) -> RawClient:
    """A client connected to `node` over an in-memory stream served in `nursery`."""
    client, (serve, node, server_side) = connect(cluster, node)
    nursery.start_soon(serve, node, server_side)
    return client


async def tcp(cluster: Cluster, node: int = 0) -> RawClient:
    return RawClient(await tcp_client(cluster, node))


async def test_api_versions_advertises_the_cas_feature() -> None:
    async with open_cluster_for_clients() as cluster:
        client = await tcp(cluster)
        resp = await client.request(
            ApiVersionsRequest(client_software_name="raw", client_software_version="1"), 3
        )
        assert resp.error_code == ErrorCode.NONE
        features = {(f.name, f.min_version, f.max_version) for f in resp.supported_features}
        assert ("expected.offset.cas", 1, 1) in features
        keys = {k.api_key for k in resp.api_keys}
        assert {0, 1, 2, 3, 10, 18, 19, 22, 24, 25, 26, 28, 36} <= keys
        assert not any(f.name == "transaction.version" for f in resp.supported_features)


async def test_transaction_version_feature_when_v2_enabled() -> None:
    async with open_cluster_for_clients(options=ClusterOptions(transaction_version=2)) as cluster:
        client = await tcp(cluster)
        resp = await client.request(ApiVersionsRequest(), 3)
        assert any(
            f.name == "transaction.version" and f.max_version == 2 for f in resp.supported_features
        )
        assert [(f.name, f.max_version_level) for f in resp.finalized_features] == [
            ("transaction.version", 2)
        ]


async def test_unsupported_api_versions_version_is_answered_in_v0_with_our_ranges() -> None:
    async with open_cluster_for_clients() as cluster:
        client = await tcp(cluster)
        # ApiVersions v99 with a v2 header: api key 18, version 99, correlation 7.
        header = struct.pack(">hhih", 18, 99, 7, 3) + b"raw" + b"\x00"
        await client.send_raw(struct.pack(">i", len(header)) + header)
        frame = await client.read_frame()
        assert frame is not None
        correlation, resp = decode_response(ApiVersionsRequest, 0, frame)
        assert correlation == 7
        assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert any(k.api_key == 0 for k in resp.api_keys)


async def test_cas_over_the_wire() -> None:
    async with open_cluster_for_clients() as cluster:
        client = await tcp(cluster)
        created = await client.request(
            CreateTopicsRequest(
                topics=[
                    CreatableTopic(
                        name="cas",
                        num_partitions=1,
                        replication_factor=1,
                        configs=[
                            CreatableTopicConfig(name="expected.offset.check.enable", value="true")
                        ],
                    )
                ],
                timeout_ms=1000,
            ),
            7,
        )
        assert created.topics[0].error_code == ErrorCode.NONE
        ok = await client.request(produce_req("cas", batch(2, base_offset=0)), 9)
        assert ok.responses[0].partition_responses[0].base_offset == 0
        bad = await client.request(produce_req("cas", batch(1, base_offset=5)), 9)
        part = bad.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.EXPECTED_OFFSET_MISMATCH
        assert part.base_offset == 2
        assert "expected offset 5" in part.error_message
        assert cluster.state.partition("cas", 0).log.log_end_offset == 2  # type: ignore[union-attr]


async def test_metadata_auto_creates_and_lists_every_broker() -> None:
    async with open_cluster_for_clients(brokers=3) as cluster:
        client = await tcp(cluster, 1)
        resp = await client.request(MetadataRequest(topics=[MetadataRequestTopic(name="auto")]), 12)
        assert [b.node_id for b in resp.brokers] == [0, 1, 2]
        (topic,) = resp.topics
        assert (topic.error_code, topic.name, len(topic.partitions)) == (0, "auto", 1)
        off = await client.request(
            MetadataRequest(
                topics=[MetadataRequestTopic(name="nope")], allow_auto_topic_creation=False
            ),
            12,
        )
        assert off.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_moved_leader_answers_not_leader_or_follower() -> None:
    async with open_cluster_for_clients(brokers=2, topics={"t": 1}) as cluster:
        leader = cluster.state.partition("t", 0).leader  # type: ignore[union-attr]
        other = 1 - leader
        client = await tcp(cluster, leader)
        assert (await client.request(produce_req("t", batch()), 9)).responses[
            0
        ].partition_responses[0].error_code == 0
        cluster.move_leader("t", 0, other)
        moved = (
            (await client.request(produce_req("t", batch()), 10))
            .responses[0]
            .partition_responses[0]
        )
        assert moved.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert moved.current_leader.leader_id == other
        new = await tcp(cluster, other)
        assert (await new.request(produce_req("t", batch()), 9)).responses[0].partition_responses[
            0
        ].base_offset == 1


async def test_moved_transaction_coordinator() -> None:
    async with open_cluster_for_clients(brokers=2) as cluster:
        client = await tcp(cluster, 0)
        found = await client.request(FindCoordinatorRequest(key="tx", key_type=1), 3)
        assert found.node_id == 0
        cluster.move_transaction_coordinator(1)
        batched = await client.request(
            FindCoordinatorRequest(key_type=1, coordinator_keys=["tx", "ty"]), 4
        )
        assert [(c.key, c.node_id) for c in batched.coordinators] == [("tx", 1), ("ty", 1)]
        refused = await client.request(
            InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1000), 4
        )
        assert refused.error_code == ErrorCode.NOT_COORDINATOR


async def test_hook_can_inject_an_error_response() -> None:
    async with open_cluster_for_clients(topics={"t": 1}) as cluster:
        from trio_kafka.protocol.messages.produce import (
            PartitionProduceResponse,
            ProduceResponse,
            TopicProduceResponse,
        )

        def inject(call: HookCall) -> ProduceResponse:
            return ProduceResponse(
                responses=[
                    TopicProduceResponse(
                        name="t",
                        partition_responses=[
                            PartitionProduceResponse(
                                index=0, error_code=ErrorCode.NOT_ENOUGH_REPLICAS, base_offset=-1
                            )
                        ],
                    )
                ]
            )

        cluster.add_hook(ProduceRequest, inject, times=1)
        client = await tcp(cluster)
        first = await client.request(produce_req("t", batch()), 9)
        assert first.responses[0].partition_responses[0].error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert cluster.state.partition("t", 0).log.log_end_offset == 0  # type: ignore[union-attr]
        second = await client.request(produce_req("t", batch()), 9)
        assert second.responses[0].partition_responses[0].error_code == 0


async def test_hook_after_apply_then_drop_the_connection() -> None:
    cluster = Cluster.create(1, clock=lambda: NOW)
    cluster.create_topic("t")
    seen: list[int] = []

    def drop_after(call: HookCall) -> object:
        seen.append(call.response.responses[0].partition_responses[0].base_offset)
        return DROP

    cluster.add_hook(ProduceRequest, drop_after, after=True, times=1)
    client, (serve, node, server_side) = connect(cluster)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, node, server_side)
        await client.send_raw(
            encode_request(
                produce_req("t", batch(3, pid=1, epoch=0, seq=0)),
                version=9,
                correlation_id=1,
                client_id=None,
            )
        )
        assert await client.read_frame() is None  # closed without an answer
    assert seen == [0]
    assert cluster.state.partition("t", 0).log.log_end_offset == 3  # type: ignore[union-attr]
    # The retry on a new connection is a duplicate: answered with the original offset.
    client, (serve, node, server_side) = connect(cluster)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, node, server_side)
        retry = await client.request(produce_req("t", batch(3, pid=1, epoch=0, seq=0)), 9)
        assert retry.responses[0].partition_responses[0].base_offset == 0
        await client.stream.aclose()
    assert cluster.state.partition("t", 0).log.log_end_offset == 3  # type: ignore[union-attr]


async def test_fetch_waits_for_data_up_to_max_wait(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    cluster = make_cluster(topics={"t": 1})
    reader = memory_client(cluster, nursery)
    writer = memory_client(cluster, nursery)
    fetch = fetch_req("t", 0, max_wait_ms=5000)
    result: list[Any] = []

    async def read() -> None:
        result.append(await reader.request(fetch, 11))

    start = trio.current_time()
    async with trio.open_nursery() as inner:
        inner.start_soon(read)
        await trio.sleep(0.2)
        assert not result
        await writer.request(produce_req("t", batch(2)), 9)
    # Answered when the data came, not at max_wait.
    assert trio.current_time() - start == pytest.approx(0.2)
    part = result[0].responses[0].partitions[0]
    assert part.high_watermark == 2
    assert part.records
    empty = fetch_req("t", 2, max_wait_ms=100)
    start = trio.current_time()
    out = await reader.request(empty, 11)
    assert trio.current_time() - start == pytest.approx(0.1)  # nothing came: max_wait
    assert out.responses[0].partitions[0].records == b""


async def test_list_offsets_read_committed_answers_the_last_stable_offset() -> None:
    async with open_cluster_for_clients(topics={"t": 1}) as cluster:
        client = await tcp(cluster)
        init = await client.request(
            InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000), 4
        )
        from trio_kafka.protocol.messages.add_partitions_to_txn import (
            AddPartitionsToTxnRequest,
            AddPartitionsToTxnTopic,
        )

        await client.request(
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id="tx",
                v3_and_below_producer_id=init.producer_id,
                v3_and_below_producer_epoch=init.producer_epoch,
                v3_and_below_topics=[AddPartitionsToTxnTopic(name="t", partitions=[0])],
            ),
            3,
        )
        await client.request(produce_req("t", batch(1)), 9)
        await client.request(
            produce_req(
                "t",
                batch(2, pid=init.producer_id, epoch=init.producer_epoch, seq=0, txn=True),
                txn_id="tx",
            ),
            9,
        )

        async def offsets(isolation: int, ts: int = -1) -> int:
            resp = await client.request(
                ListOffsetsRequest(
                    replica_id=-1,
                    isolation_level=isolation,
                    topics=[
                        ListOffsetsTopic(
                            name="t",
                            partitions=[ListOffsetsPartition(partition_index=0, timestamp=ts)],
                        )
                    ],
                ),
                7,
            )
            return resp.topics[0].partitions[0].offset  # type: ignore[no-any-return]

        assert await offsets(0) == 3
        assert await offsets(1) == 1
        assert await offsets(0, -2) == 0
        end = await client.request(
            EndTxnRequest(
                transactional_id="tx",
                producer_id=init.producer_id,
                producer_epoch=init.producer_epoch,
                committed=True,
            ),
            3,
        )
        assert end.error_code == 0
        assert await offsets(1) == 4  # the commit marker takes an offset


@pytest.mark.parametrize("version", [3, 5])
async def test_transactional_produce_outside_the_transaction_is_refused(version: int) -> None:
    async with open_cluster_for_clients(topics={"t": 1}) as cluster:
        client = await tcp(cluster)
        init = await client.request(
            InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000), version
        )
        out = await client.request(
            produce_req(
                "t",
                batch(1, pid=init.producer_id, epoch=init.producer_epoch, seq=0, txn=True),
                txn_id="tx",
            ),
            9,
        )
        assert out.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_TXN_STATE


async def test_transactions_v2_add_partitions_implicitly_and_bump_at_end_txn() -> None:
    async with open_cluster_for_clients(
        topics={"t": 2}, options=ClusterOptions(transaction_version=2)
    ) as cluster:
        client = await tcp(cluster)
        init = await client.request(
            InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000), 5
        )
        pid, epoch = init.producer_id, init.producer_epoch
        out = await client.request(
            produce_req("t", batch(2, pid=pid, epoch=epoch, seq=0, txn=True), txn_id="tx"), 12
        )
        assert out.responses[0].partition_responses[0].error_code == 0
        end = await client.request(
            EndTxnRequest(
                transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=True
            ),
            5,
        )
        assert (end.error_code, end.producer_id, end.producer_epoch) == (0, pid, epoch + 1)
        # The old epoch is fenced at the partition; the new one starts at sequence 0.
        old = await client.request(
            produce_req("t", batch(1, pid=pid, epoch=epoch, seq=2, txn=True), txn_id="tx"), 12
        )
        assert (
            old.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_PRODUCER_EPOCH
        )
        new = await client.request(
            produce_req("t", batch(1, pid=pid, epoch=epoch + 1, seq=0, txn=True), txn_id="tx"), 12
        )
        assert new.responses[0].partition_responses[0].error_code == 0
        # Produce v11 is a transactions-v1 client's: verified, not added (as Kafka 4.4).
        v1 = await client.request(
            produce_req(
                "t", batch(1, pid=pid, epoch=epoch + 1, seq=0, txn=True), txn_id="tx", partition=1
            ),
            11,
        )
        assert v1.responses[0].partition_responses[0].error_code == ErrorCode.TRANSACTION_ABORTABLE


async def test_crash_node_cuts_connections_and_can_lose_producer_state() -> None:
    async with open_cluster_for_clients(topics={"t": 1}) as cluster:
        client = await tcp(cluster)
        await client.request(produce_req("t", batch(2, pid=5, epoch=0, seq=0)), 9)
        cluster.crash_node(0, lose_producer_state=True)
        with trio.fail_after(5):
            assert await client.read_frame() is None
        again = await tcp(cluster)
        out = await again.request(produce_req("t", batch(1, pid=5, epoch=0, seq=2)), 9)
        assert out.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_PRODUCER_ID


async def test_describe_configs_and_delete_topics() -> None:
    from trio_kafka.protocol.messages.delete_topics import DeleteTopicsRequest
    from trio_kafka.protocol.messages.describe_configs import (
        DescribeConfigsRequest,
        DescribeConfigsResource,
    )

    async with open_cluster_for_clients() as cluster:
        cluster.create_topic(
            "t", 1, {"max.message.bytes": "5000", "expected.offset.check.enable": "true"}
        )
        client = await tcp(cluster)
        resp = await client.request(
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsResource(
                        resource_type=2, resource_name="t", configuration_keys=None
                    )
                ]
            ),
            4,
        )
        configs = {c.name: (c.value, c.config_source) for c in resp.results[0].configs}
        assert configs["max.message.bytes"] == ("5000", 1)
        assert configs["expected.offset.check.enable"] == ("true", 1)
        assert configs["cleanup.policy"] == ("delete", 5)
        gone = await client.request(
            DeleteTopicsRequest(topic_names=["t", "nope"], timeout_ms=1000), 5
        )
        assert [(r.name, r.error_code) for r in gone.responses] == [
            ("t", 0),
            ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        assert "t" not in cluster.state.topics


async def test_hook_delay_and_blackhole(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    from trio_kafka.broker import BLACKHOLE, Delay

    cluster = make_cluster(topics={"t": 1})
    cluster.add_hook(MetadataRequest, lambda call: Delay(0.2), times=1)
    client = memory_client(cluster, nursery)
    start = trio.current_time()
    await client.request(MetadataRequest(topics=None), 12)
    assert trio.current_time() - start == pytest.approx(0.2)

    async def async_hook(call: HookCall) -> object:
        await trio.sleep(0)
        return BLACKHOLE

    cluster.add_hook(ProduceRequest, async_hook, after=True, node=0, times=1)
    await client.send_raw(
        encode_request(produce_req("t", batch(1)), version=9, correlation_id=99, client_id=None)
    )
    with trio.move_on_after(3600) as scope:
        await client.read_frame()
    assert scope.cancelled_caught  # applied, never answered (in an hour of virtual time)
    assert cluster.state.partition("t", 0).log.log_end_offset == 1  # type: ignore[union-attr]


async def test_api_versions_answers_are_the_same_at_each_version_with_their_own_correlation_id(
    nursery: trio.Nursery,
) -> None:
    # The broker encodes its ApiVersions answer once per version and only sets the
    # correlation id (RawClient.request asserts it matches the request's).
    cluster = make_cluster()
    first, second = memory_client(cluster, nursery), memory_client(cluster, nursery)
    for version in range(5):
        a = await first.request(ApiVersionsRequest(), version)
        second.correlation += 7  # another correlation id on the other connection
        b = await second.request(ApiVersionsRequest(), version)
        again = await first.request(ApiVersionsRequest(), version)
        assert a == b == again
        assert a.error_code == ErrorCode.NONE
        assert {18, 0, 1} <= {k.api_key for k in a.api_keys}


async def test_a_hook_can_replace_the_api_versions_answer(nursery: trio.Nursery) -> None:
    from trio_kafka.protocol.messages.api_versions import ApiVersionsResponse

    cluster = make_cluster()
    replaced = ApiVersionsResponse(error_code=ErrorCode.UNKNOWN_SERVER_ERROR, api_keys=[])
    cluster.add_hook(ApiVersionsRequest, lambda call: replaced, after=True, times=1)
    client = memory_client(cluster, nursery)
    hooked = await client.request(ApiVersionsRequest(), 3)
    plain = await client.request(ApiVersionsRequest(), 3)
    assert (hooked.error_code, hooked.api_keys) == (ErrorCode.UNKNOWN_SERVER_ERROR, [])
    assert plain.error_code == ErrorCode.NONE and plain.api_keys


async def test_an_after_hook_added_while_a_fetch_waits_applies_to_that_fetch(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    # Requests skip the hook passes when the cluster has no hook; a Fetch that waits
    # must still see an AFTER hook added meanwhile.
    cluster = make_cluster(topics={"t": 1})
    reader = memory_client(cluster, nursery)
    result: list[Any] = []

    async def read() -> None:
        result.append(await reader.request(fetch_req("t", 0, max_wait_ms=1000), 11))

    async with trio.open_nursery() as inner:
        inner.start_soon(read)
        await trio.sleep(0.2)
        cluster.add_hook(
            FetchRequest,
            lambda call: attrs.evolve(call.response, throttle_time_ms=77),
            after=True,
        )
    assert result[0].throttle_time_ms == 77
