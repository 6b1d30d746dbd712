"""Kafka's error codes and trio-kafka's exception tree.

Every exception raised by trio-kafka derives from `KafkaError` and says, by its place in
the tree, what the caller must do about it:

- `RetriableError`: transient; the producer retries it by itself within its timeouts.
- `AbortableError`: abort the current transaction and go on with the next one.
- `FatalError`: the producer cannot go on (fenced, unauthorised): close it.
- `AmbiguousError`: the write may or may not have happened (a timeout after the request
  left, a connection lost with the request in flight). Never reported as "failed".

Anything else (`ConfigError`, `ProtocolError`, `CorruptRecordError`, a plain
`BrokerError`) is a definite failure: the write did not happen.

`ErrorCode` lists every code of Kafka's error table (`ERRORS` holds its name, message,
retriable and needs-metadata-refresh columns) plus our own `EXPECTED_OFFSET_MISMATCH` for
the expected-offset (CAS) extension. `error_for_code` turns a code from a response into the
right exception.
"""

from __future__ import annotations

from trio_kafka.errors._exceptions import (
    AbortableBrokerError,
    AbortableError,
    AmbiguousDeliveryTimeoutError,
    AmbiguousError,
    AuthenticationError,
    BrokerConnectionError,
    BrokerError,
    BufferFullError,
    CasNotSupportedError,
    ConcurrentWriteError,
    ConfigError,
    ConnectionLostError,
    CorruptRecordError,
    DeliveryTimeoutError,
    ExpectedOffsetMismatchError,
    FatalBrokerError,
    FatalError,
    IllegalTransactionStateError,
    InvalidPartitionError,
    InvalidTopicError,
    KafkaError,
    OffsetOutOfRangeError,
    ProducerClosedError,
    ProducerFencedError,
    ProtocolError,
    ReadTimeoutError,
    RecordTooLargeError,
    RequestTimeoutError,
    RequestTooLargeError,
    RetriableBrokerError,
    RetriableError,
    TopicAuthorizationError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionalIdAuthorizationError,
    TransactionOutcomeUnknownError,
    TransactionTimedOutError,
    UnknownTopicError,
    UnsupportedCodecError,
    UnsupportedRequestError,
    WriterFencedError,
    error_for_code,
    idempotence_refused,
    refuses_records,
)
from trio_kafka.errors._table import ERRORS, ErrorCode, ErrorInfo, error_info

__all__ = [
    "ERRORS",
    "AbortableBrokerError",
    "AbortableError",
    "AmbiguousDeliveryTimeoutError",
    "AmbiguousError",
    "AuthenticationError",
    "BrokerConnectionError",
    "BrokerError",
    "BufferFullError",
    "CasNotSupportedError",
    "ConcurrentWriteError",
    "ConfigError",
    "ConnectionLostError",
    "CorruptRecordError",
    "DeliveryTimeoutError",
    "ErrorCode",
    "ErrorInfo",
    "ExpectedOffsetMismatchError",
    "FatalBrokerError",
    "FatalError",
    "IllegalTransactionStateError",
    "InvalidPartitionError",
    "InvalidTopicError",
    "KafkaError",
    "OffsetOutOfRangeError",
    "ProducerClosedError",
    "ProducerFencedError",
    "ProtocolError",
    "ReadTimeoutError",
    "RecordTooLargeError",
    "RequestTimeoutError",
    "RequestTooLargeError",
    "RetriableBrokerError",
    "RetriableError",
    "TopicAuthorizationError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionOutcomeUnknownError",
    "TransactionTimedOutError",
    "TransactionalIdAuthorizationError",
    "UnknownTopicError",
    "UnsupportedCodecError",
    "UnsupportedRequestError",
    "WriterFencedError",
    "error_for_code",
    "error_info",
    "idempotence_refused",
    "refuses_records",
]

# The public home of every name is `trio_kafka.errors` (reprs, tracebacks, pickles and
# docs say so), whichever private module defines it.
for _name in __all__:
    _value = globals()[_name]
    if getattr(_value, "__module__", "").startswith("trio_kafka.errors."):
        _value.__module__ = __name__
del _name, _value
