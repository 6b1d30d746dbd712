"""One module per Kafka API; `REQUEST_CLASSES` maps an API key to its request class."""

from __future__ import annotations

from .._codec import Request
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
]
