"""The mock broker answers as Apache Kafka does: the same scripted requests, side by side.

Each scenario of this module is played against our mock broker and against an Apache
Kafka 4.4 node (KRaft, one node), over TCP with our codec; the answers are compared field
by field, with what each broker chooses for itself taken out (tests/integration/
_conformance.py: producer ids are compared by order of appearance, not value; node ids,
timestamps, error messages and leader epochs are dropped; fetched records are compared
decoded). Where the two differ on purpose, the difference is listed in `KNOWN` with its
reason, and docs/compatibility.md says so; any other difference fails, and so does a
listed one that went away (so the list stays true).
"""

from __future__ import annotations

import difflib
import pprint
import struct
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
import trio
from crc32c import crc32c

from tests._batches import reframe
from tests.integration._conformance import (
    ADD_PARTITIONS_V,
    CREATE_TOPICS_V,
    END_TXN_V,
    FETCH_V,
    INIT_PID_V,
    LIST_OFFSETS_V,
    METADATA_V,
    NOW,
    PRODUCE_V,
    Peer,
    Scenario,
    add_partitions,
    batch,
    create_request,
    create_topic,
    end_txn,
    fetch,
    init_pid,
    list_offsets,
    metadata_request,
    part,
    plain,
    produce,
)
from trio_kafka.broker import CAS_CONFIG, ClusterOptions, open_cluster
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.delete_topics import DeleteTopicsRequest
from trio_kafka.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from trio_kafka.protocol.messages.fetch import FetchPartition, FetchRequest, FetchTopic
from trio_kafka.protocol.messages.find_coordinator import FindCoordinatorRequest
from trio_kafka.records import HEADER_SIZE, BatchBuilder, Compression
from trio_kafka.records._codecs import compress
from trio_kafka.testing import KafkaNode, kafka_broker

pytestmark = pytest.mark.kafka

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
LATEST = -1
EARLIEST = -2

# DescribeConfigs v2: v3 adds each config's type and documentation, which the mock does
# not give.
DESCRIBE_CONFIGS_V = 2
# DeleteTopics v5: by name (v6 adds topic ids).
DELETE_TOPICS_V = 5

# The coordinator's timeout sweep runs every 10 s by default: the timeout scenario would
# wait that long on Kafka.
KAFKA_PROPERTIES = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


@pytest.fixture(scope="module", params=[2, 0], ids=["tv2", "tv0"])
def kafka_node(request: pytest.FixtureRequest) -> Iterator[tuple[KafkaNode, int]]:
    """A Kafka node with transactions v2 finalized (a fresh 4.x cluster's default), then
    one formatted with `transaction.version=0`."""
    with kafka_broker(
        server_properties=KAFKA_PROPERTIES, transaction_version=request.param
    ) as node:
        yield node, request.param


# -- helpers -------------------------------------------------------------------------


async def until(
    peer: Peer,
    request: Any,
    version: int,
    retry: Callable[[Any], bool],
    name: str | None = None,
    pause: float = 0.05,
) -> Any:
    """Send `request` until `retry(answer)` is false (a retriable answer: how many a
    broker gives is timing, not protocol), at most 30 s; the final answer is recorded
    under `name` (not at all when None) and returned."""
    with trio.fail_after(30):
        while True:
            answer = await peer.request(request, version)
            if not retry(answer):
                break
            await trio.sleep(pause)
    if name is not None:
        peer.transcript.append((name, plain(answer, peer.pids)))
    return answer


_COORDINATOR_BUSY = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.CONCURRENT_TRANSACTIONS,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
}


async def find_coordinator(peer: Peer, txn_id: str) -> None:
    """FindCoordinator(TRANSACTION) until it names one (nothing recorded: ids and ports
    differ). Kafka creates its transaction state topic on the first such request; until
    then InitProducerId has no coordinator."""
    await until(
        peer, FindCoordinatorRequest(key=txn_id, key_type=1), 3, lambda a: a.error_code != 0
    )


async def init_until_ready(peer: Peer, name: str, request: Any) -> Any:
    """InitProducerId, retried while the coordinator loads or ends an earlier
    transaction (COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, ...)."""
    if request.transactional_id is not None:
        await find_coordinator(peer, request.transactional_id)
    return await until(peer, request, INIT_PID_V, lambda a: a.error_code in _COORDINATOR_BUSY, name)


async def add_until_ready(
    peer: Peer, name: str, txn_id: str, pid: int, epoch: int, topic: str
) -> Any:
    """AddPartitionsToTxn, retried while the previous transaction's markers are being
    written (CONCURRENT_TRANSACTIONS: Kafka answers it for a while after EndTxn)."""

    def busy(answer: Any) -> bool:
        codes = {
            p.partition_error_code
            for t in answer.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }
        return codes == {ErrorCode.CONCURRENT_TRANSACTIONS}

    request = add_partitions(txn_id, pid, epoch, topic)
    return await until(peer, request, ADD_PARTITIONS_V, busy, name, pause=0.02)


async def produce_step(peer: Peer, name: str, request: Any) -> Any:
    """Produce, retried while Kafka's partition leader cannot yet verify the
    transaction with its coordinator (KIP-890: it answers NOT_LEADER_OR_FOLLOWER, a
    retriable error, until the coordinator is known)."""
    return await until(
        peer,
        request,
        PRODUCE_V,
        lambda a: part(a).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER,
        name,
    )


async def end_until_ready(peer: Peer, name: str, request: Any) -> Any:
    """EndTxn, retried while the previous EndTxn's markers are still being written
    (CONCURRENT_TRANSACTIONS, as a client retries)."""
    return await until(
        peer,
        request,
        END_TXN_V,
        lambda a: a.error_code == ErrorCode.CONCURRENT_TRANSACTIONS,
        name,
        pause=0.02,
    )


async def settle(peer: Peer, topic: str) -> None:
    """Until the last stable offset reaches the log end (markers are written after
    EndTxn's answer on Kafka); nothing recorded."""
    with trio.fail_after(30):
        while True:
            a = await peer.request(
                list_offsets(topic, LATEST, isolation=READ_COMMITTED), LIST_OFFSETS_V
            )
            b = await peer.request(
                list_offsets(topic, LATEST, isolation=READ_UNCOMMITTED), LIST_OFFSETS_V
            )
            if a.topics[0].partitions[0].offset == b.topics[0].partitions[0].offset:
                return
            await trio.sleep(0.02)


async def fetch_all(peer: Peer, name: str, topic: str, *, isolation: int) -> None:
    """Fetch from offset 0 until the answer's end (Kafka answers one log segment at a
    time, so one Fetch may hold fewer batches than there are); the partition's answers
    recorded as one: the last one's offsets, every record and aborted transaction."""
    offset, records, aborted = 0, [], []
    with trio.fail_after(30):
        while True:
            answer = await peer.request(fetch(topic, offset, isolation=isolation), FETCH_V)
            p = plain(answer, peer.pids)["responses"][0]["partitions"][0]
            records += p.pop("records") or []
            aborted += [a for a in p.pop("aborted_transactions") or [] if a not in aborted]
            end = p["last_stable_offset"] if isolation == READ_COMMITTED else p["high_watermark"]
            if p["error_code"] != "NONE" or not records or records[-1][0] + 1 >= end:
                break
            offset = records[-1][0] + 1
    peer.transcript.append((name, {**p, "records": records, "aborted_transactions": aborted}))


async def read_both(peer: Peer, topic: str, label: str) -> None:
    """The partition as each isolation level fetches and lists it."""
    for iso, name in ((READ_UNCOMMITTED, "uncommitted"), (READ_COMMITTED, "committed")):
        await fetch_all(peer, f"{label}: fetch {name}", topic, isolation=iso)
        await peer.step(
            f"{label}: list latest {name}",
            list_offsets(topic, LATEST, isolation=iso),
            LIST_OFFSETS_V,
        )


# -- scenarios -----------------------------------------------------------------------


async def idempotent_duplicates(peer: Peer, topic: str) -> None:
    await create_topic(peer, topic)
    ids = await init_until_ready(peer, "init", init_pid(None))
    pid, epoch = ids.producer_id, ids.producer_epoch
    abc = batch([b"a", b"b", b"c"], pid=pid, epoch=epoch, seq=0)
    await produce_step(peer, "seq 0-2", produce(topic, abc))
    await produce_step(peer, "seq 0-2 again (the last batch)", produce(topic, abc))
    d = batch([b"d"], pid=pid, epoch=epoch, seq=3)
    await produce_step(peer, "seq 3", produce(topic, d))
    await produce_step(peer, "seq 0-2 again (an older batch)", produce(topic, abc))
    await produce_step(
        peer,
        "seq 1-2 (overlapping, not a duplicate)",
        produce(topic, batch([b"x", b"y"], pid=pid, epoch=epoch, seq=1)),
    )
    await fetch_all(peer, "fetch", topic, isolation=READ_UNCOMMITTED)


async def sequence_gaps(peer: Peer, topic: str) -> None:
    await create_topic(peer, topic)
    ids = await init_until_ready(peer, "init", init_pid(None))
    pid, epoch = ids.producer_id, ids.producer_epoch
    await produce_step(peer, "seq 0", produce(topic, batch([b"a"], pid=pid, epoch=epoch, seq=0)))
    await produce_step(
        peer, "seq 5 (a gap)", produce(topic, batch([b"b"], pid=pid, epoch=epoch, seq=5))
    )
    await produce_step(peer, "seq 1", produce(topic, batch([b"c"], pid=pid, epoch=epoch, seq=1)))
    await produce_step(
        peer,
        "a new producer id at seq 3",
        produce(topic, batch([b"n"], pid=pid + 1000, epoch=0, seq=3)),
    )
    await fetch_all(peer, "fetch", topic, isolation=READ_UNCOMMITTED)


async def epoch_bumps(peer: Peer, topic: str) -> None:
    await create_topic(peer, topic)
    ids = await init_until_ready(peer, "init", init_pid(None))
    pid, epoch = ids.producer_id, ids.producer_epoch
    await produce_step(
        peer, "epoch e seq 0", produce(topic, batch([b"a"], pid=pid, epoch=epoch, seq=0))
    )
    await produce_step(
        peer,
        "epoch e+1 seq 0 (a local bump)",
        produce(topic, batch([b"b"], pid=pid, epoch=epoch + 1, seq=0)),
    )
    await produce_step(
        peer, "epoch e seq 1 (stale)", produce(topic, batch([b"c"], pid=pid, epoch=epoch, seq=1))
    )
    await produce_step(
        peer,
        "epoch e+2 seq 4 (a bump not at 0)",
        produce(topic, batch([b"d"], pid=pid, epoch=epoch + 2, seq=4)),
    )
    await produce_step(
        peer, "epoch e+1 seq 1", produce(topic, batch([b"e"], pid=pid, epoch=epoch + 1, seq=1))
    )
    await fetch_all(peer, "fetch", topic, isolation=READ_UNCOMMITTED)


async def init_producer_ids(peer: Peer, topic: str) -> None:
    txn = f"{topic}-txn"
    first = await init_until_ready(peer, "init, no transactional id", init_pid(None))
    await init_until_ready(peer, "init, no transactional id, again", init_pid(None))
    await init_until_ready(
        peer,
        "init, no transactional id, with the first id and epoch",
        init_pid(None, pid=first.producer_id, epoch=first.producer_epoch),
    )
    t = await init_until_ready(peer, "init transactional", init_pid(txn))
    t2 = await init_until_ready(peer, "init transactional again", init_pid(txn))
    await init_until_ready(
        peer,
        "init transactional with its id and epoch (KIP-360)",
        init_pid(txn, pid=t2.producer_id, epoch=t2.producer_epoch),
    )
    await init_until_ready(
        peer,
        "init transactional with a stale epoch",
        init_pid(txn, pid=t.producer_id, epoch=t.producer_epoch),
    )
    await init_until_ready(
        peer,
        "init transactional with another producer id",
        init_pid(txn, pid=t.producer_id + 1000, epoch=0),
    )


async def transactions(peer: Peer, topic: str) -> None:
    txn = f"{topic}-txn"
    await create_topic(peer, topic)
    ids = await init_until_ready(peer, "init", init_pid(txn))
    pid, epoch = ids.producer_id, ids.producer_epoch
    await add_until_ready(peer, "add (1)", txn, pid, epoch, topic)
    await produce_step(
        peer,
        "produce (1)",
        produce(topic, batch([b"a1", b"a2"], pid=pid, epoch=epoch, seq=0, txn=True), txn_id=txn),
    )
    await peer.step("abort (1)", end_txn(txn, pid, epoch, commit=False), END_TXN_V)
    await settle(peer, topic)
    await add_until_ready(peer, "add (2)", txn, pid, epoch, topic)
    await produce_step(
        peer,
        "produce (2)",
        produce(topic, batch([b"c1"], pid=pid, epoch=epoch, seq=2, txn=True), txn_id=txn),
    )
    await peer.step("commit (2)", end_txn(txn, pid, epoch, commit=True), END_TXN_V)
    await settle(peer, topic)
    await read_both(peer, topic, "after abort and commit")
    await add_until_ready(peer, "add (3)", txn, pid, epoch, topic)
    await produce_step(
        peer,
        "produce (3)",
        produce(topic, batch([b"o1"], pid=pid, epoch=epoch, seq=3, txn=True), txn_id=txn),
    )
    await read_both(peer, topic, "a transaction open")
    await peer.step("commit (3)", end_txn(txn, pid, epoch, commit=True), END_TXN_V)
    await settle(peer, topic)
    await end_until_ready(peer, "commit (3) again", end_txn(txn, pid, epoch, commit=True))
    await end_until_ready(
        peer, "abort (3) after its commit", end_txn(txn, pid, epoch, commit=False)
    )
    await settle(peer, topic)
    await peer.step(
        "a transactional batch without AddPartitionsToTxn (Produce v9)",
        produce(topic, batch([b"z"], pid=pid, epoch=epoch, seq=4, txn=True), txn_id=txn),
        9,
    )
    await produce_step(
        peer,
        "a transactional batch without AddPartitionsToTxn",
        produce(topic, batch([b"z"], pid=pid, epoch=epoch, seq=4, txn=True), txn_id=txn),
    )
    await peer.step("end, no transaction open", end_txn(txn, pid, epoch, commit=True), END_TXN_V)


async def fencing(peer: Peer, topic: str) -> None:
    txn = f"{topic}-txn"
    await create_topic(peer, topic)
    old = await init_until_ready(peer, "init (old instance)", init_pid(txn))
    await add_until_ready(peer, "add (old)", txn, old.producer_id, old.producer_epoch, topic)
    await produce_step(
        peer,
        "produce (old)",
        produce(
            topic,
            batch([b"old"], pid=old.producer_id, epoch=old.producer_epoch, seq=0, txn=True),
            txn_id=txn,
        ),
    )
    new = await init_until_ready(peer, "init (new instance)", init_pid(txn))
    await settle(peer, topic)
    await peer.step(
        "commit (old)", end_txn(txn, old.producer_id, old.producer_epoch, commit=True), END_TXN_V
    )
    await peer.step(
        "add (old, after the fence)",
        add_partitions(txn, old.producer_id, old.producer_epoch, topic),
        ADD_PARTITIONS_V,
    )
    await produce_step(
        peer,
        "produce (old, after the fence)",
        produce(
            topic,
            batch([b"old2"], pid=old.producer_id, epoch=old.producer_epoch, seq=1, txn=True),
            txn_id=txn,
        ),
    )
    await peer.step(
        "init (old, with its id and epoch, after the fence)",
        init_pid(txn, pid=old.producer_id, epoch=old.producer_epoch),
        INIT_PID_V,
    )
    await add_until_ready(peer, "add (new)", txn, new.producer_id, new.producer_epoch, topic)
    await produce_step(
        peer,
        "produce (new)",
        produce(
            topic,
            batch([b"new"], pid=new.producer_id, epoch=new.producer_epoch, seq=0, txn=True),
            txn_id=txn,
        ),
    )
    await peer.step(
        "commit (new)", end_txn(txn, new.producer_id, new.producer_epoch, commit=True), END_TXN_V
    )
    await settle(peer, topic)
    await read_both(peer, topic, "after the fence")


async def transaction_timeout(peer: Peer, topic: str) -> None:
    txn = f"{topic}-txn"
    await create_topic(peer, topic)
    ids = await init_until_ready(peer, "init (timeout 1 s)", init_pid(txn, timeout_ms=1000))
    pid, epoch = ids.producer_id, ids.producer_epoch
    await add_until_ready(peer, "add", txn, pid, epoch, topic)
    await produce_step(
        peer,
        "produce",
        produce(topic, batch([b"late"], pid=pid, epoch=epoch, seq=0, txn=True), txn_id=txn),
    )
    await trio.sleep(1.0)
    await settle(peer, topic)  # the coordinator aborted it
    await peer.step("commit after the timeout", end_txn(txn, pid, epoch, commit=True), END_TXN_V)
    await produce_step(
        peer,
        "produce after the timeout",
        produce(topic, batch([b"later"], pid=pid, epoch=epoch, seq=1, txn=True), txn_id=txn),
    )
    await read_both(peer, topic, "after the timeout")
    await init_until_ready(
        peer, "init again with its id and epoch", init_pid(txn, pid=pid, epoch=epoch)
    )


async def bad_requests(peer: Peer, topic: str) -> None:
    missing = f"{topic}-missing"
    await peer.step(
        "metadata, a missing topic",
        metadata_request(missing),
        METADATA_V,
    )
    await peer.step(
        "metadata, an invalid name",
        metadata_request("bad name!"),
        METADATA_V,
    )
    await peer.step(
        "create, an invalid name",
        create_request(("bad name!", 1, 1), timeout_ms=10_000),
        7,
    )
    await produce_step(peer, "produce, a missing topic", produce(missing, batch([b"m"])))
    await create_topic(peer, topic)
    await produce_step(
        peer, "produce, a missing partition", produce(topic, batch([b"p"]), partition=5)
    )
    await produce_step(
        peer, "produce, a record over message.max.bytes", produce(topic, batch([b"x" * (1 << 21)]))
    )
    await produce_step(peer, "produce", produce(topic, batch([b"ok"])))
    await peer.step("fetch past the end", fetch(topic, 5, isolation=READ_UNCOMMITTED), FETCH_V)
    await peer.step(
        "list earliest", list_offsets(topic, EARLIEST, isolation=READ_UNCOMMITTED), LIST_OFFSETS_V
    )
    await peer.step(
        "list latest", list_offsets(topic, LATEST, isolation=READ_UNCOMMITTED), LIST_OFFSETS_V
    )


async def corrupt_records(peer: Peer, topic: str) -> None:
    """Batches whose framing and CRC are right and whose records are not: Kafka reads
    every record of a batch (decompressing it) before it appends."""
    await create_topic(peer, topic)
    one, two = batch([b"r1"]), batch([b"r1", b"r2"])
    one_records, two_records = one[HEADER_SIZE:], two[HEADER_SIZE:]
    garbage = b"these bytes are no codec's output" * 3
    for codec in (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD):
        await produce_step(
            peer,
            f"{codec.name.lower()}: bytes that do not decompress",
            produce(topic, reframe(one, garbage, codec=codec, count=1)),
        )
    await produce_step(
        peer, "a record cut short", produce(topic, reframe(two, two_records[:-3], count=2))
    )
    await produce_step(
        peer, "bytes after the last record", produce(topic, reframe(one, one_records + b"\0\0"))
    )
    await produce_step(
        peer, "fewer records than the count", produce(topic, reframe(one, one_records, count=2))
    )
    await produce_step(
        peer,
        "gzip: fewer records than the count",
        produce(
            topic,
            reframe(one, compress(Compression.GZIP, one_records, 6), codec=1, count=2),
        ),
    )
    await produce_step(
        peer,
        "zstd: bytes after the last record",
        produce(
            topic,
            reframe(one, compress(Compression.ZSTD, one_records + b"\0", 3), codec=4, count=1),
        ),
    )
    await produce_step(peer, "produce", produce(topic, batch([b"ok"])))
    await fetch_all(peer, "fetch", topic, isolation=READ_UNCOMMITTED)


async def compacted_topic(peer: Peer, topic: str) -> None:
    """A compacted topic refuses a batch with a record without a key, naming it
    (KIP-467 record errors); keyed records land."""
    await create_topic(peer, topic, **{"cleanup.policy": "compact"})

    def keyed(keys: list[bytes | None]) -> bytes:
        builder = BatchBuilder()
        for i, key in enumerate(keys):
            builder.append(NOW, key, b"v%d" % i)
        return builder.build(base_offset=0)

    await produce_step(peer, "a record without a key", produce(topic, keyed([b"a", None, b"c"])))
    await produce_step(peer, "two without", produce(topic, keyed([None, b"b", None])))
    await produce_step(peer, "every record keyed", produce(topic, keyed([b"a", b"b"])))
    await fetch_all(peer, "fetch", topic, isolation=READ_UNCOMMITTED)


async def record_timestamps(peer: Peer, topic: str) -> None:
    """CreateTime records too far ahead of the broker's clock (Kafka 4: an hour by
    default) or, where the topic says so, behind it, are named and their batch refused
    (INVALID_TIMESTAMP)."""
    await create_topic(peer, topic)
    future = 4_000_000_000_000  # the year 2096

    def stamped(*timestamps: int) -> bytes:
        builder = BatchBuilder()
        for i, timestamp in enumerate(timestamps):
            builder.append(timestamp, None, b"v%d" % i)
        return builder.build(base_offset=0)

    await produce_step(
        peer, "one record from the future", produce(topic, stamped(NOW, future, NOW))
    )
    await produce_step(peer, "records from the past", produce(topic, stamped(0, NOW)))
    strict = f"{topic}-strict"
    await create_topic(peer, strict, **{"message.timestamp.before.max.ms": "86400000"})
    await produce_step(peer, "older than the topic allows", produce(strict, stamped(NOW, NOW)))
    await fetch_all(peer, "fetch", topic, isolation=READ_UNCOMMITTED)


#: One (name, value) per step: what Kafka 4.4 accepts and refuses (INVALID_CONFIG) at
#: CreateTopics, a type, a range, a list, a name it removed, a feature the broker lacks.
TOPIC_CONFIG_PROBES = [
    ("min.insync.replicas", "2"),
    ("min.insync.replicas", "0"),
    ("min.insync.replicas", "two"),
    ("segment.bytes", "1048575"),
    ("segment.bytes", "2147483648"),
    ("retention.ms", "-1"),
    ("retention.ms", "-2"),
    ("retention.bytes", "-5"),
    ("min.cleanable.dirty.ratio", "0.25"),
    ("min.cleanable.dirty.ratio", "1.5"),
    ("cleanup.policy", ""),
    ("cleanup.policy", "compact, delete"),
    ("cleanup.policy", "compacted"),
    ("compression.type", "lz4"),
    ("compression.type", "none"),
    ("compression.gzip.level", "0"),
    ("compression.zstd.level", "23"),
    ("preallocate", "TRUE"),
    ("preallocate", "yes"),
    ("follower.replication.throttled.replicas", "0:1,1:2"),
    ("follower.replication.throttled.replicas", "all"),
    ("remote.storage.enable", "false"),
    ("remote.storage.enable", "true"),
    ("message.format.version", "3.0-IV1"),
    ("message.timestamp.difference.max.ms", "1000"),
    ("no.such.config", "1"),
]


async def topic_configs(peer: Peer, topic: str) -> None:
    """Topic configs at creation: each probe alone (validate_only), then the configs a
    new topic describes, with their defaults."""
    for name, value in TOPIC_CONFIG_PROBES:
        await peer.step(
            f"create with {name}={value!r}",
            create_request((topic, 1, 1), configs={name: value}, validate_only=True),
            CREATE_TOPICS_V,
        )
    await create_topic(peer, topic)
    described = await peer.step(
        "describe",
        DescribeConfigsRequest(
            resources=[
                DescribeConfigsResource(
                    resource_type=2, resource_name=topic, configuration_keys=None
                )
            ],
            include_synonyms=False,
            include_documentation=False,
        ),
        DESCRIBE_CONFIGS_V,
    )
    # (The transcript drops `configs`, which CreateTopics answers with values each broker
    # chooses; a topic's own configs are compared here, but for the mock's CAS one.)
    peer.transcript.append(
        (
            "described configs",
            sorted(
                (c.name, c.value, c.read_only, c.is_sensitive)
                for c in described.results[0].configs
                if c.name != CAS_CONFIG
            ),
        )
    )


async def edge_requests(peer: Peer, topic: str) -> None:
    """Requests at the edges of what a broker takes: topic names, partition counts and
    replication factors at creation, acks, special ListOffsets timestamps, fetch
    offsets out of range."""
    for name in ["", ".", "..", "a" * 249, "a" * 250, "a/b", "a:b", "ä", f"{topic}.dot"]:
        await peer.step(
            f"create {name[:12]!r} ({len(name)})",
            create_request((name, 1, 1), validate_only=True),
            CREATE_TOPICS_V,
        )
    for partitions, replication in [(0, 1), (-2, 1), (-1, -1), (1, 0), (1, 2), (1, -2)]:
        await peer.step(
            f"create {partitions} partitions x {replication}",
            create_request((topic, partitions, replication), validate_only=True),
            CREATE_TOPICS_V,
        )
    await peer.step(
        "create twice in one request",
        create_request((topic, 1, 1), (topic, 1, 1), validate_only=True),
        CREATE_TOPICS_V,
    )
    await create_topic(peer, topic)
    await peer.step("create an existing topic", create_request((topic, 1, 1)), CREATE_TOPICS_V)
    for acks in (2, -2, 0 - 1):
        request = produce(topic, batch([b"a"]))
        await produce_step(peer, f"produce acks={acks}", attrs.evolve(request, acks=acks))
    await produce_step(
        peer,
        "produce an idempotent batch with acks=1",
        attrs.evolve(produce(topic, batch([b"i"], pid=9, epoch=0, seq=0)), acks=1),
    )
    await produce_step(
        peer,
        "produce a transactional batch without a transactional id",
        produce(topic, batch([b"t"], pid=9, epoch=0, seq=0, txn=True)),
    )
    for label, timestamp in [
        ("max timestamp", -3),
        ("earliest local", -4),
        ("latest tiered", -5),
        ("a timestamp", 0),
        ("a future timestamp", NOW + 10**9),
    ]:
        await peer.step(
            f"list {label}",
            list_offsets(topic, timestamp, isolation=READ_UNCOMMITTED),
            LIST_OFFSETS_V,
        )
    for label, timestamp, version in [
        ("max timestamp", -3, 6),
        ("earliest local", -4, 10),
        ("latest tiered", -5, 10),
    ]:
        await peer.step(
            f"list {label} at v{version}",
            list_offsets(topic, timestamp, isolation=READ_UNCOMMITTED),
            version,
        )
    await peer.step("fetch at -1", fetch(topic, -1, isolation=READ_UNCOMMITTED), FETCH_V)
    await peer.step(
        "fetch far past the end", fetch(topic, 10**6, isolation=READ_UNCOMMITTED), FETCH_V
    )


def _counted(whole: bytes, *, last_offset_delta: int, count: int) -> bytes:
    """`whole` (one record) saying other lastOffsetDelta and records count, its CRC
    made right."""
    head = bytearray(whole[:HEADER_SIZE])
    struct.pack_into(">i", head, 23, last_offset_delta)
    struct.pack_into(">i", head, 57, count)
    records = whole[HEADER_SIZE:]
    struct.pack_into(">I", head, 17, crc32c(records, crc32c(bytes(head[21:]))))
    return bytes(head) + records


async def produce_edges(peer: Peer, topic: str) -> None:
    """Produce requests whose records are not one well-formed v2 batch, or whose batch
    says something odd. (Not null records: Kafka 4.4 answers none, and keeps the
    connection.)"""
    await create_topic(peer, topic)
    one = batch([b"a"])
    two = batch([b"b"])
    cases: list[tuple[str, bytes | None]] = [
        ("empty records", b""),
        ("two batches", one + two),
        ("a batch and a few bytes", one + b"\0\0\0"),
        ("a batch and the start of another", one + two[:40]),
        ("a batch and a length too small", one + two[:8] + b"\0\0\0\5" + two[12:]),
        ("a batch and a bad magic", one + two[:16] + b"\7" + two[17:]),
        ("the start of a batch", one[:40]),
        ("a magic 1 batch", one[:16] + b"\1" + one[17:]),
        ("a count above lastOffsetDelta", _counted(one, last_offset_delta=0, count=2)),
        ("a lastOffsetDelta above the count", _counted(one, last_offset_delta=1, count=1)),
        ("a count of 0", _counted(one, last_offset_delta=0, count=0)),
        ("a producer id without a sequence", batch([b"c"], pid=9, epoch=0, seq=-1)),
        ("a sequence without a producer id", batch([b"d"], seq=0)),
        ("a producer id with epoch -1", batch([b"e"], pid=9, epoch=-1, seq=0)),
    ]
    for label, records in cases:
        request = produce(topic, one)
        data = request.topic_data[0]
        part_data = attrs.evolve(data.partition_data[0], records=records)
        await produce_step(
            peer,
            f"produce {label}",
            attrs.evolve(request, topic_data=[attrs.evolve(data, partition_data=[part_data])]),
        )
    await fetch_all(peer, "fetch", topic, isolation=READ_UNCOMMITTED)


async def transaction_edges(peer: Peer, topic: str) -> None:
    """Transactional requests that name the wrong thing: an id never initialized, the
    wrong producer id or epoch for an id, a topic that does not exist, an empty
    transaction's end, a transactional batch under another id."""
    txn = f"{topic}-txn"
    stranger = f"{topic}-stranger"
    await create_topic(peer, topic)
    ids = await init_until_ready(peer, "init", init_pid(txn))
    pid, epoch = ids.producer_id, ids.producer_epoch
    await find_coordinator(peer, stranger)
    await peer.step(
        "add, an id never initialized",
        add_partitions(stranger, pid, epoch, topic),
        ADD_PARTITIONS_V,
    )
    await peer.step(
        "add, another producer id", add_partitions(txn, pid + 1, epoch, topic), ADD_PARTITIONS_V
    )
    await peer.step(
        "add, an older epoch", add_partitions(txn, pid, epoch - 1, topic), ADD_PARTITIONS_V
    )
    await peer.step(
        "add, a newer epoch", add_partitions(txn, pid, epoch + 1, topic), ADD_PARTITIONS_V
    )
    await peer.step(
        "add, a missing topic",
        add_partitions(txn, pid, epoch, f"{topic}-missing"),
        ADD_PARTITIONS_V,
    )
    await peer.step(
        "end, an id never initialized",
        end_txn(stranger, pid, epoch, commit=True),
        END_TXN_V,
    )
    await peer.step(
        "end, another producer id", end_txn(txn, pid + 1, epoch, commit=True), END_TXN_V
    )
    await peer.step("commit, nothing added", end_txn(txn, pid, epoch, commit=True), END_TXN_V)
    await peer.step("abort, nothing added", end_txn(txn, pid, epoch, commit=False), END_TXN_V)
    await add_until_ready(peer, "add", txn, pid, epoch, topic)
    await produce_step(
        peer,
        "produce under another transactional id",
        produce(topic, batch([b"x"], pid=pid, epoch=epoch, seq=0, txn=True), txn_id=stranger),
    )
    await produce_step(
        peer,
        "produce under its own id",
        produce(topic, batch([b"y"], pid=pid, epoch=epoch, seq=0, txn=True), txn_id=txn),
    )
    await end_until_ready(peer, "commit", end_txn(txn, pid, epoch, commit=True))
    await settle(peer, topic)
    await read_both(peer, topic, "after")


async def fetch_edges(peer: Peer, topic: str) -> None:
    """Fetches a consumer may send: limits smaller than a batch, a partition the topic
    lacks, a missing topic, a current leader epoch from the future, a log start offset
    past the log's, a session asked for and a session that does not exist."""
    await create_topic(peer, topic)
    for n in range(3):
        await produce_step(peer, f"produce {n}", produce(topic, batch([b"v%d" % n] * 20)))

    def one(
        *,
        max_bytes: int = 1 << 20,
        partition_max_bytes: int = 1 << 20,
        offset: int = 0,
        partition: int = 0,
        name: str = topic,
        leader_epoch: int = -1,
        session: tuple[int, int] = (0, -1),
    ) -> FetchRequest:
        return FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=max_bytes,
            isolation_level=READ_UNCOMMITTED,
            session_id=session[0],
            session_epoch=session[1],
            topics=[
                FetchTopic(
                    topic=name,
                    partitions=[
                        FetchPartition(
                            partition=partition,
                            current_leader_epoch=leader_epoch,
                            fetch_offset=offset,
                            partition_max_bytes=partition_max_bytes,
                        )
                    ],
                )
            ],
        )

    steps = [
        ("max_bytes 1", one(max_bytes=1)),
        ("partition_max_bytes 1", one(partition_max_bytes=1)),
        ("partition_max_bytes 0", one(partition_max_bytes=0)),
        ("from the middle of a batch", one(offset=25)),
        ("at the end", one(offset=60)),
        ("a partition the topic lacks", one(partition=3)),
        ("a missing topic", one(name=f"{topic}-missing")),
        ("a leader epoch from the future", one(leader_epoch=1000)),
        ("a session that does not exist", one(session=(12345, 1))),
    ]
    for label, request in steps:
        await peer.step(f"fetch {label}", request, FETCH_V)
    listed = list_offsets(topic, LATEST, isolation=READ_UNCOMMITTED)
    future = attrs.evolve(
        listed.topics[0],
        partitions=[attrs.evolve(listed.topics[0].partitions[0], current_leader_epoch=1000)],
    )
    await peer.step(
        "list with a leader epoch from the future",
        attrs.evolve(listed, topics=[future]),
        LIST_OFFSETS_V,
    )


async def topic_lifecycle(peer: Peer, topic: str) -> None:
    """Metadata and DeleteTopics around a topic's life: every topic, one missing among
    existing ones, an invalid name asked to be auto-created, a topic deleted twice and
    what a Produce, Fetch and Metadata then get."""
    await create_topic(peer, topic)
    await produce_step(peer, "produce", produce(topic, batch([b"a"])))
    await peer.step(
        "metadata, the topic and a missing one",
        metadata_request(topic, f"{topic}-missing"),
        METADATA_V,
    )
    await peer.step(
        "metadata, auto-create an invalid name",
        metadata_request("bad name!", auto_create=True),
        METADATA_V,
    )
    await peer.step(
        "metadata, auto-create a name too long",
        metadata_request("x" * 250, auto_create=True),
        METADATA_V,
    )
    for label in ("delete", "delete again"):
        await peer.step(
            label, DeleteTopicsRequest(topic_names=[topic], timeout_ms=30_000), DELETE_TOPICS_V
        )
    with trio.fail_after(30):
        while True:  # (Kafka removes the topic from its metadata shortly after)
            answer = await peer.request(metadata_request(topic), METADATA_V)
            if answer.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                break
            await trio.sleep(0.1)
    await peer.step(
        "metadata after the delete",
        metadata_request(topic),
        METADATA_V,
    )
    await produce_step(peer, "produce after the delete", produce(topic, batch([b"b"])))
    await peer.step("fetch after the delete", fetch(topic, 0, isolation=READ_UNCOMMITTED), FETCH_V)
    await peer.step(
        "delete a missing topic",
        DeleteTopicsRequest(topic_names=[f"{topic}-missing"], timeout_ms=30_000),
        DELETE_TOPICS_V,
    )


async def init_edges(peer: Peer, topic: str) -> None:
    """InitProducerId with a transaction timeout at and past the broker's limit
    (`transaction.max.timeout.ms`, 900000 by default), none, a negative one, and an
    empty transactional id."""
    for label, txn, timeout_ms in [
        ("the limit", f"{topic}-a", 900_000),
        ("past the limit", f"{topic}-b", 900_001),
        ("zero", f"{topic}-c", 0),
        ("negative", f"{topic}-d", -1),
        ("an empty transactional id", "", 60_000),
    ]:
        await init_until_ready(peer, f"init, timeout {label}", init_pid(txn, timeout_ms=timeout_ms))


SCENARIOS: dict[str, Scenario] = {
    "idempotent_duplicates": idempotent_duplicates,
    "sequence_gaps": sequence_gaps,
    "epoch_bumps": epoch_bumps,
    "init_producer_ids": init_producer_ids,
    "transactions": transactions,
    "fencing": fencing,
    "transaction_timeout": transaction_timeout,
    "bad_requests": bad_requests,
    "corrupt_records": corrupt_records,
    "compacted_topic": compacted_topic,
    "record_timestamps": record_timestamps,
    "topic_configs": topic_configs,
    "edge_requests": edge_requests,
    "produce_edges": produce_edges,
    "transaction_edges": transaction_edges,
    "fetch_edges": fetch_edges,
    "topic_lifecycle": topic_lifecycle,
    "init_edges": init_edges,
}

# Differences kept on purpose: (transaction version, scenario, step) -> why. Each is in
# docs/compatibility.md.
KNOWN: dict[tuple[int, str, str], str] = {}


async def play(scenario: Scenario, bootstrap: str, topic: str) -> list[tuple[str, Any]]:
    host, port = bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)
    peer = Peer(host, int(port))
    try:
        await scenario(peer, topic)
    finally:
        await peer.aclose()
    return peer.transcript


def differences(mock: list[tuple[str, Any]], kafka: list[tuple[str, Any]]) -> dict[str, str]:
    """Step name -> a unified diff of the two answers, for the steps that differ."""
    out: dict[str, str] = {}
    kafka_steps = dict(kafka)
    for name, answer in mock:
        other = kafka_steps.get(name)
        if other != answer:
            a = pprint.pformat(answer, width=100).splitlines()
            b = pprint.pformat(other, width=100).splitlines()
            out[name] = "\n".join(difflib.unified_diff(a, b, "mock", "kafka", lineterm="", n=1))
    return out


def mock_options(transaction_version: int) -> ClusterOptions:
    """The mock broker set as the Kafka node is: its `transaction.version`, and a new
    producer accepted at any sequence (Kafka 2.5+)."""
    return ClusterOptions(
        transaction_version=max(transaction_version, 1), strict_unknown_producer=False
    )


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_the_mock_broker_answers_as_kafka_does(
    name: str, kafka_node: tuple[KafkaNode, int]
) -> None:
    node, transaction_version = kafka_node
    scenario = SCENARIOS[name]
    topic = f"conf-{name.replace('_', '-')}"
    async with open_cluster(options=mock_options(transaction_version)) as cluster:
        mock = await play(scenario, cluster.bootstrap, topic)
    kafka = await play(scenario, node.bootstrap, topic)
    assert [step for step, _ in mock] == [step for step, _ in kafka]
    found = differences(mock, kafka)
    unexpected = {k: v for k, v in found.items() if (transaction_version, name, k) not in KNOWN}
    gone = [
        step
        for (tv, n, step) in KNOWN
        if tv == transaction_version and n == name and step not in found
    ]
    report = "\n\n".join(f"## {step}\n{diff}" for step, diff in unexpected.items())
    assert not unexpected, f"the mock broker answers otherwise than Kafka:\n{report}"
    assert not gone, f"listed in KNOWN but no longer different: {gone}"
