"""What `send()` checks before a record enters a batch.

A record the wire cannot carry must fail alone, at `send()`, with a `TypeError` or
`InvalidTopicError` naming what is wrong: once it is in a batch, the batch's encoding
would fail in the sender, where it would take the batch's other records with it.

The checks are split by cost. `send()`'s fast path already compares the classes of
topic, value and key; everything here runs only when the record has headers, an
explicit partition or timestamp (`check_extras`), when the topic is not in the metadata
yet (`trio_kafka.net.check_topic_name`, in `KafkaSelector.wait_for_topic`, so every
client checks it), or for a custom partitioner's answer.

Headers follow confluent-kafka's rule: a list of (key, value) pairs or a dict; keys
`str`; values `bytes` (or `bytearray`, `memoryview`), `str` (sent as UTF-8) or None.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from trio_kafka.producer import ProducerRecord

Header = tuple[str, bytes | None]

_BINARY = (bytes, bytearray, memoryview)
#: The largest timestamp a record batch holds (an int64 of ms).
_MAX_TIMESTAMP = 2**63 - 1


def check_extras(headers: Any, partition: Any, timestamp: Any) -> Any:
    """Check a record's headers, partition and timestamp; returns the headers as the
    encoder takes them (None when there are none)."""
    if partition is not None and partition.__class__ is not int:
        raise TypeError(
            f"partition must be an int or None, not {type(partition).__name__} ({partition!r})"
        )
    if timestamp is not None:
        if timestamp.__class__ is not int:
            raise TypeError(
                f"timestamp must be an int (ms since the epoch) or None, not "
                f"{type(timestamp).__name__} ({timestamp!r})"
            )
        if not 0 <= timestamp <= _MAX_TIMESTAMP:
            # Java's ProducerRecord refuses a negative one too; one past int64 would
            # fail the encoding of its whole batch in the sender, not this record alone.
            raise ValueError(
                f"timestamp={timestamp} is not allowed: it must be ms since the epoch, "
                f"0 to {_MAX_TIMESTAMP} (or None: now)"
            )
    if headers is None:
        return None
    return check_headers(headers)


def check_headers(headers: Any) -> Any:
    """`headers` as the encoder takes them: as given when already a list or tuple of
    (str, bytes | None) tuples (no copy: the common case), converted otherwise, or a
    `TypeError` naming the header that cannot be sent."""
    if headers.__class__ is list or headers.__class__ is tuple:
        for pair in headers:
            if (
                pair.__class__ is not tuple
                or len(pair) != 2
                or pair[0].__class__ is not str
                or (pair[1] is not None and pair[1].__class__ is not bytes)
            ):
                break
        else:
            return headers or None
    return _converted_headers(headers)


def _converted_headers(headers: Any) -> tuple[Header, ...] | None:
    if isinstance(headers, Mapping):
        pairs: Any = list(headers.items())
    elif isinstance(headers, list | tuple):
        pairs = headers
    else:
        raise TypeError(
            f"headers must be a list of (key, value) pairs or a dict, not {type(headers).__name__}"
        )
    checked: list[Header] = []
    for index, pair in enumerate(pairs):
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            what = type(pair).__name__
            if isinstance(pair, tuple | list):
                what += f" of length {len(pair)}"
            raise TypeError(f"header {index} must be a (key, value) pair, not {what}")
        name, value = pair
        if name.__class__ is not str:
            raise TypeError(
                f"header {index}'s key must be str, not {type(name).__name__} ({name!r})"
            )
        if value is None or value.__class__ is bytes:
            checked.append((name, value))
        elif isinstance(value, str):
            checked.append((name, value.encode("utf-8")))
        elif isinstance(value, _BINARY):
            checked.append((name, bytes(value)))
        else:
            raise TypeError(
                f"header {name!r} value must be bytes, str or None, not {type(value).__name__}"
            )
    return tuple(checked) or None


def check_interceptor_result(interceptor: object, record: object) -> ProducerRecord:
    if not isinstance(record, ProducerRecord):
        raise TypeError(
            f"interceptor {interceptor!r}: on_send must return a ProducerRecord, not "
            f"{type(record).__name__}"
        )
    return record


def checked_partitioner(partitioner: Callable[..., Any]) -> Callable[..., int]:
    """The user's partitioner, with its answer checked: anything but an int would
    reach the encoder (and fail the whole batch) instead of failing this record."""

    def partition(record: ProducerRecord, cluster: Any) -> int:
        chosen = partitioner(record, cluster)
        if chosen.__class__ is not int:
            raise TypeError(
                f"the custom partitioner returned {type(chosen).__name__} ({chosen!r}) for "
                f"a record to {record.topic!r}: it must return an int"
            )
        return chosen

    partition.__wrapped__ = partitioner  # type: ignore[attr-defined]
    return partition


_VALUE_TYPES = (bytes, bytearray, memoryview, type(None))
SendHeaders = Sequence[tuple[str, bytes | None]]


def record_fields(
    record: object,
    value: Any = None,
    key: Any = None,
    headers: Any = None,
    partition: int | None = None,
    timestamp: int | None = None,
) -> tuple[str, Any, Any, SendHeaders | None, int | None, int | None]:
    """A `ProducerRecord`'s fields as `send()` takes them (no headers: None), with
    `partition=` and `timestamp=` given beside it in place of the record's (as the
    blocking facade takes them). A value, key or headers beside it would be one too
    many (which counts?): a `TypeError`, as is anything else in `topic`'s place."""
    if not isinstance(record, ProducerRecord):
        raise TypeError(f"topic must be a str or a ProducerRecord, not {type(record).__name__}")
    if value is not None or key is not None or headers is not None:
        given = [
            n for n, v in (("value", value), ("key", key), ("headers", headers)) if v is not None
        ]
        raise TypeError(
            f"send() got a ProducerRecord and {', '.join(given)} beside it: pass either a "
            "ProducerRecord or topic, value, key=..., not both"
        )
    return (
        record.topic,
        record.value,
        record.key,
        record.headers or None,
        record.partition if partition is None else partition,
        record.timestamp if timestamp is None else timestamp,
    )


def check_types(value: Any, key: Any) -> None:
    if not isinstance(value, _VALUE_TYPES):
        raise TypeError(
            f"value must be bytes or None, not {type(value).__name__}: pass bytes, or set "
            "value_serializer"
        )
    if not isinstance(key, _VALUE_TYPES):
        raise TypeError(
            f"key must be bytes or None, not {type(key).__name__}: pass bytes, or set "
            "key_serializer"
        )


def as_bytes(items: Sequence[Any]) -> list[bytes | None]:
    """bytes-like items as bytes (a copy: the caller may reuse its buffers)."""
    return [None if item is None else bytes(item) for item in items]
