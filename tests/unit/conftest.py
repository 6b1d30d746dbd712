"""Fixtures shared by the unit tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio

from trio_kafka.broker import Cluster
from trio_kafka.testing import MemoryTransport, make_cluster


@pytest.fixture
async def cluster_and_transport(
    nursery: trio.Nursery,
) -> AsyncIterator[tuple[Cluster, MemoryTransport]]:
    """A one-broker in-memory cluster with topic "t" of 3 partitions, and its transport."""
    cluster = make_cluster(topics={"t": 3})
    yield cluster, MemoryTransport(cluster, nursery)
