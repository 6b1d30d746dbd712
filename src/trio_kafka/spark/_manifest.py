"""The load manifest: what the driver decided about a load, kept in a Kafka control topic.

Theory of operation
-------------------
A load is named by its `load_id`. Its rows' identity needs no manifest (every record
batch of a load ends with a checkpoint naming the load and its last row, and a writer
resumes from the last one in the log: core/_load.py). The manifest keeps what only
the driver knows:

- the guarantee the load uses (decided once, so a rerun never switches backend), and
  the load's whole routing (`routing`: partition count, partitioner, guarantee, key
  and value columns, order_by), so a rerun with another is refused before any task
  runs (`_source.open_load`);
- `started` -> `committing` -> `complete`, or `aborted`;
- transactional loads: the *winners*, one open transaction per partition that the
  driver is about to commit, written (state `committing`) BEFORE the first EndTxn, so a
  rerun after a driver crash between two EndTxns finishes every one of them (or names
  the ones the coordinator had already aborted: `lost`, whose partitions the rerun
  loads again);
- what each partition's winning attempt did (`reports`).

The manifest lives in a one-partition topic (`__trio_kafka_loads` by default), one JSON
record per state change, keyed by the load id; the last record of a load wins, so the
topic is compacted (`cleanup.policy=compact`): created so, and checked when it exists
(a topic that deletes old records would forget the winners of a crashed commit).
Writing a manifest record twice is harmless: reading keeps the last.
"""

from __future__ import annotations

import enum
import json
import logging
from typing import Any

import attrs

from trio_kafka.client import (
    KafkaSelector,
    PartitionReader,
    create_topic,
    describe_topic_config,
    open_producer,
)
from trio_kafka.errors import ConfigError, KafkaError

logger = logging.getLogger("trio_kafka.spark")

CONTROL_TOPIC = "__trio_kafka_loads"
#: The control topic keeps the last record of each load (its key): compacted.
CONTROL_TOPIC_CONFIGS = {"cleanup.policy": "compact"}


class LoadState(enum.Enum):
    STARTED = "started"
    #: Transactional: the winners are fixed; EndTxn(commit) of each is under way.
    COMMITTING = "committing"
    COMPLETE = "complete"
    ABORTED = "aborted"


@attrs.frozen
class Winner:
    """The transaction of one partition's winning attempt (transactional loads)."""

    partition: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    #: The partition's last row: its checkpoint shows the transaction committed.
    last_row: int


@attrs.frozen
class Manifest:
    """One load's record in the control topic."""

    load_id: str
    topic: str
    #: "exactly_once_cas" or "transactional" (never "auto": decided at the start).
    guarantee: str
    partitions: int
    state: LoadState = LoadState.STARTED
    #: Rows per partition, known once the load is complete.
    counts: dict[int, int] = attrs.field(factory=dict)
    winners: tuple[Winner, ...] = ()
    #: Transactional ids of winners the coordinator aborted before their commit (past
    #: `transaction.timeout.ms`): their partitions were loaded again.
    lost: tuple[str, ...] = ()
    #: What the winning attempts did, one dict per partition (`PartitionReport` fields).
    reports: tuple[dict[str, Any], ...] = ()
    #: The load's routing (core/_load.py; None: a manifest written before it was
    #: recorded, whose rerun is refused: nothing can be checked).
    routing: dict[str, Any] | None = None

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "load_id": self.load_id,
                "topic": self.topic,
                "guarantee": self.guarantee,
                "partitions": self.partitions,
                "state": self.state.value,
                "counts": {str(p): c for p, c in sorted(self.counts.items())},
                "winners": [attrs.asdict(w) for w in self.winners],
                "lost": list(self.lost),
                "reports": list(self.reports),
                "routing": self.routing,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        raw: dict[str, Any] = json.loads(data)
        if "partitions" not in raw:
            raise ConfigError(
                f"the manifest of load {raw.get('load_id')!r} was written by an older "
                "trio-kafka (per-partition base offsets, before loads resumed from their "
                "checkpoints); finish it with that version, or use another load_id"
            )
        return cls(
            load_id=raw["load_id"],
            topic=raw["topic"],
            guarantee=raw["guarantee"],
            partitions=int(raw["partitions"]),
            state=LoadState(raw["state"]),
            counts={int(p): int(c) for p, c in raw.get("counts", {}).items()},
            winners=tuple(Winner(**w) for w in raw.get("winners", [])),
            lost=tuple(raw.get("lost", [])),
            reports=tuple(raw.get("reports", [])),
            routing=raw.get("routing"),
        )


async def ensure_control_topic(selector: KafkaSelector, control_topic: str) -> None:
    """Create the control topic (one partition, compacted, no CAS so any broker can hold
    it), or check that the existing one is compacted."""
    created = await create_topic(
        selector, control_topic, 1, cas=False, configs=CONTROL_TOPIC_CONFIGS
    )
    await selector.wait_for_topic(control_topic)
    if created:
        return
    try:
        policy = await describe_topic_config(selector, control_topic, "cleanup.policy")
    except KafkaError as exc:
        logger.warning("cannot check that %s is compacted: %s", control_topic, exc)
        return
    if policy is not None and "compact" not in policy:
        raise ConfigError(
            f"the load manifest topic {control_topic!r} has cleanup.policy={policy}: it "
            "must be compacted (cleanup.policy=compact), or the manifests of older loads "
            "are deleted and a rerun after a crashed commit cannot finish it; alter the "
            "topic, or name another with the control_topic option"
        )


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
    """Append `manifest` to the control topic and wait for its acknowledgement."""
    await ensure_control_topic(selector, control_topic)
    async with open_producer(selector=selector, linger=0.0) as producer:
        await producer.send_and_wait(
            control_topic, manifest.to_json(), key=manifest.load_id.encode(), partition=0
        )


__all__ = [
    "CONTROL_TOPIC",
    "CONTROL_TOPIC_CONFIGS",
    "LoadState",
    "Manifest",
    "Winner",
    "ensure_control_topic",
    "read_manifest",
    "write_manifest",
]
