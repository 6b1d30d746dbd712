"""murmur2 parity with the Java client and librdkafka's `murmur2_random` partitioner.

Two oracles, both librdkafka as shipped inside confluent-kafka's wheel:
- its exported partitioner function `rd_kafka_msg_partitioner_murmur2_random`, called
  through ctypes for every (key, partition count) pair of the grid;
- end to end: an in-process librdkafka mock cluster (created through ctypes, with one
  topic per partition count 1..100) and a confluent-kafka Producer configured with
  `partitioner=murmur2_random`, reading `msg.partition()` in delivery reports.
"""

from __future__ import annotations

import ctypes
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from trio_kafka.core._partitioner import murmur2, partition_for_key, to_positive

confluent_kafka = pytest.importorskip("confluent_kafka")

# Java's UtilsTest.testMurmur2 vectors.
JAVA_VECTORS = [
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
]


def _keys(n: int = 10_000) -> list[bytes]:
    rng = random.Random(20240611)
    return [rng.randbytes(rng.randrange(0, 40)) for _ in range(n)]


def _librdkafka() -> ctypes.CDLL:
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    found = sorted(libs.glob("librdkafka*.so*"))
    if not found:
        pytest.skip("the confluent-kafka wheel's librdkafka was not found")
    return ctypes.CDLL(str(found[0]))


@pytest.mark.parametrize(("text", "expected"), JAVA_VECTORS)
def test_murmur2_matches_java_test_vectors(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected


def test_to_positive_masks_the_sign_bit_like_java() -> None:
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(2**31)) == 0
    assert to_positive(5) == 5


def test_partition_for_key_matches_librdkafka_murmur2_random_on_the_full_grid() -> None:
    lib = _librdkafka()
    fn = lib.rd_kafka_msg_partitioner_murmur2_random
    fn.restype = ctypes.c_int32
    fn.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    mismatches = []
    for key in _keys():
        if not key:
            continue  # librdkafka routes an empty key like a null one (random)
        hashed = to_positive(murmur2(key))
        for count in range(1, 101):
            theirs = fn(None, key, len(key), count, None, None)
            if hashed % count != theirs:
                mismatches.append((key, count, hashed % count, theirs))
    assert mismatches == []


def test_partition_for_key_matches_a_confluent_kafka_producer_on_a_mock_cluster() -> None:
    lib = _librdkafka()
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_topic_create.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_int,
    ]
    lib.rd_kafka_mock_cluster_destroy.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    errstr = ctypes.create_string_buffer(512)
    rk = lib.rd_kafka_new(0, lib.rd_kafka_conf_new(), errstr, 512)  # 0 = RD_KAFKA_PRODUCER
    assert rk, errstr.value
    cluster = lib.rd_kafka_mock_cluster_new(rk, 1)
    try:
        # Each create waits on the mock cluster's thread (about 0.2 s when done one by
        # one): create the 100 topics concurrently.
        with ThreadPoolExecutor(max_workers=100) as pool:
            created = list(
                pool.map(
                    lambda n: lib.rd_kafka_mock_topic_create(cluster, f"p{n}".encode(), n, 1),
                    range(1, 101),
                )
            )
        assert created == [0] * 100
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": lib.rd_kafka_mock_cluster_bootstraps(cluster).decode(),
                "partitioner": "murmur2_random",
                "enable.idempotence": False,
                "linger.ms": 2,
            }
        )
        got: dict[tuple[str, bytes], int] = {}

        def delivered(err: object, msg: object) -> None:
            assert err is None, err
            got[(msg.topic(), msg.key())] = msg.partition()  # type: ignore[attr-defined]

        keys = [k for k in _keys() if k]
        for i, key in enumerate(keys):
            producer.produce(f"p{i % 100 + 1}", b"", key=key, on_delivery=delivered)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(20) == 0
        assert len(got) == len({(f"p{i % 100 + 1}", k) for i, k in enumerate(keys)})
        wrong = [
            (topic, key, partition)
            for (topic, key), partition in got.items()
            if partition_for_key(key, int(topic[1:])) != partition
        ]
        assert wrong == []
    finally:
        lib.rd_kafka_mock_cluster_destroy(cluster)
        lib.rd_kafka_destroy(rk)
