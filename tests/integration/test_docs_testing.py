"""docs/testing.md's examples that need Kafka nodes of their own: three nodes with a
crash and a restart (block 2), and a node behind a fault proxy (block 3). Blocks 1 and 4
run in test_kafka_security.py, on its node."""

from __future__ import annotations

from tests._docs import example_tests
from trio_kafka.testing import kafka_cluster


async def test_the_three_node_example_passes() -> None:
    namespace = example_tests("testing.md", 2)
    with kafka_cluster(3) as cluster:
        await namespace["test_a_crashed_broker_comes_back_with_its_data"](cluster)


async def test_the_fault_proxy_example_passes() -> None:
    namespace = example_tests("testing.md", 3)
    await namespace["test_an_answer_lost_to_a_blackhole_is_retried_without_a_duplicate"]()
