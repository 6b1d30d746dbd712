"""OpenTelemetry: spans, attributes, metrics and trace context, from the global providers.

The providers are process-wide (OpenTelemetry sets them once), so each case runs in a
child process that installs the SDK's in-memory span exporter and metric reader as the
global providers, runs a producer against the mock broker, and prints what was recorded
as JSON; the test reads it. A producer in a process with no provider set records nothing
and keeps send()'s fast path (the last test).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

_PRELUDE = """
import json, trio
from opentelemetry import trace, metrics
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from trio_kafka.broker import open_cluster
from trio_kafka.client import open_producer

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

def dump(extra):
    spans = [
        {
            "name": s.name,
            "kind": s.kind.name,
            "attributes": dict(s.attributes),
            "status": s.status.status_code.name,
            "trace_id": format(s.context.trace_id, "032x"),
            "span_id": format(s.context.span_id, "016x"),
            "parent": format(s.parent.span_id, "016x") if s.parent else None,
        }
        for s in exporter.get_finished_spans()
    ]
    points = []
    data = reader.get_metrics_data()  # None when nothing was recorded
    for rm in data.resource_metrics if data is not None else ():
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                for p in m.data.data_points:
                    points.append({
                        "name": m.name, "unit": m.unit, "attributes": dict(p.attributes),
                        "value": getattr(p, "value", None), "count": getattr(p, "count", None),
                    })
    print(json.dumps({"spans": spans, "metrics": points, **extra}))
"""


def run(body: str) -> dict[str, Any]:
    script = _PRELUDE + textwrap.dedent(body)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_each_record_gets_a_producer_span_with_the_semantic_attributes() -> None:
    out = run(
        """
        async def main():
            async with open_cluster(topics={"orders": 3}) as cluster:
                async with open_producer(cluster.bootstrap, client_id="shop") as producer:
                    handles = [
                        await producer.send("orders", b"v%d" % i, key=b"user-%d" % i)
                        for i in range(5)
                    ]
                    acks = [await h for h in handles]
            dump({"acks": [[a.partition, a.offset] for a in acks]})
        trio.run(main)
        """
    )
    spans = sorted(
        (s for s in out["spans"] if s["name"] == "send orders"),
        key=lambda s: s["attributes"]["messaging.kafka.message.key"],
    )  # ended in the order the partitions answered
    assert len(spans) == 5
    for span, (partition, offset), i in zip(spans, out["acks"], range(5), strict=True):
        assert span["kind"] == "PRODUCER"
        assert span["status"] == "UNSET"
        attrs = span["attributes"]
        assert attrs["messaging.system"] == "kafka"
        assert attrs["messaging.operation.name"] == "send"
        assert attrs["messaging.operation.type"] == "send"
        assert attrs["messaging.destination.name"] == "orders"
        assert attrs["messaging.client.id"] == "shop"
        assert attrs["messaging.kafka.message.key"] == f"user-{i}"
        assert attrs["messaging.destination.partition.id"] == str(partition)
        assert attrs["messaging.kafka.offset"] == offset


def test_sent_messages_and_operation_duration_are_recorded() -> None:
    out = run(
        """
        async def main():
            async with open_cluster() as cluster:
                async with open_producer(cluster.bootstrap) as producer:
                    for i in range(7):
                        await producer.send("events", b"x")
                    await producer.flush()
            dump({})
        trio.run(main)
        """
    )
    sent = [m for m in out["metrics"] if m["name"] == "messaging.client.sent.messages"]
    assert sum(m["value"] for m in sent) == 7
    assert all(m["attributes"]["messaging.destination.name"] == "events" for m in sent)
    assert all("error.type" not in m["attributes"] for m in sent)
    duration = [m for m in out["metrics"] if m["name"] == "messaging.client.operation.duration"]
    assert duration and duration[0]["unit"] == "s"
    assert sum(m["count"] for m in duration) == 7


def test_a_failed_record_ends_its_span_with_the_error_type() -> None:
    out = run(
        """
        from trio_kafka.errors import KafkaError
        async def main():
            async with open_cluster() as cluster:
                async with open_producer(cluster.bootstrap, max_block=0.5) as producer:
                    try:
                        await producer.send("events", b"x", partition=9)
                        error = None
                    except KafkaError as exc:
                        error = type(exc).__qualname__
            dump({"error": error})
        trio.run(main)
        """
    )
    assert out["error"] is not None
    span = next(s for s in out["spans"] if s["name"] == "send events")
    assert span["status"] == "ERROR"
    assert span["attributes"]["error.type"] == out["error"]
    sent = [m for m in out["metrics"] if m["name"] == "messaging.client.sent.messages"]
    assert [m["attributes"].get("error.type") for m in sent] == [out["error"]]


def test_the_trace_context_travels_in_the_record_headers() -> None:
    out = run(
        """
        async def main():
            tracer = trace.get_tracer("app")
            async with open_cluster() as cluster:
                async with open_producer(cluster.bootstrap) as producer:
                    with tracer.start_as_current_span("handle request"):
                        ack = await (await producer.send("events", b"x"))
                    quiet = await (
                        await producer.send("events", b"y", headers=[("h", b"1")])
                    )
                async with open_producer(cluster.bootstrap, telemetry_headers=False) as p2:
                    bare = await (await p2.send("events", b"z"))
                records = [r for b in cluster.decoded("events", 0) for r in b.records]
            dump({"headers": [[[k, v.decode()] for k, v in r.headers] for r in records]})
        trio.run(main)
        """
    )
    first, second, third = out["headers"]
    send = [s for s in out["spans"] if s["name"] == "send events"]
    app = next(s for s in out["spans"] if s["name"] == "handle request")
    # The record's traceparent names its own send span, a child of the caller's span.
    ((name, traceparent),) = first
    assert name == "traceparent"
    _, trace_id, span_id, _ = traceparent.split("-")
    assert (trace_id, span_id) == (send[0]["trace_id"], send[0]["span_id"])
    assert send[0]["parent"] == app["span_id"] and send[0]["trace_id"] == app["trace_id"]
    # The application's own headers stay, before the trace context.
    assert second[0] == ["h", "1"] and second[1][0] == "traceparent"
    # telemetry_headers=False: a span, but nothing in the record.
    assert third == []
    assert len(send) == 3


def test_a_transaction_gets_a_span_that_parents_its_records() -> None:
    out = run(
        """
        async def main():
            async with open_cluster() as cluster:
                async with open_producer(cluster.bootstrap, transactional_id="billing") as p:
                    await p.init_transactions()
                    async with p.transaction():
                        await p.send("ledger", b"debit")
                        await p.send("ledger", b"credit")
                    try:
                        async with p.transaction():
                            await p.send("ledger", b"oops")
                            raise RuntimeError("the application failed")
                    except RuntimeError:
                        pass
            dump({})
        trio.run(main)
        """
    )
    txns = [s for s in out["spans"] if s["name"] == "transaction"]
    assert [t["attributes"]["messaging.kafka.transaction.outcome"] for t in txns] == [
        "commit",
        "abort",
    ]
    assert all(t["attributes"]["messaging.kafka.transactional_id"] == "billing" for t in txns)
    sends = [s for s in out["spans"] if s["name"] == "send ledger"]
    assert [s["parent"] for s in sends] == [txns[0]["span_id"]] * 2 + [txns[1]["span_id"]]


def test_without_a_provider_nothing_is_recorded_and_send_keeps_its_fast_path() -> None:
    script = """
import trio
from trio_kafka.broker import open_cluster
from trio_kafka.client import open_producer

async def main():
    async with open_cluster() as cluster:
        async with open_producer(cluster.bootstrap) as producer:
            assert producer._telemetry is None, producer._telemetry
            assert not producer._slow
            await (await producer.send("events", b"x"))
            records = [r for b in cluster.decoded("events", 0) for r in b.records]
            assert records[0].headers == (), records[0].headers
    print("ok")
trio.run(main)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "ok"


def test_telemetry_true_without_opentelemetry_names_the_extra() -> None:
    script = """
import sys
sys.modules["opentelemetry"] = None  # as if not installed
import trio
from trio_kafka.client import open_producer
from trio_kafka.errors import ConfigError

async def main():
    try:
        async with open_producer("127.0.0.1:1", telemetry=True):
            pass
    except ConfigError as exc:
        print(exc)
trio.run(main)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "pip install 'trio-kafka[otel]'" in done.stdout


def test_a_bulk_load_is_one_span_not_one_per_row() -> None:
    out = run(
        """
        from trio_kafka.client import BulkLoader, create_topic
        from trio_kafka.net import open_selector
        async def main():
            async with open_cluster() as cluster:
                async with open_selector(cluster.bootstrap) as selector:
                    await create_topic(selector, "rows", 2)
                    for guarantee in ("exactly_once_cas", "transactional"):
                        loader = BulkLoader(selector, "rows", guarantee, guarantee=guarantee)
                        await loader.run([b"row %d" % i for i in range(500)])
            dump({})
        trio.run(main)
        """
    )
    loads = [s for s in out["spans"] if s["name"] == "load rows"]
    assert [s["attributes"]["messaging.kafka.load.guarantee"] for s in loads] == [
        "exactly_once_cas",
        "transactional",
    ]
    for span in loads:
        assert span["kind"] == "PRODUCER"
        assert span["attributes"]["messaging.batch.message_count"] == 500
        assert span["attributes"]["messaging.destination.name"] == "rows"
    # The transactional backend's producers record no span per row.
    assert not [s for s in out["spans"] if s["name"].startswith("send ")]
