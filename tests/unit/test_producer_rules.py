"""The rules a deciding object follows: its own part of the client's rules, or those a
harness gave the entry point it was built by (`Harness`), handed on to every object
built from it; never read from a global or a context."""

from __future__ import annotations

import random

import trio
import trio.testing

from trio_kafka.broker import CAS_CONFIG, Cluster
from trio_kafka.client import BulkLoader, open_conditional_writer
from trio_kafka.core import (
    Backend,
    Harness,
    LoadPipeline,
    ProducerConfig,
    ProducerCore,
    Rules,
    Sequencer,
    TransactionManager,
)
from trio_kafka.core._core import CoreRules
from trio_kafka.core._load import LoadRules
from trio_kafka.core._sequencer import SequencerRules
from trio_kafka.core._transaction import TransactionRules
from trio_kafka.testing import MemoryTransport, producer_for


class _Marked(Rules):
    """Rules a harness could plant (the client's, under another class)."""


def test_rules_gathers_every_part() -> None:
    for part in (CoreRules, SequencerRules, TransactionRules, LoadRules):
        assert issubclass(Rules, part)


def test_without_rules_each_object_follows_its_own_part_of_the_shipped_rules() -> None:
    core = ProducerCore(ProducerConfig(), random.Random(0))
    assert type(core.rules) is CoreRules
    assert type(core.sequencing.rules) is CoreRules  # the core hands its rules on
    assert type(Sequencer().rules) is SequencerRules
    assert type(TransactionManager("t").rules) is TransactionRules
    pipe = LoadPipeline("t", 0, b"load", backend=Backend.CAS, log_end_offset=0)
    assert type(pipe.rules) is LoadRules
    assert type(Harness().rules) is Rules and Harness().buggify is None


def test_rules_given_at_construction_are_the_objects_own_and_no_others() -> None:
    marked = _Marked()
    core = ProducerCore(ProducerConfig(), random.Random(0), rules=marked)
    assert core.rules is marked and core.sequencing.rules is marked
    config = ProducerConfig(transactional_id="tx")
    assert TransactionManager.from_config(config, marked).rules is marked
    assert type(ProducerCore(ProducerConfig(), random.Random(0)).rules) is CoreRules


async def test_a_producers_harness_reaches_every_deciding_object_it_builds(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    harness = Harness(_Marked())
    async with producer_for(transport, transactional_id="tx", harness=harness) as producer:
        assert producer.seams()["harness"] is harness
        core = producer._core
        assert core.rules is harness.rules
        assert core.sequencing.rules is harness.rules
        assert producer._txn is not None and producer._txn.manager.rules is harness.rules
    async with producer_for(transport) as plain:
        assert type(plain._core.rules) is Rules  # the client's own: `Harness()`
        assert plain.seams()["harness"].buggify is None


async def test_the_harness_fault_hook_is_asked_at_the_senders_sites(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    asked: list[str] = []

    def buggify(site: str) -> bool:
        asked.append(site)
        return False

    async with producer_for(transport, harness=Harness(buggify=buggify)) as producer:
        await producer.send_and_wait("t", b"x", partition=0)
    assert {"client.forced_metadata_refresh", "client.tiny_request_timeout"} <= set(asked)


async def test_a_conditional_writer_follows_its_producers_rules(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    cluster, transport = cluster_and_transport
    cluster.create_topic("log", 1, {CAS_CONFIG: "true"})
    harness = Harness(_Marked())
    async with (
        producer_for(transport, harness=harness) as producer,
        open_conditional_writer("log", producer=producer) as writer,
    ):
        assert writer._rules is harness.rules


async def test_a_bulk_loader_hands_its_harness_rules_to_its_pipelines(
    autojump_clock: trio.testing.MockClock,
    cluster_and_transport: tuple[Cluster, MemoryTransport],
) -> None:
    _, transport = cluster_and_transport
    harness = Harness(_Marked())
    async with producer_for(transport) as producer:
        loader = BulkLoader(producer.selector, "t", "load", harness=harness)
        assert loader._pipeline(Backend.CAS, 0, (0, -1, False)).rules is harness.rules
        plain = BulkLoader(producer.selector, "t", "load")
        assert type(plain._pipeline(Backend.CAS, 0, (0, -1, False)).rules) is Rules
