"""A normal takeover of a transactional id logs nothing at ERROR.

The trial saw `ERROR ... UNKNOWN_SERVER_ERROR in InitProducerId` on each takeover: the
old instance, fenced while its transaction was open, aborts; the coordinator refuses its
epoch, it asks for an epoch bump (KIP-360), and Tansu answers any bump with
UNKNOWN_SERVER_ERROR (Kafka answers PRODUCER_FENCED). The old instance now stops as
fenced, said once at WARNING in words that name the takeover.
"""

from __future__ import annotations

import logging
import uuid

import anyio
import pytest

from tests.integration._helpers import FAST
from trio_kafka.client import open_producer
from trio_kafka.errors import FatalError, ProducerFencedError
from trio_kafka.testing import TansuBroker


async def _takeover_then_abort(bootstrap: str, topic: str) -> FatalError:
    """The first instance is in a transaction when the second takes over; it aborts."""
    transactional_id = f"tx-{topic}"
    async with open_producer(bootstrap, transactional_id=transactional_id, **FAST) as first:
        with anyio.fail_after(30):
            await first.init_transactions()
            first.begin_transaction()
            await first.send(topic, b"first")
            await first.flush()
            async with open_producer(
                bootstrap, transactional_id=transactional_id, **FAST
            ) as second:
                await second.init_transactions()
                async with second.transaction():
                    await second.send(topic, b"second")
            with pytest.raises(FatalError) as caught:
                await first.abort_transaction()
    return caught.value


@pytest.mark.tansu
async def test_a_takeover_on_tansu_logs_a_warning_and_no_error(
    tansu: TansuBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_kafka")
    topic = f"takeover-{uuid.uuid4().hex[:6]}"
    async with open_producer(tansu.bootstrap) as warm:  # the topic exists before the race
        await (await warm.send(topic, b"warm"))
    caplog.clear()
    error = await _takeover_then_abort(tansu.bootstrap, topic)
    assert isinstance(error, ProducerFencedError), error
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("took over" in w for w in warnings), warnings


async def test_a_takeover_on_the_mock_broker_logs_no_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from trio_kafka.broker import open_cluster

    caplog.set_level(logging.DEBUG, logger="trio_kafka")
    async with open_cluster() as cluster:
        error = await _takeover_then_abort(cluster.bootstrap, "takeover")
    assert isinstance(error, ProducerFencedError), error
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_fenced_instance_leaving_its_transaction_says_the_takeover_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The old instance's `transaction()` block ends with an exception: its abort is
    refused as fenced. One WARNING (the takeover), not a second for the failed abort."""
    from trio_kafka.broker import open_cluster

    caplog.set_level(logging.DEBUG, logger="trio_kafka")
    async with open_cluster() as cluster:
        bootstrap = cluster.bootstrap
        async with open_producer(bootstrap, transactional_id="tx", **FAST) as first:
            with anyio.fail_after(30):
                await first.init_transactions()
                with pytest.raises(RuntimeError):
                    async with first.transaction():
                        await first.send("t", b"first")
                        await first.flush()
                        async with open_producer(
                            bootstrap, transactional_id="tx", **FAST
                        ) as second:
                            await second.init_transactions()
                        raise RuntimeError("the application gives up")
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "took over" in said[0], said


async def test_connections_and_requests_are_logged_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from trio_kafka.broker import open_cluster

    caplog.set_level(logging.DEBUG, logger="trio_kafka.net")
    async with open_cluster() as cluster:
        async with open_producer(cluster.bootstrap) as producer:
            await (await producer.send("t", b"v"))
        host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    net = [r for r in caplog.records if r.name == "trio_kafka.net"]
    assert {r.levelno for r in net} == {logging.DEBUG}
    lines = [r.getMessage() for r in net]
    assert f"connection to {host}:{port} open" in lines
    assert any(
        line.startswith(f"{host}:{port}: request Produce v") and "correlation id" in line
        for line in lines
    ), lines
    assert any(line.startswith(f"{host}:{port}: response Produce v") for line in lines), lines
    assert any(line.startswith(f"connection to {host}:{port} closed") for line in lines), lines
