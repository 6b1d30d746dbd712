"""Control batches: the transaction markers a coordinator writes (KIP-98).

A control batch has the transactional and control attribute bits set and holds exactly
one record. Its key is (version int16 = 0, type int16); its value, for COMMIT and ABORT,
is (version int16 = 0, coordinatorEpoch int32). Consumers never show control records to
applications: read_committed ones use them to drop aborted records.
"""

from __future__ import annotations

import enum
import struct

import attrs

from trio_kafka.errors import CorruptRecordError
from trio_kafka.records._builder import (
    CONTROL_BIT,
    NO_SEQUENCE,
    TRANSACTIONAL_BIT,
    frame_batch,
)
from trio_kafka.records._decoder import Record

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_CONTROL_KEY_VERSION = 0
_MARKER_VALUE_VERSION = 0


class ControlType(enum.IntEnum):
    """The type in a control record's key."""

    ABORT = 0
    COMMIT = 1


@attrs.frozen
class ControlRecord:
    """A parsed transaction marker."""

    type: ControlType
    coordinator_epoch: int


def build_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    base_offset: int = 0,
    timestamp_ms: int,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A one-record control batch carrying a COMMIT or ABORT marker."""
    key = _KEY.pack(_CONTROL_KEY_VERSION, ControlType(control_type))
    value = _VALUE.pack(_MARKER_VALUE_VERSION, coordinator_epoch)
    # length, attributes, timestampDelta 0, offsetDelta 0, key (4 bytes), value (6 bytes),
    # no headers: every varint is one byte.
    body = b"\x00\x00\x00" + bytes([len(key) << 1]) + key + bytes([len(value) << 1]) + value
    record = bytes([(len(body) + 1) << 1]) + body + b"\x00"
    return frame_batch(
        record,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=TRANSACTIONAL_BIT | CONTROL_BIT,
        last_offset_delta=0,
        base_timestamp=timestamp_ms,
        max_timestamp=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        record_count=1,
    )


def parse_control_record(record: Record) -> ControlRecord:
    """The marker in a control batch's record; CorruptRecordError if it is not one."""
    key = record.key
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(f"control record at offset {record.offset} has key {key!r}")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(
            f"control record at offset {record.offset} has key version {version}",
        )
    try:
        control_type = ControlType(type_id)
    except ValueError:
        raise CorruptRecordError(
            f"control record at offset {record.offset} has unknown type {type_id}",
        ) from None
    value = record.value
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(
            f"{control_type.name} marker at offset {record.offset} has value {value!r}",
        )
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return ControlRecord(control_type, coordinator_epoch)
