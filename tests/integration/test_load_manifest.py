"""The Spark load manifest's control topic is compacted (the last record per load id is
all that is ever read)."""

from __future__ import annotations

from trio_kafka.broker import open_cluster
from trio_kafka.net import open_selector
from trio_kafka.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from trio_kafka.spark._manifest import (
    LoadState,
    Manifest,
    ensure_control_topic,
    read_manifest,
    write_manifest,
)


async def test_the_manifest_topic_is_created_compacted_and_keeps_the_last_record() -> None:
    async with open_cluster() as cluster, open_selector(cluster.bootstrap) as selector:
        await ensure_control_topic(selector, "__loads")
        response = await selector.request(
            selector.least_loaded_node(),
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsResource(
                        resource_type=2, resource_name="__loads", configuration_keys=None
                    )
                ]
            ),
        )
        configs = {c.name: c.value for c in response.results[0].configs}
        assert configs["cleanup.policy"] == "compact"
        started = Manifest("L", "t", "transactional", 1)
        await write_manifest(selector, started, "__loads")
        await write_manifest(
            selector, Manifest("L", "t", "transactional", 1, LoadState.COMPLETE), "__loads"
        )
        found = await read_manifest(selector, "L", "__loads")
        assert found is not None and found.state is LoadState.COMPLETE
