"""The ground truth of a simulated run: every partition's stored batches, decoded.

`snapshot_cluster` copies the mock broker's partition logs into neutral values (no broker
objects, no bytes to parse again) that the checker (`checker.py`) reads. Tests build them
directly with `LogSnapshot.of`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from trio_kafka.broker import Cluster, ClusterState
from trio_kafka.records import ControlType, RecordBatch, decode_batches, parse_control_record

TopicPartition = tuple[str, int]


@attrs.frozen(slots=True)
class LogRecord:
    offset: int
    key: bytes | None
    value: bytes | None


@attrs.frozen(slots=True)
class LogBatch:
    """A stored batch. `control` is the marker type of a control batch, else None."""

    base_offset: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    records: tuple[LogRecord, ...]
    control: ControlType | None = None

    @property
    def is_control(self) -> bool:
        return self.control is not None

    @property
    def record_count(self) -> int:
        return len(self.records)

    @classmethod
    def from_record_batch(cls, batch: RecordBatch) -> LogBatch:
        control = None
        if batch.is_control and batch.records:
            control = parse_control_record(batch.records[0]).type
        return cls(
            base_offset=batch.base_offset,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            records=tuple(LogRecord(r.offset, r.key, r.value) for r in batch.records),
            control=control,
        )


@attrs.frozen(slots=True)
class PartitionSnapshot:
    topic: str
    partition: int
    batches: tuple[LogBatch, ...]
    log_end_offset: int
    #: The broker's last stable offset (None: unknown, the hanging check skips it).
    last_stable_offset: int | None = None


@attrs.frozen(slots=True)
class LogSnapshot:
    """Every partition's log at the end of a run, sorted by (topic, partition)."""

    partitions: tuple[PartitionSnapshot, ...]

    @classmethod
    def of(cls, logs: Mapping[TopicPartition, Sequence[LogBatch]]) -> LogSnapshot:
        """From batches alone (tests): log end after the last batch, LSO unknown."""
        parts = []
        for (topic, index), batches in sorted(logs.items()):
            end = batches[-1].base_offset + batches[-1].record_count if batches else 0
            parts.append(PartitionSnapshot(topic, index, tuple(batches), end))
        return cls(tuple(parts))


def snapshot_cluster(
    cluster: Cluster | ClusterState, *, topics: Iterable[str] | None = None
) -> LogSnapshot:
    """The ground truth of a mock cluster: its stored batches, decoded (CRC checked)."""
    state = cluster.state if isinstance(cluster, Cluster) else cluster
    names = sorted(state.topics if topics is None else topics)
    parts = []
    for name in names:
        for part in sorted(state.topics[name].partitions, key=lambda p: p.index):
            batches = tuple(
                LogBatch.from_record_batch(decoded)
                for stored in part.log.batches
                for decoded in decode_batches(stored.data)
            )
            parts.append(
                PartitionSnapshot(
                    name,
                    part.index,
                    batches,
                    part.log.log_end_offset,
                    part.log.last_stable_offset,
                )
            )
    return LogSnapshot(tuple(parts))
