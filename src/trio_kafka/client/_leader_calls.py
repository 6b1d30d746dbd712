"""Asking a partition's leader, safely repeated: the partition reader's plumbing.

Reads change nothing, so every failure that another attempt may get past (stale
metadata, a lost connection, a timed-out request, a retriable code) is raised as a
`Retry`, saying whether to refresh the metadata first; `PartitionReader._retrying` runs
the attempts. Which codes refresh and which only back off: `_reader.py`'s theory of
operation.
"""

from __future__ import annotations

from typing import Any

from trio_kafka.errors import (
    BrokerConnectionError,
    ConnectionLostError,
    ErrorCode,
    InvalidPartitionError,
    KafkaError,
    RequestTimeoutError,
    error_for_code,
    error_info,
)
from trio_kafka.net import KafkaSelector, PartitionMetadata, TopicMetadata
from trio_kafka.protocol.messages.fetch import FetchRequest, FetchResponse, PartitionData

#: The last Fetch version that names topics (v13+ names them by topic id only).
_LAST_FETCH_VERSION_WITH_NAMES = 12
#: Fetch v4 added isolation levels and the aborted-transactions list (KIP-98).
_FIRST_FETCH_VERSION_WITH_ISOLATION = 4

#: Codes that mean "the metadata is stale": refresh it, then retry. The error table's
#: `invalid_metadata` column covers most; these are the ones a Fetch or ListOffsets
#: can answer during a leader move even where the table does not say so.
_REFRESH_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.REPLICA_NOT_AVAILABLE,
    }
)


class Retry(Exception):
    """This attempt failed in a way that another attempt may not (refresh the metadata
    first when `refresh`)."""

    def __init__(self, error: BaseException, *, refresh: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.refresh = refresh


async def leader_of(
    selector: KafkaSelector, topic: str, partition: int, timeout: float
) -> tuple[int, PartitionMetadata]:
    """The partition's leader node and metadata, waiting for the topic if needed."""
    if isinstance(partition, bool) or not isinstance(partition, int):
        raise TypeError(f"partition must be an int, not {type(partition).__name__} ({partition!r})")
    metadata = selector.metadata
    found: TopicMetadata | None = metadata.topic(topic)
    selector.touch([topic])  # read or written: its metadata is kept (metadata_max_idle)
    if found is None or not found.is_usable:
        try:
            found = await selector.wait_for_topic(topic, timeout=timeout)
        except BrokerConnectionError as exc:
            raise Retry(exc, refresh=False) from exc
    meta = selector.metadata.partition(topic, partition)
    if meta is None:  # added since our snapshot? Look once more before giving up.
        try:
            found = (await selector.refresh_metadata([topic])).topic(topic) or found
        except BrokerConnectionError as exc:
            raise Retry(exc, refresh=False) from exc
        meta = selector.metadata.partition(topic, partition)
    if meta is None:
        raise InvalidPartitionError(
            f"{topic} has no partition {partition} (it has {found.partition_count})"
        )
    if meta.leader < 0 or selector.metadata.leader_for(topic, partition) is None:
        raise Retry(
            error_for_code(
                ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{partition} has no leader now"
            ),
            refresh=True,
        )
    return meta.leader, meta


async def fetch_version(
    selector: KafkaSelector, node: int, have_topic_id: bool, read_committed: bool
) -> int:
    """The Fetch version to send `node` (see the reader's theory of operation)."""
    try:
        connection = await selector.connection(node)
    except BrokerConnectionError as exc:
        raise Retry(exc, refresh=True) from exc
    negotiated = connection.api_versions.get(FetchRequest.API_KEY)
    if negotiated is None:
        raise error_for_code(
            ErrorCode.UNSUPPORTED_VERSION, f"node {node} speaks no Fetch version we know"
        )
    version = negotiated if have_topic_id else min(negotiated, _LAST_FETCH_VERSION_WITH_NAMES)
    if read_committed and version < _FIRST_FETCH_VERSION_WITH_ISOLATION:
        raise error_for_code(
            ErrorCode.UNSUPPORTED_VERSION,
            f"node {node} speaks Fetch up to v{version}; read_committed needs v4+",
        )
    return version


async def ask(
    selector: KafkaSelector,
    node: int,
    request: Any,
    *,
    version: int | None = None,
    extra: float = 0.0,
) -> Any:
    """Send and wait; connection trouble becomes a retry (reads are safe to repeat)."""
    timeout = selector.config.request_timeout + extra
    try:
        return await selector.request(node, request, version=version, timeout=timeout)
    except (BrokerConnectionError, ConnectionLostError, RequestTimeoutError) as exc:
        raise Retry(exc, refresh=True) from exc
    except KeyError as exc:  # the node left the metadata between lookup and send
        raise Retry(KafkaError(str(exc)), refresh=True) from exc


def partition_data(response: FetchResponse, partition: int, node: int) -> PartitionData | None:
    if response.error_code != ErrorCode.NONE:
        check_code(response.error_code, f"Fetch to node {node}")
    for topic in response.responses:
        for data in topic.partitions:
            if data.partition_index == partition:
                return data
    return None


def check_code(code: int, where: str) -> None:
    """Raise for an error code: `Retry` for the ones another attempt may get past."""
    if code == ErrorCode.NONE:
        return
    info = error_info(code)
    error = error_for_code(code, f"{where}: {info.message}")
    if code in _REFRESH_CODES or info.invalid_metadata:
        raise Retry(error, refresh=True)
    if info.retriable:
        raise Retry(error, refresh=False)
    raise error


__all__ = ["Retry", "ask", "check_code", "fetch_version", "leader_of", "partition_data"]
