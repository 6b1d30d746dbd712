"""Kafka's error codes and the table that says what each means for a client.

`ErrorCode` lists every code of Kafka's error table plus our own `EXPECTED_OFFSET_MISMATCH`
(the expected-offset CAS extension, docs/cas.md); `ERRORS` holds each code's row (name,
message, and the retriable, needs-metadata-refresh, abortable and fatal columns) and
`error_info(code)` looks one up. The exception tree that these rows choose from is in
`_exceptions.py`.
"""

from __future__ import annotations

import enum

import attrs


class ErrorCode(enum.IntEnum):
    """Every error code of the Kafka protocol, plus our CAS extension's."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127
    INVALID_REGULAR_EXPRESSION = 128
    EXPECTED_OFFSET_MISMATCH = 32000  # ours: the CAS extension (docs/cas.md)


@attrs.frozen(slots=True)
class ErrorInfo:
    """One row of the error table."""

    code: int
    name: str
    message: str
    #: The Java client's exception for it extends RetriableException.
    retriable: bool
    #: The client should refresh its metadata before it retries.
    invalid_metadata: bool
    #: In a transaction: abort the transaction and go on (KIP-1050 "abortable").
    abortable: bool
    #: The producer cannot go on and must be closed (KIP-1050 "fatal").
    fatal: bool
    #: The broker refused a batch for what its records hold (a record without a key
    #: for a compacted topic, a timestamp out of the topic's range): sent again, the
    #: same records meet the same answer.
    refuses_records: bool = False


# One row per code of Kafka's error table, in its order (as Java's `Errors` enum):
# (code, name, retriable, invalid_metadata, message).
# fmt: off
_TABLE: tuple[tuple[int, str, bool, bool, str], ...] = (
    (  -1, "UNKNOWN_SERVER_ERROR",                  False, False, "The server experienced an unexpected error when processing the request."),
    (   0, "NONE",                                  False, False, ""),
    (   1, "OFFSET_OUT_OF_RANGE",                   False, False, "The requested offset is not within the range of offsets maintained by the server."),
    (   2, "CORRUPT_MESSAGE",                       True,  False, "This message has failed its CRC checksum, exceeds the valid size, has a null key for a compacted topic, or is otherwise corrupt."),
    (   3, "UNKNOWN_TOPIC_OR_PARTITION",            True,  True,  "This server does not host this topic-partition."),
    (   4, "INVALID_FETCH_SIZE",                    False, False, "The requested fetch size is invalid."),
    (   5, "LEADER_NOT_AVAILABLE",                  True,  True,  "There is no leader for this topic-partition as we are in the middle of a leadership election."),
    (   6, "NOT_LEADER_OR_FOLLOWER",                True,  True,  "For requests intended only for the leader, this error indicates that the broker is not the current leader. For requests intended for any replica, this error indicates that the broker is not a replica of the topic partition."),
    (   7, "REQUEST_TIMED_OUT",                     True,  False, "The request timed out."),
    (   8, "BROKER_NOT_AVAILABLE",                  False, False, "The broker is not available."),
    (   9, "REPLICA_NOT_AVAILABLE",                 True,  True,  "The replica is not available for the requested topic-partition. Produce/Fetch requests and other requests intended only for the leader or follower return NOT_LEADER_OR_FOLLOWER if the broker is not a replica of the topic-partition."),
    (  10, "MESSAGE_TOO_LARGE",                     False, False, "The request included a message larger than the max message size the server will accept."),
    (  11, "STALE_CONTROLLER_EPOCH",                False, False, "The controller moved to another broker."),
    (  12, "OFFSET_METADATA_TOO_LARGE",             False, False, "The metadata field of the offset request was too large."),
    (  13, "NETWORK_EXCEPTION",                     True,  True,  "The server disconnected before a response was received."),
    (  14, "COORDINATOR_LOAD_IN_PROGRESS",          True,  False, "The coordinator is loading and hence can't process requests."),
    (  15, "COORDINATOR_NOT_AVAILABLE",             True,  False, "The coordinator is not available."),
    (  16, "NOT_COORDINATOR",                       True,  False, "This is not the correct coordinator."),
    (  17, "INVALID_TOPIC_EXCEPTION",               False, False, "The request attempted to perform an operation on an invalid topic."),
    (  18, "RECORD_LIST_TOO_LARGE",                 False, False, "The request included message batch larger than the configured segment size on the server."),
    (  19, "NOT_ENOUGH_REPLICAS",                   True,  False, "Messages are rejected since there are fewer in-sync replicas than required."),
    (  20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND",      True,  False, "Messages are written to the log, but to fewer in-sync replicas than required."),
    (  21, "INVALID_REQUIRED_ACKS",                 False, False, "Produce request specified an invalid value for required acks."),
    (  22, "ILLEGAL_GENERATION",                    False, False, "Specified group generation id is not valid."),
    (  23, "INCONSISTENT_GROUP_PROTOCOL",           False, False, "The group member's supported protocols are incompatible with those of existing members or first group member tried to join with empty protocol type or empty protocol list."),
    (  24, "INVALID_GROUP_ID",                      False, False, "The configured groupId is invalid."),
    (  25, "UNKNOWN_MEMBER_ID",                     False, False, "The coordinator is not aware of this member."),
    (  26, "INVALID_SESSION_TIMEOUT",               False, False, "The session timeout is not within the range allowed by the broker (as configured by group.min.session.timeout.ms and group.max.session.timeout.ms)."),
    (  27, "REBALANCE_IN_PROGRESS",                 False, False, "The group is rebalancing, so a rejoin is needed."),
    (  28, "INVALID_COMMIT_OFFSET_SIZE",            False, False, "The committing offset data size is not valid."),
    (  29, "TOPIC_AUTHORIZATION_FAILED",            False, False, "Topic authorization failed."),
    (  30, "GROUP_AUTHORIZATION_FAILED",            False, False, "Group authorization failed."),
    (  31, "CLUSTER_AUTHORIZATION_FAILED",          False, False, "Cluster authorization failed."),
    (  32, "INVALID_TIMESTAMP",                     False, False, "The timestamp of the message is out of acceptable range."),
    (  33, "UNSUPPORTED_SASL_MECHANISM",            False, False, "The broker does not support the requested SASL mechanism."),
    (  34, "ILLEGAL_SASL_STATE",                    False, False, "Request is not valid given the current SASL state."),
    (  35, "UNSUPPORTED_VERSION",                   False, False, "The version of API is not supported."),
    (  36, "TOPIC_ALREADY_EXISTS",                  False, False, "Topic with this name already exists."),
    (  37, "INVALID_PARTITIONS",                    False, False, "Number of partitions is below 1."),
    (  38, "INVALID_REPLICATION_FACTOR",            False, False, "Replication factor is below 1 or larger than the number of available brokers."),
    (  39, "INVALID_REPLICA_ASSIGNMENT",            False, False, "Replica assignment is invalid."),
    (  40, "INVALID_CONFIG",                        False, False, "Configuration is invalid."),
    (  41, "NOT_CONTROLLER",                        True,  False, "This is not the correct controller for this cluster."),
    (  42, "INVALID_REQUEST",                       False, False, "This most likely occurs because of a request being malformed by the client library or the message was sent to an incompatible broker. See the broker logs for more details."),
    (  43, "UNSUPPORTED_FOR_MESSAGE_FORMAT",        False, False, "The message format version on the broker does not support the request."),
    (  44, "POLICY_VIOLATION",                      False, False, "Request parameters do not satisfy the configured policy."),
    (  45, "OUT_OF_ORDER_SEQUENCE_NUMBER",          False, False, "The broker received an out of order sequence number."),
    (  46, "DUPLICATE_SEQUENCE_NUMBER",             False, False, "The broker received a duplicate sequence number."),
    (  47, "INVALID_PRODUCER_EPOCH",                False, False, "Producer attempted to produce with an old epoch."),
    (  48, "INVALID_TXN_STATE",                     False, False, "The producer attempted a transactional operation in an invalid state."),
    (  49, "INVALID_PRODUCER_ID_MAPPING",           False, False, "The producer attempted to use a producer id which is not currently assigned to its transactional id."),
    (  50, "INVALID_TRANSACTION_TIMEOUT",           False, False, "The transaction timeout is larger than the maximum value allowed by the broker (as configured by transaction.max.timeout.ms)."),
    (  51, "CONCURRENT_TRANSACTIONS",               True,  False, "The producer attempted to update a transaction while another concurrent operation on the same transaction was ongoing."),
    (  52, "TRANSACTION_COORDINATOR_FENCED",        False, False, "Indicates that the transaction coordinator sending a WriteTxnMarker is no longer the current coordinator for a given producer."),
    (  53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False, False, "Transactional Id authorization failed."),
    (  54, "SECURITY_DISABLED",                     False, False, "Security features are disabled."),
    (  55, "OPERATION_NOT_ATTEMPTED",               False, False, "The broker did not attempt to execute this operation. This may happen for batched RPCs where some operations in the batch failed, causing the broker to respond without trying the rest."),
    (  56, "KAFKA_STORAGE_ERROR",                   True,  True,  "Disk error when trying to access log file on the disk."),
    (  57, "LOG_DIR_NOT_FOUND",                     False, False, "The user-specified log directory is not found in the broker config."),
    (  58, "SASL_AUTHENTICATION_FAILED",            False, False, "SASL Authentication failed."),
    (  59, "UNKNOWN_PRODUCER_ID",                   False, False, "This exception is raised by the broker if it could not locate the producer metadata associated with the producerId in question. This could happen if, for instance, the producer's records were deleted because their retention time had elapsed. Once the last records of the producerId are removed, the producer's metadata is removed from the broker, and future appends by the producer will return this exception."),
    (  60, "REASSIGNMENT_IN_PROGRESS",              False, False, "A partition reassignment is in progress."),
    (  61, "DELEGATION_TOKEN_AUTH_DISABLED",        False, False, "Delegation Token feature is not enabled."),
    (  62, "DELEGATION_TOKEN_NOT_FOUND",            False, False, "Delegation Token is not found on server."),
    (  63, "DELEGATION_TOKEN_OWNER_MISMATCH",       False, False, "Specified Principal is not valid Owner/Renewer."),
    (  64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED",  False, False, "Delegation Token requests are not allowed on PLAINTEXT/1-way SSL channels and on delegation token authenticated channels."),
    (  65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", False, False, "Delegation Token authorization failed."),
    (  66, "DELEGATION_TOKEN_EXPIRED",              False, False, "Delegation Token is expired."),
    (  67, "INVALID_PRINCIPAL_TYPE",                False, False, "Supplied principalType is not supported."),
    (  68, "NON_EMPTY_GROUP",                       False, False, "The group is not empty."),
    (  69, "GROUP_ID_NOT_FOUND",                    False, False, "The group id does not exist."),
    (  70, "FETCH_SESSION_ID_NOT_FOUND",            True,  False, "The fetch session ID was not found."),
    (  71, "INVALID_FETCH_SESSION_EPOCH",           True,  False, "The fetch session epoch is invalid."),
    (  72, "LISTENER_NOT_FOUND",                    True,  True,  "There is no listener on the leader broker that matches the listener on which metadata request was processed."),
    (  73, "TOPIC_DELETION_DISABLED",               False, False, "Topic deletion is disabled."),
    (  74, "FENCED_LEADER_EPOCH",                   True,  True,  "The leader epoch in the request is older than the epoch on the broker."),
    (  75, "UNKNOWN_LEADER_EPOCH",                  True,  False, "The leader epoch in the request is newer than the epoch on the broker."),
    (  76, "UNSUPPORTED_COMPRESSION_TYPE",          False, False, "The requesting client does not support the compression type of given partition."),
    (  77, "STALE_BROKER_EPOCH",                    False, False, "Broker epoch has changed."),
    (  78, "OFFSET_NOT_AVAILABLE",                  True,  False, "The leader high watermark has not caught up from a recent leader election so the offsets cannot be guaranteed to be monotonically increasing."),
    (  79, "MEMBER_ID_REQUIRED",                    False, False, "The group member needs to have a valid member id before actually entering a consumer group."),
    (  80, "PREFERRED_LEADER_NOT_AVAILABLE",        True,  True,  "The preferred leader was not available."),
    (  81, "GROUP_MAX_SIZE_REACHED",                False, False, "The consumer group has reached its max size."),
    (  82, "FENCED_INSTANCE_ID",                    False, False, "The broker rejected this static consumer since another consumer with the same group.instance.id has registered with a different member.id."),
    (  83, "ELIGIBLE_LEADERS_NOT_AVAILABLE",        True,  True,  "Eligible topic partition leaders are not available."),
    (  84, "ELECTION_NOT_NEEDED",                   True,  True,  "Leader election not needed for topic partition."),
    (  85, "NO_REASSIGNMENT_IN_PROGRESS",           False, False, "No partition reassignment is in progress."),
    (  86, "GROUP_SUBSCRIBED_TO_TOPIC",             False, False, "Deleting offsets of a topic is forbidden while the consumer group is actively subscribed to it."),
    (  87, "INVALID_RECORD",                        False, False, "This record has failed the validation on broker and hence will be rejected."),
    (  88, "UNSTABLE_OFFSET_COMMIT",                True,  False, "There are unstable offsets that need to be cleared."),
    (  89, "THROTTLING_QUOTA_EXCEEDED",             True,  False, "The throttling quota has been exceeded."),
    (  90, "PRODUCER_FENCED",                       False, False, "There is a newer producer with the same transactionalId which fences the current one."),
    (  91, "RESOURCE_NOT_FOUND",                    False, False, "A request illegally referred to a resource that does not exist."),
    (  92, "DUPLICATE_RESOURCE",                    False, False, "A request illegally referred to the same resource twice."),
    (  93, "UNACCEPTABLE_CREDENTIAL",               False, False, "Requested credential would not meet criteria for acceptability."),
    (  94, "INCONSISTENT_VOTER_SET",                False, False, "Indicates that the either the sender or recipient of a voter-only request is not one of the expected voters."),
    (  95, "INVALID_UPDATE_VERSION",                False, False, "The given update version was invalid."),
    (  96, "FEATURE_UPDATE_FAILED",                 False, False, "Unable to update finalized features due to an unexpected server error."),
    (  97, "PRINCIPAL_DESERIALIZATION_FAILURE",     False, False, "Request principal deserialization failed during forwarding. This indicates an internal error on the broker cluster security setup."),
    (  98, "SNAPSHOT_NOT_FOUND",                    False, False, "Requested snapshot was not found."),
    ( 100, "UNKNOWN_TOPIC_ID",                      True,  True,  "This server does not host this topic ID."),
    ( 101, "DUPLICATE_BROKER_REGISTRATION",         False, False, "This broker ID is already in use."),
    ( 102, "BROKER_ID_NOT_REGISTERED",              False, False, "The given broker ID was not registered."),
    ( 103, "INCONSISTENT_TOPIC_ID",                 True,  True,  "The log's topic ID did not match the topic ID in the request."),
    ( 104, "INCONSISTENT_CLUSTER_ID",               False, False, "The clusterId in the request does not match that found on the server."),
    ( 105, "TRANSACTIONAL_ID_NOT_FOUND",            False, False, "The transactionalId could not be found."),
    ( 106, "FETCH_SESSION_TOPIC_ID_ERROR",          True,  False, "The fetch session encountered inconsistent topic ID usage."),
    ( 107, "INELIGIBLE_REPLICA",                    False, False, "The new ISR contains at least one ineligible replica."),
    ( 108, "NEW_LEADER_ELECTED",                    False, False, "The AlterPartition request successfully updated the partition state but the leader has changed."),
    ( 109, "OFFSET_MOVED_TO_TIERED_STORAGE",        False, False, "The requested offset is moved to tiered storage."),
    ( 110, "FENCED_MEMBER_EPOCH",                   False, False, "The member epoch is fenced by the group coordinator. The member must abandon all its partitions and rejoin."),
    ( 111, "UNRELEASED_INSTANCE_ID",                False, False, "The instance ID is still used by another member in the consumer group. That member must leave first."),
    ( 112, "UNSUPPORTED_ASSIGNOR",                  False, False, "The assignor or its version range is not supported by the consumer group."),
    ( 113, "STALE_MEMBER_EPOCH",                    False, False, "The member epoch is stale. The member must retry after receiving its updated member epoch via the ConsumerGroupHeartbeat API."),
    ( 114, "MISMATCHED_ENDPOINT_TYPE",              False, False, "The request was sent to an endpoint of the wrong type."),
    ( 115, "UNSUPPORTED_ENDPOINT_TYPE",             False, False, "This endpoint type is not supported yet."),
    ( 116, "UNKNOWN_CONTROLLER_ID",                 False, False, "This controller ID is not known."),
    ( 117, "UNKNOWN_SUBSCRIPTION_ID",               False, False, "Client sent a push telemetry request with an invalid or outdated subscription ID."),
    ( 118, "TELEMETRY_TOO_LARGE",                   False, False, "Client sent a push telemetry request larger than the maximum size the broker will accept."),
    ( 119, "INVALID_REGISTRATION",                  False, False, "The controller has considered the broker registration to be invalid."),
    ( 120, "TRANSACTION_ABORTABLE",                 False, False, "The server encountered an error with the transaction. The client can abort the transaction to continue using this transactional ID."),
    ( 121, "INVALID_RECORD_STATE",                  False, False, "The record state is invalid. The acknowledgement of delivery could not be completed."),
    ( 122, "SHARE_SESSION_NOT_FOUND",               True,  False, "The share session was not found."),
    ( 123, "INVALID_SHARE_SESSION_EPOCH",           True,  False, "The share session epoch is invalid."),
    ( 124, "FENCED_STATE_EPOCH",                    False, False, "The share coordinator rejected the request because the share-group state epoch did not match."),
    ( 125, "INVALID_VOTER_KEY",                     False, False, "The voter key doesn't match the receiving replica's key."),
    ( 126, "DUPLICATE_VOTER",                       False, False, "The voter is already part of the set of voters."),
    ( 127, "VOTER_NOT_FOUND",                       False, False, "The voter is not part of the set of voters."),
    ( 128, "INVALID_REGULAR_EXPRESSION",            False, False, "The regular expression is not valid."),
)
# fmt: on
_FATAL = frozenset(
    {
        "CLUSTER_AUTHORIZATION_FAILED",
        "ILLEGAL_SASL_STATE",
        "INVALID_TXN_STATE",
        "PRODUCER_FENCED",
        "SASL_AUTHENTICATION_FAILED",
        "SECURITY_DISABLED",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "TRANSACTION_COORDINATOR_FENCED",
        "UNSUPPORTED_COMPRESSION_TYPE",
        "UNSUPPORTED_FOR_MESSAGE_FORMAT",
        "UNSUPPORTED_SASL_MECHANISM",
        "UNSUPPORTED_VERSION",
    }
)
_ABORTABLE = frozenset(
    {
        "CORRUPT_MESSAGE",
        "FENCED_INSTANCE_ID",
        "GROUP_AUTHORIZATION_FAILED",
        "ILLEGAL_GENERATION",
        "INVALID_PRODUCER_EPOCH",
        "INVALID_PRODUCER_ID_MAPPING",
        "INVALID_RECORD",
        "INVALID_REQUIRED_ACKS",
        "INVALID_TIMESTAMP",
        "INVALID_TOPIC_EXCEPTION",
        "MESSAGE_TOO_LARGE",
        "OPERATION_NOT_ATTEMPTED",
        "OUT_OF_ORDER_SEQUENCE_NUMBER",
        "POLICY_VIOLATION",
        "REBALANCE_IN_PROGRESS",
        "RECORD_LIST_TOO_LARGE",
        "TOPIC_AUTHORIZATION_FAILED",
        "TRANSACTION_ABORTABLE",
        "UNKNOWN_MEMBER_ID",
        "UNKNOWN_PRODUCER_ID",
        "UNSTABLE_OFFSET_COMMIT",
    }
)

_REFUSES_RECORDS = frozenset({"INVALID_RECORD", "INVALID_TIMESTAMP"})

ERRORS: dict[int, ErrorInfo] = {
    code: ErrorInfo(
        code=code,
        name=name,
        message=message,
        retriable=retriable,
        invalid_metadata=invalid_metadata,
        abortable=name in _ABORTABLE,
        fatal=name in _FATAL,
        refuses_records=name in _REFUSES_RECORDS,
    )
    for code, name, retriable, invalid_metadata, message in _TABLE
}
ERRORS[ErrorCode.EXPECTED_OFFSET_MISMATCH] = ErrorInfo(
    code=ErrorCode.EXPECTED_OFFSET_MISMATCH,
    name="EXPECTED_OFFSET_MISMATCH",
    message=(
        "The batch's expected offset (its baseOffset) is not the partition's log end offset; "
        "nothing was appended. The response's BaseOffset holds the log end offset."
    ),
    retriable=False,
    invalid_metadata=False,
    abortable=True,
    fatal=False,
)


def error_info(code: int) -> ErrorInfo:
    """The table row for `code`; an unknown code gets a row saying so."""
    info = ERRORS.get(code)
    if info is None:
        return ErrorInfo(
            code=code,
            name=f"UNKNOWN_ERROR_CODE_{code}",
            message=f"error code {code} is not in this client's table",
            retriable=False,
            invalid_metadata=False,
            abortable=False,
            fatal=False,
        )
    return info


__all__ = ["ERRORS", "ErrorCode", "ErrorInfo", "error_info"]
