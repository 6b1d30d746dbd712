"""The error table matches Kafka's, and codes map to the right branch of the tree."""

from __future__ import annotations

import csv
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
    import pickle

    classes = [getattr(errors, name) for name in errors.__all__]
    homes = {c.__name__: c.__module__ for c in classes if isinstance(c, type)}
    assert set(homes.values()) == {"trio_kafka.errors"}, homes
    error = pickle.loads(pickle.dumps(errors.error_for_code(ErrorCode.PRODUCER_FENCED, "x")))
    assert type(error) is errors.ProducerFencedError
    assert error.code == ErrorCode.PRODUCER_FENCED
