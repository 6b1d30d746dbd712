"""Hypothesis round trips for every message class at every supported version.

Strategies are built from the declarations themselves: each field present at the version
gets values of its wire type (None too where nullable), fields absent at the version stay
at their defaults, and flexible structs sometimes carry unknown tagged fields. Then:
encode, decode, equal; `size()` equals the encoded length; whole frames round-trip through
`encode_request`/`decode_request` and `encode_response`/`decode_response`; and every
strict prefix of an encoding is rejected with `ProtocolError`.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit._outcome import value_or_refusal
from trio_kafka.errors import ProtocolError
from trio_kafka.protocol import (
    REQUEST_CLASSES,
    Request,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from trio_kafka.protocol._codec import (
    Array,
    Message,
    Response,
    Struct,
    StructType,
    WireType,
    field_specs,
)

_FIXED = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": st.integers(-(2**31), 2**31 - 1),
    "int64": st.integers(-(2**63), 2**63 - 1),
    "uint16": st.integers(0, 2**16 - 1),
    "float64": st.floats(allow_nan=False),
    "bool": st.booleans(),
    "string": st.text(st.characters(codec="utf-8"), max_size=12),
    "bytes": st.binary(max_size=24),
    "records": st.binary(max_size=24),
    "uuid": st.uuids(),
}


def value_strategy(wire: WireType, version: int, flexible: bool) -> st.SearchStrategy[Any]:
    if isinstance(wire, Array):
        return st.lists(value_strategy(wire.element, version, flexible), max_size=3)
    if isinstance(wire, StructType):
        return struct_strategy(wire.cls, version, flexible)
    return _FIXED[wire.json_name]


def struct_strategy(cls: type[Struct], version: int, flexible: bool) -> st.SearchStrategy[Any]:
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for name, spec in field_specs(cls):
        if version not in spec.versions:
            continue
        values = value_strategy(spec.type, version, flexible)
        if version in spec.nullable:
            values = st.none() | values
        kwargs[name] = values
    if flexible:
        # Tags far above any Kafka assigns, some past 127 so the tag takes two varint bytes.
        kwargs["unknown_tagged_fields"] = st.dictionaries(
            st.integers(100, 300), st.binary(max_size=6), max_size=2
        )
    return st.builds(cls, **kwargs)


def message_strategy(cls: type[Message], version: int) -> st.SearchStrategy[Any]:
    return struct_strategy(cls, version, cls.is_flexible(version))


CASES = [
    (cls, version)
    for request in REQUEST_CLASSES.values()
    for cls in (request, request.RESPONSE)
    for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)
]
IDS = [f"{cls.__name__}-v{version}" for cls, version in CASES]
ROUND_TRIP = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(("cls", "version"), CASES, ids=IDS)
def test_body_round_trips_and_size_is_exact(cls: type[Message], version: int) -> None:
    @ROUND_TRIP
    @given(message_strategy(cls, version))
    def check(message: Message) -> None:
        data = message.encode(version)
        assert message.size(version) == len(data)
        assert cls.decode(data, version) == message
        # Decoding accepts any buffer type.
        assert cls.decode(memoryview(bytearray(data)), version) == message

    check()


@pytest.mark.parametrize(("cls", "version"), CASES, ids=IDS)
def test_frame_round_trips_with_its_header(cls: type[Message], version: int) -> None:
    @settings(ROUND_TRIP, max_examples=4)
    @given(
        message_strategy(cls, version),
        st.integers(-(2**31), 2**31 - 1),
        st.none() | st.text(max_size=8, alphabet="abc-_.1"),
    )
    def check(message: Message, correlation_id: int, client_id: str | None) -> None:
        if isinstance(message, Request):
            frame = encode_request(
                message, version=version, correlation_id=correlation_id, client_id=client_id
            )
            assert int.from_bytes(frame[:4], "big") == len(frame) - 4
            header, decoded = decode_request(frame[4:])
            assert (header.api_key, header.api_version) == (message.API_KEY, version)
            assert header.correlation_id == correlation_id
            assert header.client_id == client_id
            assert decoded == message
        else:
            assert isinstance(message, Response)
            frame = encode_response(message, version=version, correlation_id=correlation_id)
            assert int.from_bytes(frame[:4], "big") == len(frame) - 4
            request_class = REQUEST_CLASSES[message.API_KEY]
            assert decode_response(request_class, version, frame[4:]) == (
                correlation_id,
                message,
            )

    check()


@pytest.mark.parametrize(("cls", "version"), CASES, ids=IDS)
def test_every_strict_prefix_is_rejected(cls: type[Message], version: int) -> None:
    @settings(ROUND_TRIP, max_examples=3)
    @given(message_strategy(cls, version))
    def check(message: Message) -> None:
        data = message.encode(version)
        for cut in range(len(data)):
            with pytest.raises(ProtocolError) as info:
                cls.decode(data[:cut], version)
            assert info.value.message_name == cls.__name__
            assert info.value.version == version

    check()


def test_absent_fields_are_not_written() -> None:
    from trio_kafka.protocol.messages.produce import ProduceRequest

    with_id = ProduceRequest(transactional_id="txn", acks=-1, timeout_ms=5)
    without = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5)
    assert with_id.encode(2) == without.encode(2)  # TransactionalId appears in v3
    assert ProduceRequest.decode(with_id.encode(2), 2) == without


def test_known_tagged_field_at_its_default_is_not_written() -> None:
    from trio_kafka.protocol.messages.produce import (
        LeaderIdAndEpoch,
        PartitionProduceResponse,
        ProduceResponse,
        TopicProduceResponse,
    )

    def response(partition: PartitionProduceResponse) -> ProduceResponse:
        return ProduceResponse(
            responses=[TopicProduceResponse(name="t", partition_responses=[partition])]
        )

    plain = response(PartitionProduceResponse(index=1))
    hinted = response(
        PartitionProduceResponse(
            index=1, current_leader=LeaderIdAndEpoch(leader_id=3, leader_epoch=7)
        )
    )
    # The partition ends with an empty tagged-field section, then topic and message do.
    assert plain.encode(10).endswith(b"\x00\x00\x00\x00\x00\x00\x00")
    encoded = hinted.encode(10)
    assert len(encoded) == len(plain.encode(10)) + 1 + 1 + 9  # count, tag, size, struct
    assert ProduceResponse.decode(encoded, 10) == hinted
    # Below v10 the tagged field does not exist and is dropped.
    assert ProduceResponse.decode(hinted.encode(9), 9) == plain


def test_unknown_tagged_fields_are_kept_and_written_back_in_tag_order() -> None:
    from trio_kafka.protocol.messages.init_producer_id import InitProducerIdRequest

    message = InitProducerIdRequest(
        transactional_id="t", unknown_tagged_fields={200: b"\x01\x02", 5: b""}
    )
    data = message.encode(4)
    assert data.endswith(bytes([2, 5, 0, 0xC8, 0x01, 2, 1, 2]))
    assert InitProducerIdRequest.decode(data, 4) == message


def test_decode_error_names_the_field_path_and_offset() -> None:
    from trio_kafka.protocol.messages.produce import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    message = ProduceRequest(
        acks=1,
        topic_data=[
            TopicProduceData(
                name="t", partition_data=[PartitionProduceData(index=0, records=b"abcd")]
            )
        ],
    )
    data = message.encode(9)
    with pytest.raises(ProtocolError) as info:
        ProduceRequest.decode(data[:-5], 9)  # inside "abcd"
    error = info.value
    assert error.field == "topic_data[0].partition_data[0].records"
    # The records begin 8 bytes from the end: a length byte, 4 bytes, 3 empty tag sections.
    assert error.offset == len(data) - 8
    assert "ProduceRequest v9" in str(error)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CASES), st.data())
def test_every_message_decode_mutated_valid_bytes(
    case: tuple[type[Message], int], data: st.DataObject
) -> None:
    """Flip bytes of a real encoding, so lengths and counts are nearly right."""
    cls, version = case
    encoded = bytearray(data.draw(message_strategy(cls, version)).encode(version))
    if not encoded:
        return
    for _ in range(data.draw(st.integers(1, 4))):
        encoded[data.draw(st.integers(0, len(encoded) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(encoded)))
    outcome = value_or_refusal(lambda: cls.decode(bytes(encoded[:cut]), version), ProtocolError)
    assert isinstance(outcome, ProtocolError | cls)
