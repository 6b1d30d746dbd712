"""A selector's CAS gate lives as long as the selector and no longer.

The gates are kept in a WeakKeyDictionary keyed by selector; a gate that held its
selector strongly kept every selector that ever made a CAS write alive (with its
connections' state, nurseries and metadata): the simulator's cas and bulk workloads
grew by about 170 KB a seed, and so would a service that opens a selector per job.
"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from trio_kafka.broker import Cluster
from trio_kafka.client import KafkaSelector, open_selector
from trio_kafka.client._cas import CasGate, cas_gate
from trio_kafka.testing import BOOTSTRAP, MemoryTransport, make_cluster


async def test_a_closed_selector_and_its_gate_are_collected() -> None:
    cluster = make_cluster(1, {"t": 1})
    async with trio.open_nursery() as nursery:
        async with open_selector(BOOTSTRAP, transport=MemoryTransport(cluster, nursery)) as sel:
            gate = cas_gate(sel)
            assert cas_gate(sel) is gate  # one gate per selector
            assert gate.selector is sel
            selector_ref = weakref.ref(sel)
            gate_ref = weakref.ref(gate)
        del sel, gate
        nursery.cancel_scope.cancel()
    gc.collect()
    assert selector_ref() is None, "the CAS gate kept its closed selector alive"
    assert gate_ref() is None


def test_a_gate_whose_selector_is_gone_says_so() -> None:
    class Stand:  # any weakly referable object stands in for a selector here
        pass

    stand = Stand()
    gate = CasGate(stand)  # type: ignore[arg-type]
    del stand
    gc.collect()
    with pytest.raises(RuntimeError, match="selector is gone"):
        gate.selector  # noqa: B018


async def test_a_partition_checked_before_is_checked_again_without_a_request_or_a_yield() -> None:
    """A commit log's appends each pass the gate: once the topic's config, the leader's
    connection and its ApiVersions are known, the check is answered from them, without
    a round of the event loop (so a burst of CAS sends fills one batch)."""
    cluster = make_cluster(1)
    cluster.create_topic("log", 1, {"expected.offset.check.enable": "true"})
    async with _gate_on(cluster) as (_, gate):
        leader = await gate.check("log", 0)
        with trio.testing.assert_no_checkpoints():
            assert await gate.check("log", 0) == leader


async def test_a_partition_whose_leader_moved_is_answered_for_its_new_leader() -> None:
    """The gate remembers the partition it checked last with the metadata it checked it
    from; metadata that names another leader is a new snapshot, so the answer is the
    new leader's (once its connection advertised the feature), never the old one."""
    cluster = make_cluster(2)
    cluster.create_topic("log", 1, {"expected.offset.check.enable": "true"})
    async with _gate_on(cluster) as (sel, gate):
        old = await gate.check("log", 0)
        assert gate.checked_leader("log", 0) == old
        new = 1 - old
        cluster.move_leader("log", 0, new)
        await sel.refresh_metadata(["log"])
        assert gate.checked_leader("log", 0) is None  # no connection to it yet
        assert await gate.check("log", 0) == new
        assert gate.checked_leader("log", 0) == new


@contextlib.asynccontextmanager
async def _gate_on(cluster: Cluster) -> AsyncIterator[tuple[KafkaSelector, CasGate]]:
    """A selector on the in-memory `cluster`, and its CAS gate."""
    async with trio.open_nursery() as nursery:
        async with open_selector(BOOTSTRAP, transport=MemoryTransport(cluster, nursery)) as sel:
            yield sel, cas_gate(sel)
        nursery.cancel_scope.cancel()
