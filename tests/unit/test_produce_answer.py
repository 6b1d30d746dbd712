"""`read_produce_answer` (the producer's reader of Produce responses) gives what the
generic codec gives, for every Produce version: field for field on any response the
codec can encode, and the codec's `ProtocolError` on any frame it refuses (a strict
prefix, a flipped byte). Usual answers (no per-record errors, no tagged fields) are read
without the codec at all; the others go through it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.test_protocol_roundtrip import message_strategy
from trio_kafka.errors import ProtocolError
from trio_kafka.protocol import _produce, decode_response, encode_response, read_produce_answer
from trio_kafka.protocol._produce import NO_LEADER, PartitionAnswer, answer_of
from trio_kafka.protocol.messages.produce import (
    BatchIndexAndErrorMessage,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)

VERSIONS = range(ProduceResponse.MIN_VERSION, ProduceResponse.MAX_VERSION + 1)
# The monkeypatch is undone after each example (its own `context()`). Derandomized and
# without the example database: the same examples on every machine, so a damaged frame
# the fast reader mishandles fails every run, not one fresh clone's (the varint case
# below was found that way); the explicit tests hold the cases found so far.
_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _frame(response: ProduceResponse, version: int, correlation_id: int = 7) -> bytes:
    return encode_response(response, version=version, correlation_id=correlation_id)[4:]


def _generic(frame: bytes, version: int) -> Any:
    try:
        correlation_id, response = decode_response(ProduceRequest, version, frame)
    except ProtocolError as exc:
        return ("refused", str(exc))
    return correlation_id, answer_of(response)


def _fast(frame: bytes, version: int) -> Any:
    try:
        return read_produce_answer(frame, version)
    except ProtocolError as exc:
        return ("refused", str(exc))


def _no_codec(*args: Any) -> Any:
    raise AssertionError("the usual answer went to the generic codec")


def _usual(version: int) -> st.SearchStrategy[ProduceResponse]:
    """Answers with no per-record errors and no tagged fields: the reader's own path.
    Some names and messages long enough that their lengths take two varint bytes."""
    text = st.text(st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
        ["a" * 130, "\u00fc" * 70]  # 130 and 140 bytes
    )
    int64 = st.integers(-(2**63), 2**63 - 1)
    partition = st.builds(
        PartitionProduceResponse,
        index=st.integers(-(2**31), 2**31 - 1),
        error_code=st.integers(-(2**15), 2**15 - 1),
        base_offset=int64,
        log_append_time_ms=int64 if version >= 2 else st.just(-1),
        log_start_offset=int64 if version >= 5 else st.just(-1),
        error_message=st.none() | text if version >= 8 else st.none(),
    )
    topic = st.builds(
        TopicProduceResponse,
        name=text,
        partition_responses=st.lists(partition, max_size=4),
    )
    return st.builds(
        ProduceResponse,
        responses=st.lists(topic, max_size=3),
        throttle_time_ms=st.integers(-(2**31), 2**31 - 1) if version >= 1 else st.just(0),
    )


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
@_SETTINGS
def test_usual_answers_are_read_without_the_codec_and_equal_its_reading(
    version: int, data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    response = data.draw(_usual(version))
    frame = _frame(response, version)
    expected = _generic(frame, version)

    with monkeypatch.context() as patch:
        patch.setattr(_produce, "decode_response", _no_codec)
        assert _fast(frame, version) == expected


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
@_SETTINGS
def test_any_answer_equals_the_codecs_reading(version: int, data: st.DataObject) -> None:
    """Responses as the round-trip tests make them: per-record errors, leader hints,
    node endpoints, unknown tagged fields (the generic path, converted)."""
    response = data.draw(message_strategy(ProduceResponse, version))
    frame = _frame(response, version)
    assert _fast(frame, version) == _generic(frame, version)


@pytest.mark.parametrize("version", VERSIONS)
@given(data=st.data())
@_SETTINGS
def test_a_damaged_frame_is_refused_or_read_as_the_codec_does(
    version: int, data: st.DataObject
) -> None:
    response = data.draw(_usual(version) | message_strategy(ProduceResponse, version))
    frame = bytearray(_frame(response, version))
    cut = data.draw(st.integers(0, len(frame) - 1))
    prefix = bytes(frame[:cut])
    assert _fast(prefix, version)[0] == "refused"
    assert _fast(prefix, version) == _generic(prefix, version)
    at = data.draw(st.integers(0, len(frame) - 1))
    frame[at] = data.draw(st.integers(0, 255))
    frame += data.draw(st.binary(max_size=2))
    assert _fast(bytes(frame), version) == _generic(bytes(frame), version)


def test_what_the_producer_reads_of_each_kind_of_answer() -> None:
    """A concrete v11 answer of each kind: acknowledged, an error with a message, a
    KIP-467 per-record error, a KIP-951 leader hint with the node's endpoint."""
    leader = LeaderIdAndEpoch(leader_id=2, leader_epoch=9)
    record_error = BatchIndexAndErrorMessage(batch_index=1, batch_index_error_message="bad")
    response = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name="orders",
                partition_responses=[
                    PartitionProduceResponse(index=0, error_code=0, base_offset=41),
                    PartitionProduceResponse(
                        index=1, error_code=6, base_offset=-1, error_message="moved"
                    ),
                ],
            ),
            TopicProduceResponse(
                name="audit",
                partition_responses=[
                    PartitionProduceResponse(
                        index=3, error_code=87, base_offset=-1, record_errors=[record_error]
                    ),
                    PartitionProduceResponse(
                        index=4, error_code=6, base_offset=-1, current_leader=leader
                    ),
                ],
            ),
        ],
        throttle_time_ms=5,
        node_endpoints=[NodeEndpoint(node_id=2, host="b2", port=9093)],
    )
    correlation_id, answer = read_produce_answer(_frame(response, 11, correlation_id=3), 11)
    assert correlation_id == 3 and answer.throttle_time_ms == 5
    assert answer.partitions == {
        ("orders", 0): PartitionAnswer(0, 41, -1, -1, (), None, NO_LEADER),
        ("orders", 1): PartitionAnswer(6, -1, -1, -1, (), "moved", NO_LEADER),
        ("audit", 3): PartitionAnswer(87, -1, -1, -1, (record_error,), None, NO_LEADER),
        ("audit", 4): PartitionAnswer(6, -1, -1, -1, (), None, leader),
    }
    assert answer.node_endpoints == (NodeEndpoint(node_id=2, host="b2", port=9093),)


def test_a_truncated_answer_names_what_it_could_not_read() -> None:
    response = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name="orders",
                partition_responses=[PartitionProduceResponse(index=0, error_code=0)],
            )
        ]
    )
    frame = _frame(response, 9)
    with pytest.raises(ProtocolError, match="ProduceResponse") as caught:
        read_produce_answer(frame[:-3], 9)
    assert str(caught.value) == _generic(frame[:-3], 9)[1]


@pytest.mark.parametrize("version", [8, 9, 11])
def test_counts_that_take_two_varint_bytes(version: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """200 topics, one of 130 partitions: compact counts of two varint bytes (v9+),
    read without the codec."""
    response = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=f"t{t}",
                partition_responses=[
                    PartitionProduceResponse(index=p, error_code=0, base_offset=p)
                    for p in range(130 if t == 0 else 1)
                ],
            )
            for t in range(200)
        ]
    )
    frame = _frame(response, version)
    with monkeypatch.context() as patch:
        patch.setattr(_produce, "decode_response", _no_codec)
        correlation_id, answer = read_produce_answer(frame, version)
    assert len(answer.partitions) == 329 and answer.partitions["t0", 129].base_offset == 129
    assert (correlation_id, answer) == _generic(frame, version)


@pytest.mark.parametrize(("version", "at", "null"), [(8, 45, b"\xff\xff\xff\xff"), (9, 39, b"\0")])
def test_null_per_record_errors_are_refused_as_the_codec_refuses_them(
    version: int, at: int, null: bytes
) -> None:
    """The array is not nullable: a null there is a broken frame, not "no errors"."""
    response = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name="a", partition_responses=[PartitionProduceResponse(index=0, error_code=0)]
            )
        ]
    )
    frame = bytearray(_frame(response, version))
    empty = b"\0\0\0\0" if version < 9 else b"\x01"
    assert frame[at : at + len(empty)] == empty
    frame[at : at + len(empty)] = null
    refused = _fast(bytes(frame), version)
    assert refused[0] == "refused" and "null in a non-nullable array" in refused[1]
    assert refused == _generic(bytes(frame), version)


@pytest.mark.parametrize("version", range(ProduceResponse.FLEXIBLE_VERSION, max(VERSIONS) + 1))
@pytest.mark.parametrize("damage", [0x80, 0xFF])
def test_a_byte_with_the_varint_high_bit_anywhere_is_refused_or_read_as_the_codec_does(
    version: int, damage: int
) -> None:
    """Every byte of a flexible answer in turn set to one with the high bit (a varint
    that goes on): where a compact length is followed by four more such bytes (a name
    of u-umlauts, 0xC3 0xBC), it is a varint longer than 5 bytes. The fast reader let
    the codec's internal `Malformed` escape there (the generic codec refuses the frame
    with `ProtocolError`); the Hypothesis test above found it on one fresh clone only."""
    umlauts = "\u00fc" * 70
    response = ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=umlauts,
                partition_responses=[
                    PartitionProduceResponse(index=0, error_code=6, error_message=umlauts),
                    PartitionProduceResponse(index=1, error_code=0, base_offset=5),
                ],
            )
        ]
    )
    frame = _frame(response, version)
    for at in range(len(frame)):
        damaged = frame[:at] + bytes([damage]) + frame[at + 1 :]
        assert _fast(damaged, version) == _generic(damaged, version), at
