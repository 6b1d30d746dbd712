"""BulkLoader against Tansu (no CAS extension): `auto` loads in transactions; a forced
CAS load is refused before anything is written.

Tansu shows aborted records to read_committed readers (docs/compatibility.md), so a load
interrupted mid-transaction and resumed is not exact there: these tests load without
interruption, where nothing is aborted and the committed data is the whole log."""

from __future__ import annotations

import anyio
import pytest

from tests.integration._helpers import consume_all, rows, tansu_per_backend
from trio_kafka.client import BulkLoader, PartitionReader, create_topic
from trio_kafka.errors import CasNotSupportedError
from trio_kafka.net import open_selector
from trio_kafka.testing import TansuBroker

# On trio, then on asyncio (issue 16; tests/conftest.py).
pytestmark = [pytest.mark.tansu, pytest.mark.anyio]
tansu = tansu_per_backend()


async def test_a_load_on_tansu_completes_in_transactions_and_resumes(tansu: TansuBroker) -> None:
    async with open_selector(tansu.bootstrap) as selector:
        await create_topic(selector, "load-tansu", 2, cas=False, replication_factor=1)
        first = await BulkLoader(selector, "load-tansu", "L", batch_bytes=4096).run(rows(8000))
        again = await BulkLoader(selector, "load-tansu", "L", batch_bytes=4096).run(rows(20_000))
        assert (first.guarantee, first.loaded) == ("transactional", 8000)
        assert (again.loaded, again.skipped) == (12_000, 8000)
        reader = PartitionReader(selector)
        for p in range(2):
            values = [r.value for r in await reader.read_all("load-tansu", p)]
            assert values == rows(20_000)[p::2]
    seen = await anyio.to_thread.run_sync(
        consume_all, tansu.bootstrap, "load-tansu", 2, "read_committed"
    )
    assert sorted(seen) == rows(20_000)


async def test_a_forced_cas_load_on_tansu_is_refused(tansu: TansuBroker) -> None:
    async with open_selector(tansu.bootstrap) as selector:
        await create_topic(selector, "load-cas", 1, cas=False, replication_factor=1)
        loader = BulkLoader(selector, "load-cas", "L", guarantee="exactly_once_cas")
        with pytest.raises(CasNotSupportedError, match=r"expected\.offset\.cas"):
            await loader.run(rows(10))
        assert await PartitionReader(selector).read_all("load-cas", 0) == []
