"""trio-kafka's exception tree, split by what the caller must do (see `trio_kafka.errors`),
and `error_for_code`, which picks the exception for a broker's error code from the table.
"""

from __future__ import annotations

from typing import Any

from trio_kafka.errors._table import ErrorCode, error_info


def _rebuilt(cls: type[KafkaError], args: tuple[Any, ...], state: dict[str, Any]) -> KafkaError:
    """`KafkaError.__reduce__`'s other half: the error as it was, without its
    `__init__` (whose arguments are not its `args`)."""
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(state)
    return error


class KafkaError(Exception):
    """The root of every error trio-kafka raises.

    Every one pickles and unpickles as it was (its message and attributes), so it can
    cross a process boundary (a `ProcessPoolExecutor`, `multiprocessing`): Python's
    default rebuilds an exception by calling its class with its `args`, which fails for
    the many whose `__init__` takes keyword arguments (`UnknownTopicError(topic=...)`)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuilt, (type(self), self.args, self.__dict__))


class RetriableError(KafkaError):
    """Transient: retrying the same operation may succeed."""


class AbortableError(KafkaError):
    """Abort the current transaction, then go on."""


class FatalError(KafkaError):
    """The producer cannot continue: close it."""


class AmbiguousError(KafkaError):
    """The operation may or may not have taken effect on the broker."""


class ConfigError(KafkaError, ValueError):
    """A configuration value is wrong or contradicts another one."""


class ProtocolError(KafkaError):
    """Bytes that do not decode as the Kafka protocol says they must.

    `message_name`, `version`, `field` and `offset` say where decoding stopped.
    """

    def __init__(
        self,
        reason: str,
        *,
        message_name: str | None = None,
        version: int | None = None,
        field: str | None = None,
        offset: int | None = None,
    ) -> None:
        self.reason = reason
        self.message_name = message_name
        self.version = version
        self.field = field
        self.offset = offset
        where: list[str] = []
        if message_name is not None:
            where.append(message_name if version is None else f"{message_name} v{version}")
        if field is not None:
            where.append(f"field {field}")
        if offset is not None:
            where.append(f"byte offset {offset}")
        super().__init__(f"{reason} ({', '.join(where)})" if where else reason)


class CorruptRecordError(KafkaError):
    """A record batch whose length, CRC or contents are wrong."""


class UnsupportedCodecError(CorruptRecordError):
    """A compression codec that is unknown or whose optional library is not installed."""


class BrokerConnectionError(RetriableError):
    """A broker could not be reached; no request was sent on this connection."""


class ConnectionLostError(AmbiguousError):
    """The connection dropped while the request was in flight: it may have been processed."""


class RequestTimeoutError(AmbiguousError):
    """No response within the request timeout: the request may have been processed."""


class AuthenticationError(FatalError):
    """SASL or TLS authentication failed."""


class RequestTooLargeError(FatalError):
    """A broker closed the connection at a request, several times in a row, and the
    request was larger than a broker may take (its `socket.request.max.bytes`, 104,857,600
    bytes unless set otherwise; past it a broker closes the connection without an
    answer): `max_request_size` is above the broker's limit. `request_size` is the
    request's size in bytes."""

    def __init__(self, message: str, *, request_size: int = 0) -> None:
        super().__init__(message)
        self.request_size = request_size


class BufferFullError(KafkaError):
    """`send()` waited `max_block` seconds for buffer memory and none came free.

    From `send_many`, `appended` is what the call did append before the buffer filled
    (a `BulkDelivery`: await it, or read its outcomes); the rest was not appended.
    None from `send()`.
    """

    def __init__(self, message: str, *, appended: Any = None) -> None:
        super().__init__(message)
        self.appended = appended


class ProducerClosedError(KafkaError):
    """The producer was closed; nothing more can be sent with it."""


class DeliveryTimeoutError(KafkaError):
    """`delivery_timeout` expired before the record was sent: it was not written."""


class AmbiguousDeliveryTimeoutError(AmbiguousError):
    """`delivery_timeout` expired after a request carrying the record had left."""


class CasNotSupportedError(FatalError):
    """A write with an expected offset to a broker or topic without the CAS check."""


class ConcurrentWriteError(KafkaError):
    """Someone else wrote at the offset a conditional write expected."""

    def __init__(self, message: str, *, offset: int, foreign_record: object = None) -> None:
        super().__init__(message)
        self.offset = offset
        self.foreign_record = foreign_record


class WriterFencedError(ConcurrentWriteError):
    """A transactional `ConditionalWriter` is dead: a newer writer of the log opened (and
    fenced it), or its producer failed for good. Nothing of the append that raised it was
    committed, and every later `append` or `read_to_end` of this writer raises it again at
    once. Open a new writer (it fences the newer one in turn) and read the log from the
    dead writer's `last_read_end`. A `ConcurrentWriteError`, so code that catches that
    still sees a failed append; catch this first to tell "reopen" from "catch up and retry".
    """


class BrokerError(KafkaError):
    """An error code a broker answered with."""

    def __init__(self, code: int, message: str | None = None) -> None:
        self.info = error_info(code)
        self.code = code
        self.error_message = message
        text = f"[{self.info.name}] {message or self.info.message}"
        super().__init__(text)

    @property
    def name(self) -> str:
        return self.info.name


class RetriableBrokerError(BrokerError, RetriableError):
    """A broker error the Java client retries."""


class AbortableBrokerError(BrokerError, AbortableError):
    """A broker error that aborts the current transaction."""


class FatalBrokerError(BrokerError, FatalError):
    """A broker error after which the producer must be closed."""


class ProducerFencedError(FatalBrokerError):
    """A newer producer with the same transactional id took over (PRODUCER_FENCED)."""


class ExpectedOffsetMismatchError(AbortableBrokerError):
    """The CAS check failed: the partition's log end offset is not what the write expected."""

    def __init__(
        self, message: str | None = None, *, expected_offset: int, log_end_offset: int
    ) -> None:
        super().__init__(ErrorCode.EXPECTED_OFFSET_MISMATCH, message)
        self.expected_offset = expected_offset
        self.log_end_offset = log_end_offset


#: How an administrator grants an ACL, for the messages below (the principal is the
#: client's: its SASL user name, or its TLS certificate's subject).
_GRANT = "kafka-acls.sh --bootstrap-server <brokers> --add --allow-principal User:<principal>"


class TopicAuthorizationError(AbortableBrokerError):
    """The brokers refuse this client's principal a topic (TOPIC_AUTHORIZATION_FAILED):
    it lacks an ACL. Nothing of the records was written; `topic` names the topic. Waiting
    cannot help until an administrator grants the ACL, and other topics go on. In a
    transaction it is abortable (as in Java): abort, then go on without the topic.

    Kafka answers it in Metadata when the principal may not DESCRIBE the topic (then,
    with `allow.everyone.if.no.acl.found=false`, whether or not the topic exists), and
    in Produce when it may describe but not WRITE it. The message says which, and how an
    administrator grants it."""

    def __init__(
        self, message: str | None = None, *, topic: str | None = None, metadata: bool = False
    ) -> None:
        if message is None and topic is not None:
            operations = "--operation Write --operation Describe"
            if metadata:
                message = (
                    f"not authorized to describe topic {topic!r}: the brokers answer "
                    "TOPIC_AUTHORIZATION_FAILED for it in Metadata (a principal without "
                    "DESCRIBE on a topic is told this whether or not the topic exists)"
                )
            else:
                message = (
                    f"not authorized to write to topic {topic!r}: the broker refused the "
                    "records with TOPIC_AUTHORIZATION_FAILED (the principal may describe "
                    "the topic but not WRITE it)"
                )
            message += (
                ". Producing needs the WRITE and DESCRIBE operations on the topic; an "
                f"administrator grants them: `{_GRANT} {operations} --topic {topic}`"
            )
        super().__init__(ErrorCode.TOPIC_AUTHORIZATION_FAILED, message)
        self.topic = topic


class TransactionalIdAuthorizationError(FatalBrokerError):
    """The brokers refuse this client's principal its transactional id
    (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): a transactional producer needs the WRITE and
    DESCRIBE operations on it. Fatal, as in Java: close the producer; a new one works
    once an administrator grants the ACL. `transactional_id` names it."""

    def __init__(self, transactional_id: str | None, during: str) -> None:
        if transactional_id is None:
            message = f"not authorized to use a transactional id ({during})"
        else:
            message = (
                f"not authorized to use transactional id {transactional_id!r} ({during}): "
                "a transactional producer needs the WRITE and DESCRIBE operations on its "
                f"transactional id; an administrator grants them: `{_GRANT} --operation "
                f"Write --operation Describe --transactional-id {transactional_id}`"
            )
        super().__init__(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, message)
        self.transactional_id = transactional_id


def idempotence_refused() -> FatalBrokerError:
    """CLUSTER_AUTHORIZATION_FAILED at an idempotent producer's InitProducerId."""
    return FatalBrokerError(
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        "not authorized to start an idempotent producer: the broker refused InitProducerId. "
        "Since Kafka 3.0 (KIP-679) an idempotent producer needs the WRITE operation on at "
        "least one topic, or IDEMPOTENT_WRITE on the cluster; an administrator grants it "
        f"(`{_GRANT} --operation Write --topic <topic>`), or set enable_idempotence=False "
        "(and give up its guarantees)",
    )


def refuses_records(error: BaseException | None) -> bool:
    """`error` is a broker's refusal of a batch for what its records hold
    (`ErrorInfo.refuses_records`: INVALID_RECORD, INVALID_TIMESTAMP): sent again, the
    same records meet it again."""
    return isinstance(error, BrokerError) and error.info.refuses_records


def error_for_code(code: int, message: str | None = None) -> BrokerError:
    """The exception for an error code from a response (`code` must not be NONE)."""
    if code == ErrorCode.NONE:
        raise ValueError("error code NONE is not an error")
    info = error_info(code)
    if code == ErrorCode.PRODUCER_FENCED:
        return ProducerFencedError(code, message)
    if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED:
        return TopicAuthorizationError(message)
    if info.fatal:
        return FatalBrokerError(code, message)
    if info.retriable:
        return RetriableBrokerError(code, message)
    if info.abortable:
        return AbortableBrokerError(code, message)
    return BrokerError(code, message)


class UnsupportedRequestError(ProtocolError):
    """A request whose API key or version this side does not speak.

    It carries what the header said, so a broker can still answer with
    UNSUPPORTED_VERSION under the right correlation id.
    """

    def __init__(self, reason: str, *, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(reason, message_name=f"api key {api_key}", version=api_version)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class UnknownTopicError(RetriableError):
    """The topic is not in the cluster's metadata; nothing was written.

    Two users, one class: the producer core raises it when it has no metadata for the
    topic yet (the driver fetches metadata and appends again: hence retriable), and the
    network layer raises it after waiting `max_block` seconds (it does not exist, or we
    may not see it). `topic` names it; the message defaults to saying so.
    """

    def __init__(self, message: str | None = None, *, topic: str) -> None:
        super().__init__(message if message is not None else f"no metadata for topic {topic!r} yet")
        self.topic = topic


class InvalidTopicError(KafkaError, ValueError):
    """A topic name Kafka cannot hold (empty, ".", "..", longer than 249 characters, or
    characters outside [a-zA-Z0-9._-]), or a topic the broker says is invalid
    (INVALID_TOPIC_EXCEPTION). Nothing was written; `topic` names it."""

    def __init__(self, message: str, *, topic: str) -> None:
        super().__init__(message)
        self.topic = topic


class RecordTooLargeError(KafkaError):
    """A record bigger than `max_request_size` or `buffer_memory`: never sendable."""


class InvalidPartitionError(KafkaError):
    """An explicit partition the topic does not have."""


class OffsetOutOfRangeError(BrokerError):
    """A read asked for an offset the partition does not hold (OFFSET_OUT_OF_RANGE):
    below the log start offset (deleted by retention) or past the log end offset."""

    def __init__(
        self,
        message: str | None = None,
        *,
        offset: int,
        log_start_offset: int = -1,
        log_end_offset: int = -1,
    ) -> None:
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class ReadTimeoutError(RetriableError):
    """A read made no progress within its timeout (the partition has no leader, the
    brokers do not answer, or the records asked for have not been written)."""


# --- transactions (raised by `trio_kafka.core.TransactionManager`) -----------------


class IllegalTransactionStateError(KafkaError):
    """A call or an event that the transaction state machine does not allow now.

    `from_state` is the state the manager was in, `to_state` the one asked for (None
    when the call was refused before any transition was attempted).
    """

    def __init__(self, message: str, *, from_state: object, to_state: object = None) -> None:
        super().__init__(message)
        self.from_state = from_state
        self.to_state = to_state


class TransactionAbortableError(AbortableError):
    """The transaction cannot commit: call `abort()`, then begin a new one.

    `cause` is the error that made it so (often a `BrokerError`).
    """

    def __init__(self, message: str, cause: KafkaError | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class TransactionTimedOutError(TransactionAbortableError):
    """INVALID_PRODUCER_EPOCH: the broker most likely aborted this transaction because
    it ran longer than `transaction_timeout`, bumping the epoch (KIP-588). Abortable:
    `abort()` re-initialises with the old epoch, which the coordinator accepts after a
    timeout and refuses (PRODUCER_FENCED, fatal) if another producer took over."""


class TransactionAbortedError(TransactionAbortableError):
    """A request of this transaction was dropped because the transaction is aborting."""


class TransactionOutcomeUnknownError(AmbiguousError):
    """EndTxn left but no answer came back (timeout, connection lost): the transaction
    may have been committed or not. The manager re-initialises (epoch bump) before any
    new transaction, so the late EndTxn can never decide a later one (KAFKA-17754);
    await `init()` before the next `begin()`. Check the output to learn the outcome."""

    def __init__(self, message: str, cause: KafkaError | None = None) -> None:
        super().__init__(message)
        self.cause = cause
