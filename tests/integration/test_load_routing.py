"""A resumed load routes rows as it began, or is refused; a finished load is known from
its checkpoints (BulkLoader on the mock broker, both backends)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration._backends import mock_cluster
from tests.integration._helpers import rows
from trio_kafka.broker import HookCall
from trio_kafka.broker._partition import Partition
from trio_kafka.client import BulkLoader, open_producer
from trio_kafka.errors import ConfigError
from trio_kafka.net import open_selector
from trio_kafka.protocol.messages.produce import ProduceRequest
from trio_kafka.testing import log_values

#: Each test runs on trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio

CAS = {"expected.offset.check.enable": "true"}
#: Keyed rows as `trio-kafka load --key-field user` makes them, and the same lines
#: without keys (a rerun without --key-field).
KEYED = [(b"u%d" % (i % 37), b'{"user": "u%d", "n": %d}' % (i % 37, i)) for i in range(3000)]
UNKEYED = [value for _, value in KEYED]


class CountedRows:
    """A sized input that counts the rows read from it."""

    def __init__(self, items: list[bytes]) -> None:
        self.items = items
        self.read = 0

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[bytes]:
        for item in self.items:
            self.read += 1
            yield item


def loader(selector: object, **options: object) -> BulkLoader:
    return BulkLoader(selector, "t", "L", batch_bytes=1024, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("topic_config", [CAS, {}], ids=["cas", "transactional"])
async def test_a_resume_with_another_key_field_is_refused_naming_both(
    topic_config: dict[str, str],
) -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 3, topic_config)
        async with open_selector(cluster.bootstrap) as selector:
            # Stopped after 1,000 rows (a shorter input: the rest is not loaded).
            await loader(selector, routing={"key_field": "user"}).run(KEYED[:1000])
            before = [log_values(cluster, "t", p) for p in range(3)]
            with pytest.raises(ConfigError) as refused:
                await loader(selector, routing={"key_field": None}).run(UNKEYED)
        message = str(refused.value)
        assert "key_field: 'user' then, None now" in message
        assert "another load id" in message and "--load-id" in message
        assert [log_values(cluster, "t", p) for p in range(3)] == before  # nothing written


async def test_a_resume_with_the_same_routing_loads_the_rest_once() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 3, CAS)
        async with open_selector(cluster.bootstrap) as selector:
            routing = {"key_field": "user", "format": "jsonl"}
            await loader(selector, routing=routing).run(KEYED[:1000])
            result = await loader(selector, routing=dict(routing)).run(KEYED)
        assert (result.loaded, result.skipped) == (2000, 1000)
        loaded = sorted(v for p in range(3) for v in log_values(cluster, "t", p))
        assert loaded == sorted(UNKEYED)


async def test_a_load_begun_before_its_input_was_recorded_resumes_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`trio-kafka load` began recording its file's digest (`input`) in its routing
    after loads had begun without it: such a load was refused on resume as if its input
    had changed ("input: None then, 'sha256:...' now"). It resumes, saying what it
    could not check."""
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 3, CAS)
        async with open_selector(cluster.bootstrap) as selector:
            before = {"key_field": "user", "format": "jsonl"}
            await loader(selector, routing=before).run(KEYED[:1000])
            now = {**before, "input": "sha256:" + "0" * 64}
            with caplog.at_level("WARNING", logger="trio_kafka.load"):
                result = await loader(selector, routing=now).run(KEYED)
            # Once begun with it, the digest is checked like any other entry.
            with pytest.raises(ConfigError, match=r"input: 'sha256:0+' then, 'sha256:1+' now"):
                await loader(selector, routing={**before, "input": "sha256:" + "1" * 64}).run(KEYED)
        assert (result.loaded, result.skipped) == (2000, 1000)
        loaded = sorted(v for p in range(3) for v in log_values(cluster, "t", p))
        assert loaded == sorted(UNKEYED)
        warned = [r.getMessage() for r in caplog.records if r.name == "trio_kafka.load"]
        assert any("did not record its input" in m for m in warned), warned


async def test_a_resume_with_another_partition_count_is_refused() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 2, CAS)
        async with open_selector(cluster.bootstrap) as selector:
            await loader(selector).run(rows(700))
        # Partitions added to the topic: row % partitions now names other partitions.
        state = cluster.state
        state.topics["t"].partitions.append(Partition("t", 2, state.node_ids[0]))
        async with open_selector(cluster.bootstrap) as selector:
            with pytest.raises(ConfigError, match="partitions: 2 then, 3 now"):
                await loader(selector).run(rows(2000))


async def test_a_resume_with_another_guarantee_is_refused() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 2, CAS)
        async with open_selector(cluster.bootstrap) as selector:
            await loader(selector).run(rows(700))  # auto: CAS
            with pytest.raises(
                ConfigError, match="guarantee: 'exactly_once_cas' then, 'transactional' now"
            ):
                await loader(selector, guarantee="transactional").run(rows(2000))


async def test_a_checkpoint_recording_no_routing_is_refused_as_an_older_versions() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 1, CAS)
        async with open_selector(cluster.bootstrap) as selector:
            # What trio-kafka wrote before routing was recorded: load and row only.
            async with open_producer(selector=selector) as producer:
                headers = [("tk.load", b"L"), ("tk.row", b"9")]
                await producer.send_and_wait("t", b"row-9", headers=headers, partition=0)
            with pytest.raises(ConfigError, match="records no routing: it was written by an older"):
                await loader(selector).run(rows(20))
        assert log_values(cluster, "t", 0) == [b"row-9"]


async def test_a_routing_entry_the_loader_records_itself_is_refused() -> None:
    async with mock_cluster() as cluster, open_selector(cluster.bootstrap) as selector:
        with pytest.raises(ConfigError, match="partitions is recorded by the loader itself"):
            loader(selector, routing={"partitions": 3})


@pytest.mark.parametrize("topic_config", [CAS, {}], ids=["cas", "transactional"])
async def test_a_finished_load_run_again_reads_no_row_and_sends_none(
    topic_config: dict[str, str],
) -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 3, topic_config)
        produced = [0]

        def count(call: HookCall) -> None:
            produced[0] += 1

        async with open_selector(cluster.bootstrap) as selector:
            first = await loader(selector).run(rows(3000))
            cluster.add_hook(ProduceRequest, count)
            again = CountedRows(rows(3000))
            result = await loader(selector).run(again)
        assert (again.read, produced[0]) == (0, 0)
        assert (result.loaded, result.skipped, result.guarantee) == (0, 3000, first.guarantee)
        assert [p.skipped for p in result.partitions] == [1000, 1000, 1000]


async def test_finished_tells_a_finished_load_from_one_cut_short() -> None:
    async with mock_cluster() as cluster:
        cluster.create_topic("t", 3, CAS)
        async with open_selector(cluster.bootstrap) as selector:
            assert await loader(selector).finished(3000) is None  # nothing loaded yet
            await loader(selector).run(rows(3000))
            done = await loader(selector).finished(3000)
            longer = await loader(selector).finished(3001)
        assert done is not None and (done.loaded, done.skipped) == (0, 3000)
        assert longer is None  # more rows than it finished with: run it


async def test_finished_does_not_create_a_missing_topic() -> None:
    async with mock_cluster() as cluster, open_selector(cluster.bootstrap) as selector:
        assert await BulkLoader(selector, "absent", "L").finished(10) is None
        assert "absent" not in cluster.state.topics
