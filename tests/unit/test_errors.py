"""The error table matches Kafka's, and codes map to the right branch of the tree."""

from __future__ import annotations

import csv
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

from trio_kafka import errors
from trio_kafka.errors import ErrorCode


def _rows(kafka_protocol_dir: Path) -> list[dict[str, str]]:
    with (kafka_protocol_dir / "error-codes.csv").open(newline="") as f:
        return list(csv.DictReader(f))


def test_table_matches_the_official_csv(kafka_protocol_dir: Path) -> None:
    rows = _rows(kafka_protocol_dir)
    assert len(rows) == 129  # every code of the table, NONE included
    for row in rows:
        code = int(row["code"])
        info = errors.ERRORS[code]
        assert info.name == row["name"]
        assert info.message == row["message"]
        assert info.retriable == (row["retriable"] == "true")
        assert info.invalid_metadata == (row["invalid_metadata"] == "true")
        assert ErrorCode[row["name"]] == code
    ours = {info.code for info in errors.ERRORS.values()} - {int(r["code"]) for r in rows}
    assert ours == {ErrorCode.EXPECTED_OFFSET_MISMATCH}


def test_expected_offset_mismatch_is_outside_kafkas_range(kafka_protocol_dir: Path) -> None:
    kafka_codes = {int(r["code"]) for r in _rows(kafka_protocol_dir)}
    assert ErrorCode.EXPECTED_OFFSET_MISMATCH not in kafka_codes
    assert max(kafka_codes) + 1000 < ErrorCode.EXPECTED_OFFSET_MISMATCH
    assert ErrorCode.EXPECTED_OFFSET_MISMATCH < 2**15  # an int16 on the wire


@pytest.mark.parametrize(
    ("code", "branch"),
    [
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, errors.RetriableError),
        (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, errors.RetriableError),
        (ErrorCode.PRODUCER_FENCED, errors.FatalError),
        (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, errors.FatalError),
        (ErrorCode.TRANSACTION_ABORTABLE, errors.AbortableError),
        (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, errors.AbortableError),
        (ErrorCode.EXPECTED_OFFSET_MISMATCH, errors.AbortableError),
    ],
)
def test_codes_land_on_the_branch_that_says_what_to_do(code: int, branch: type) -> None:
    exc = errors.error_for_code(code, "detail")
    assert isinstance(exc, branch)
    assert isinstance(exc, errors.BrokerError)
    assert exc.code == code
    assert errors.ERRORS[code].name in str(exc)


def test_producer_fenced_has_its_own_class() -> None:
    assert isinstance(errors.error_for_code(ErrorCode.PRODUCER_FENCED), errors.ProducerFencedError)


def test_no_code_is_both_fatal_and_abortable_or_retriable() -> None:
    for info in errors.ERRORS.values():
        assert not (info.fatal and info.abortable), info.name
        assert not (info.fatal and info.retriable), info.name


def test_unknown_code_still_makes_an_error_that_names_it() -> None:
    exc = errors.error_for_code(4242)
    assert "4242" in str(exc)


def test_none_is_not_an_error() -> None:
    with pytest.raises(ValueError, match="NONE"):
        errors.error_for_code(ErrorCode.NONE)


def test_protocol_error_names_where_decoding_stopped() -> None:
    exc = errors.ProtocolError(
        "truncated", message_name="ProduceRequest", version=9, field="acks", offset=17
    )
    assert str(exc) == "truncated (ProduceRequest v9, field acks, byte offset 17)"


def test_expected_offset_mismatch_carries_the_log_end_offset() -> None:
    exc = errors.ExpectedOffsetMismatchError(expected_offset=5, log_end_offset=7)
    assert exc.log_end_offset == 7
    assert exc.expected_offset == 5
    assert exc.code == ErrorCode.EXPECTED_OFFSET_MISMATCH


def test_every_public_name_says_it_lives_in_trio_kafka_errors() -> None:
    classes = [getattr(errors, name) for name in errors.__all__]
    homes = {c.__name__: c.__module__ for c in classes if isinstance(c, type)}
    assert set(homes.values()) == {"trio_kafka.errors"}, homes
    error = pickle.loads(pickle.dumps(errors.error_for_code(ErrorCode.PRODUCER_FENCED, "x")))
    assert type(error) is errors.ProducerFencedError
    assert error.code == ErrorCode.PRODUCER_FENCED


#: Errors whose `__init__` needs more than a message, built as the library builds them.
_BUILT: dict[str, Callable[[], errors.KafkaError]] = {
    "BrokerError": lambda: errors.BrokerError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "moved"),
    "RetriableBrokerError": lambda: errors.RetriableBrokerError(ErrorCode.REQUEST_TIMED_OUT),
    "AbortableBrokerError": lambda: errors.AbortableBrokerError(ErrorCode.INVALID_RECORD, "x"),
    "FatalBrokerError": lambda: errors.FatalBrokerError(ErrorCode.INVALID_TXN_STATE),
    "ProducerFencedError": lambda: errors.ProducerFencedError(ErrorCode.PRODUCER_FENCED),
    "ExpectedOffsetMismatchError": lambda: errors.ExpectedOffsetMismatchError(
        "moved on", expected_offset=7, log_end_offset=9
    ),
    "TopicAuthorizationError": lambda: errors.TopicAuthorizationError(topic="t", metadata=True),
    "TransactionalIdAuthorizationError": lambda: errors.TransactionalIdAuthorizationError(
        "tx", "InitProducerId"
    ),
    "OffsetOutOfRangeError": lambda: errors.OffsetOutOfRangeError(
        offset=5, log_start_offset=10, log_end_offset=20
    ),
    "UnknownTopicError": lambda: errors.UnknownTopicError(topic="t"),
    "InvalidTopicError": lambda: errors.InvalidTopicError("bad name", topic="a b"),
    "ProtocolError": lambda: errors.ProtocolError("short", message_name="Fetch", version=4),
    "UnsupportedRequestError": lambda: errors.UnsupportedRequestError(
        "no such key", api_key=99, api_version=0, correlation_id=3
    ),
    "RequestTooLargeError": lambda: errors.RequestTooLargeError("big", request_size=2**21),
    "BufferFullError": lambda: errors.BufferFullError("full", appended=3),
    "ConcurrentWriteError": lambda: errors.ConcurrentWriteError("taken", offset=4),
    "WriterFencedError": lambda: errors.WriterFencedError("fenced", offset=4),
    "IllegalTransactionStateError": lambda: errors.IllegalTransactionStateError(
        "cannot", from_state="READY", to_state="COMMITTING"
    ),
    "TransactionAbortableError": lambda: errors.TransactionAbortableError(
        "abort", errors.TopicAuthorizationError(topic="t")
    ),
    "TransactionAbortedError": lambda: errors.TransactionAbortedError("aborted"),
    "TransactionTimedOutError": lambda: errors.TransactionTimedOutError("timed out"),
    "TransactionOutcomeUnknownError": lambda: errors.TransactionOutcomeUnknownError(
        "unknown", errors.RequestTimeoutError("no answer")
    ),
}


def _every_error_class() -> list[type[errors.KafkaError]]:
    return sorted(
        (
            obj
            for name in errors.__all__
            if isinstance(obj := getattr(errors, name), type) and issubclass(obj, errors.KafkaError)
        ),
        key=lambda cls: cls.__name__,
    )


@pytest.mark.parametrize("cls", _every_error_class(), ids=lambda cls: cls.__name__)
def test_every_error_crosses_a_process_boundary_as_it_was(cls: type[errors.KafkaError]) -> None:
    """pickle (what a ProcessPoolExecutor or multiprocessing sends between processes)
    keeps the class, the message and every attribute. Python's default calls the class
    with the error's `args`, which failed for every error whose `__init__` takes keyword
    arguments (`UnknownTopicError(topic=...)`: "missing 1 required keyword-only
    argument")."""
    builder = _BUILT.get(cls.__name__)
    if builder is None:
        # Only a message: anything else must be in _BUILT, or this fails.
        error = cls("what went wrong")
    else:
        error = builder()
    assert type(error) is cls
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls
    assert (str(again), again.args) == (str(error), error.args)
    assert set(vars(again)) == set(vars(error))
    for name, value in vars(error).items():
        other = getattr(again, name)
        if isinstance(value, BaseException):
            assert (type(other), str(other)) == (type(value), str(value))
        else:
            assert other == value, name
