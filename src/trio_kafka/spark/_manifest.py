"""The load manifest: where each load began, kept in a Kafka control topic.

Theory of operation
-------------------
A load is named by its `load_id`. The driver records, before any task runs, the offset
each partition of the target topic started at (its log end then). Every task attempt of
this run and of any later run with the same `load_id` uses those bases, so "row r of
partition p belongs at base[p] + r" holds across retries, zombies and reruns.

The manifest lives in a one-partition topic (`__trio_kafka_loads` by default), one JSON
record per state change, keyed by the load id; the last record of a load wins, so the topic
is created compacted (`cleanup.policy=compact`). States: `started` (bases fixed), `complete` (the driver's `commit()`
checked every partition), `aborted` (Spark gave up; a rerun resumes from `started`'s
bases, which the `aborted` record repeats). Writing a manifest record twice is harmless:
it is the same content, and reading keeps the last.

Reading scans the control topic from its start: it holds a few records per load, so
this is cheap until there are very many loads (then compact the topic, or give each
pipeline its own `control_topic`).
"""

from __future__ import annotations

import json
import time
from typing import Any

import attrs

from trio_kafka.client import PartitionReader, create_topic
from trio_kafka.errors import ErrorCode, KafkaError, error_for_code
from trio_kafka.net import KafkaSelector
from trio_kafka.records import BatchBuilder
from trio_kafka.spark._wire import _Sender

CONTROL_TOPIC = "__trio_kafka_loads"


@attrs.frozen
class Manifest:
    """One load's record in the control topic."""

    load_id: str
    topic: str
    guarantee: str
    #: Kafka partition -> the offset the load began at (exactly_once), or -1.
    bases: dict[int, int]
    state: str = "started"
    #: Rows per partition, known once the load is complete.
    counts: dict[int, int] = attrs.field(factory=dict)
    #: Transactional mode: the transactions committed, (id, producer id, epoch).
    transactions: tuple[tuple[str, int, int], ...] = ()
    #: What the winning attempts did, one dict per partition (`PartitionReport` fields).
    reports: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "load_id": self.load_id,
                "topic": self.topic,
                "guarantee": self.guarantee,
                "bases": {str(p): b for p, b in sorted(self.bases.items())},
                "state": self.state,
                "counts": {str(p): c for p, c in sorted(self.counts.items())},
                "transactions": [list(t) for t in self.transactions],
                "reports": list(self.reports),
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        raw: dict[str, Any] = json.loads(data)
        return cls(
            load_id=raw["load_id"],
            topic=raw["topic"],
            guarantee=raw["guarantee"],
            bases={int(p): int(b) for p, b in raw["bases"].items()},
            state=raw["state"],
            counts={int(p): int(c) for p, c in raw.get("counts", {}).items()},
            transactions=tuple(
                (str(t[0]), int(t[1]), int(t[2])) for t in raw.get("transactions", [])
            ),
            reports=tuple(raw.get("reports", [])),
        )


#: The control topic keeps the last record of each load (its key): compacted.
CONTROL_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


async def ensure_control_topic(selector: KafkaSelector, control_topic: str) -> None:
    """Create the control topic (one partition, compacted, no CAS so any broker can
    hold it)."""
    try:
        await create_topic(selector, control_topic, 1, cas=False, configs=CONTROL_TOPIC_CONFIGS)
    except KafkaError as exc:
        code = getattr(exc, "code", None)
        if code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
    await selector.wait_for_topic(control_topic)


async def read_manifest(
    selector: KafkaSelector, load_id: str, control_topic: str = CONTROL_TOPIC
) -> Manifest | None:
    """The last manifest record of `load_id` (None: the load never started)."""
    await ensure_control_topic(selector, control_topic)
    reader = PartitionReader(selector)
    found: Manifest | None = None
    key = load_id.encode()
    async for record in reader.read(control_topic, 0):
        if record.key == key and record.value is not None:
            found = Manifest.from_json(record.value)
    return found


async def write_manifest(
    selector: KafkaSelector, manifest: Manifest, control_topic: str = CONTROL_TOPIC
) -> None:
    await ensure_control_topic(selector, control_topic)
    builder = BatchBuilder()
    builder.append(int(time.time() * 1000), manifest.load_id.encode(), manifest.to_json())
    sender = _Sender(selector, control_topic, 0, request_timeout=30.0, retry_timeout=120.0)
    code, _ = await sender.send(builder.build(base_offset=-1))
    if code != ErrorCode.NONE:
        raise error_for_code(code, f"writing the manifest of load {manifest.load_id!r}")


__all__ = [
    "CONTROL_TOPIC",
    "CONTROL_TOPIC_CONFIGS",
    "Manifest",
    "ensure_control_topic",
    "read_manifest",
    "write_manifest",
]
