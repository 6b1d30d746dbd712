"""One module per Kafka API; `REQUEST_CLASSES` maps an API key to its request class,
and `decode_request` reads a request frame of any of them (what a broker receives).

The registry is here, above the generic codec (`.._codec`) that every message is declared
with, so that the codec never imports the messages.
"""

from __future__ import annotations

import struct
from typing import Any

from ...errors import ProtocolError, UnsupportedRequestError
from .._codec import Request, RequestHeader, request_header_version
from .add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from .add_partitions_to_txn import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from .api_versions import ApiVersionsRequest, ApiVersionsResponse
from .create_topics import CreateTopicsRequest, CreateTopicsResponse
from .delete_topics import DeleteTopicsRequest, DeleteTopicsResponse
from .describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from .describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from .describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from .describe_producers import DescribeProducersRequest, DescribeProducersResponse
from .end_txn import EndTxnRequest, EndTxnResponse
from .fetch import FetchRequest, FetchResponse
from .find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from .heartbeat import HeartbeatRequest, HeartbeatResponse
from .init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from .join_group import JoinGroupRequest, JoinGroupResponse
from .leave_group import LeaveGroupRequest, LeaveGroupResponse
from .list_groups import ListGroupsRequest, ListGroupsResponse
from .list_offsets import ListOffsetsRequest, ListOffsetsResponse
from .metadata import MetadataRequest, MetadataResponse
from .offset_commit import OffsetCommitRequest, OffsetCommitResponse
from .offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from .offset_for_leader_epoch import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from .produce import ProduceRequest, ProduceResponse
from .sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from .sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse
from .sync_group import SyncGroupRequest, SyncGroupResponse
from .txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from .write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse

REQUEST_CLASSES: dict[int, type[Request]] = {
    cls.API_KEY: cls
    for cls in (
        AddOffsetsToTxnRequest,
        AddPartitionsToTxnRequest,
        ApiVersionsRequest,
        CreateTopicsRequest,
        DeleteTopicsRequest,
        DescribeClusterRequest,
        DescribeConfigsRequest,
        DescribeGroupsRequest,
        DescribeProducersRequest,
        EndTxnRequest,
        FetchRequest,
        FindCoordinatorRequest,
        HeartbeatRequest,
        InitProducerIdRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        ListGroupsRequest,
        ListOffsetsRequest,
        MetadataRequest,
        OffsetCommitRequest,
        OffsetFetchRequest,
        OffsetForLeaderEpochRequest,
        ProduceRequest,
        SaslAuthenticateRequest,
        SaslHandshakeRequest,
        SyncGroupRequest,
        TxnOffsetCommitRequest,
        WriteTxnMarkersRequest,
    )
}

_HEADER_PREFIX = struct.Struct(">hhi")


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Any]:
    """A request frame's payload (no size prefix) -> (header, request body)."""
    data = bytes(frame)
    try:
        api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(data, 0)
    except struct.error:
        raise ProtocolError(
            f"a request frame of {len(data)} bytes is shorter than a request header",
            message_name="RequestHeader",
            offset=0,
        ) from None
    cls = REQUEST_CLASSES.get(api_key)
    if cls is None:
        raise UnsupportedRequestError(
            f"unknown API key {api_key}",
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
        )
    if not cls.MIN_VERSION <= api_version <= cls.MAX_VERSION:
        raise UnsupportedRequestError(
            f"{cls.__name__} version {api_version} is not supported "
            f"(supported: {cls.MIN_VERSION}-{cls.MAX_VERSION})",
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
        )
    header, pos = RequestHeader.read_from(
        data, 0, request_header_version(cls, api_version), exact=False
    )
    body, _ = cls.read_from(data, pos, api_version, exact=True)
    return header, body


__all__ = [
    "REQUEST_CLASSES",
    "AddOffsetsToTxnRequest",
    "AddOffsetsToTxnResponse",
    "AddPartitionsToTxnRequest",
    "AddPartitionsToTxnResponse",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "CreateTopicsRequest",
    "CreateTopicsResponse",
    "DeleteTopicsRequest",
    "DeleteTopicsResponse",
    "DescribeClusterRequest",
    "DescribeClusterResponse",
    "DescribeConfigsRequest",
    "DescribeConfigsResponse",
    "DescribeGroupsRequest",
    "DescribeGroupsResponse",
    "DescribeProducersRequest",
    "DescribeProducersResponse",
    "EndTxnRequest",
    "EndTxnResponse",
    "FetchRequest",
    "FetchResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "InitProducerIdRequest",
    "InitProducerIdResponse",
    "JoinGroupRequest",
    "JoinGroupResponse",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "ListGroupsRequest",
    "ListGroupsResponse",
    "ListOffsetsRequest",
    "ListOffsetsResponse",
    "MetadataRequest",
    "MetadataResponse",
    "OffsetCommitRequest",
    "OffsetCommitResponse",
    "OffsetFetchRequest",
    "OffsetFetchResponse",
    "OffsetForLeaderEpochRequest",
    "OffsetForLeaderEpochResponse",
    "ProduceRequest",
    "ProduceResponse",
    "SaslAuthenticateRequest",
    "SaslAuthenticateResponse",
    "SaslHandshakeRequest",
    "SaslHandshakeResponse",
    "SyncGroupRequest",
    "SyncGroupResponse",
    "TxnOffsetCommitRequest",
    "TxnOffsetCommitResponse",
    "WriteTxnMarkersRequest",
    "WriteTxnMarkersResponse",
    "decode_request",
]
