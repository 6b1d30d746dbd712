"""BulkLoader against the real brokers (Apache Kafka 4.4, Tansu; no CAS extension):
`auto` loads in transactions; a forced CAS load is refused before anything is written.

Tansu shows aborted records to read_committed readers (docs/compatibility.md), so a load
interrupted mid-transaction and resumed is not exact there: these tests load without
interruption, where nothing is aborted and the committed data is the whole log (Kafka's
interrupted loads: tests/integration/test_load_sigkill.py)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from tests.integration._helpers import consume_all, rows
from tests.integration._real import RealBroker, real_broker_per_backend
from trio_kafka.cli import main
from trio_kafka.client import BulkLoader, PartitionReader, create_topic
from trio_kafka.errors import CasNotSupportedError
from trio_kafka.net import open_selector

# On trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = pytest.mark.anyio
real_broker = real_broker_per_backend()


async def test_a_load_completes_in_transactions_and_resumes(
    real_broker: RealBroker,
) -> None:
    topic = real_broker.name("load")
    async with open_selector(real_broker.bootstrap) as selector:
        await create_topic(selector, topic, 2, cas=False, replication_factor=1)
        first = await BulkLoader(selector, topic, "L", batch_bytes=4096).run(rows(8000))
        again = await BulkLoader(selector, topic, "L", batch_bytes=4096).run(rows(20_000))
        assert (first.guarantee, first.loaded) == ("transactional", 8000)
        assert (again.loaded, again.skipped) == (12_000, 8000)
        reader = PartitionReader(selector)
        for p in range(2):
            values = [r.value for r in await reader.read_all(topic, p)]
            assert values == rows(20_000)[p::2]
    seen = await anyio.to_thread.run_sync(
        consume_all, real_broker.bootstrap, topic, 2, "read_committed"
    )
    assert sorted(seen) == rows(20_000)


async def test_a_forced_cas_load_is_refused(real_broker: RealBroker) -> None:
    topic = real_broker.name("load-cas")
    async with open_selector(real_broker.bootstrap) as selector:
        await create_topic(selector, topic, 1, cas=False, replication_factor=1)
        loader = BulkLoader(selector, topic, "L", guarantee="exactly_once_cas")
        with pytest.raises(CasNotSupportedError, match=r"expected\.offset\.cas"):
            await loader.run(rows(10))
        assert await PartitionReader(selector).read_all(topic, 0) == []


async def test_the_cli_loads_at_its_defaults_creating_the_topic(
    real_broker: RealBroker, tmp_path: Path
) -> None:
    """`trio-kafka load FILE --topic T --bootstrap B`, the README's command pointed at a
    real cluster: the topic is created without CAS (the broker has none) and loaded in
    transactions; run again, nothing is loaded twice. It stopped at once on Kafka with
    "INVALID_CONFIG Unknown topic config name: expected.offset.check.enable"."""
    path = tmp_path / "rows.csv"
    path.write_text("id,v\n" + "".join(f"{i},v{i}\n" for i in range(50)))
    topic = real_broker.name("cli-load")
    args = ["load", str(path), "--topic", topic, "--bootstrap", real_broker.bootstrap, "--quiet"]
    first = await anyio.to_thread.run_sync(CliRunner().invoke, main, args)
    assert first.exit_code == 0, first.output
    assert f"created topic {topic} (1 partition, CAS off)" in first.output
    assert "50 records loaded" in first.output and "guarantee transactional" in first.output
    again = await anyio.to_thread.run_sync(CliRunner().invoke, main, args)
    assert again.exit_code == 0, again.output
    assert "0 records loaded, 50 already there" in again.output
    # The same end both times: the first run reads it once its commit markers are in.
    # It said "ends at 50" and the rerun, which wrote nothing, "ends at 51".
    ends = [
        line.split("; ")[1]
        for output in (first.output, again.output)
        for line in output.splitlines()
        if line.startswith("done:")
    ]
    assert len(ends) == 2 and ends[0] == ends[1], ends
