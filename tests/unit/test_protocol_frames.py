"""Headers, frames and hostile input.

Request header v0-v2 and response header v0-v1 on the wire; the frame splitter fed in any
chunking; and random, truncated or mutated bytes given to every decoder, where only
`ProtocolError` may come out (never IndexError, struct.error, UnicodeDecodeError,
RecursionError or MemoryError, and never a hang).
"""

from __future__ import annotations

import gc
import struct
import weakref

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit._outcome import value_or_refusal
from trio_kafka.errors import ProtocolError, UnsupportedRequestError
from trio_kafka.protocol import (
    REQUEST_CLASSES,
    FrameSplitter,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_request_parts,
    encode_response,
)
from trio_kafka.protocol._codec import Message, ResponseHeader
from trio_kafka.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from trio_kafka.protocol.messages.metadata import MetadataRequest, MetadataResponse
from trio_kafka.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MESSAGE_VERSIONS = [
    (cls, version)
    for request in REQUEST_CLASSES.values()
    for cls in (request, request.RESPONSE)
    for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)
]


# --- headers --------------------------------------------------------------------------------


def test_request_header_v0_has_no_client_id() -> None:
    header = RequestHeader(api_key=3, api_version=0, correlation_id=9, client_id="x")
    assert header.encode(0) == struct.pack(">hhi", 3, 0, 9)


def test_request_header_v1_has_a_nullable_int16_client_id() -> None:
    header = RequestHeader(api_key=3, api_version=8, correlation_id=9, client_id="ab")
    assert header.encode(1) == struct.pack(">hhih", 3, 8, 9, 2) + b"ab"
    null = RequestHeader(api_key=3, api_version=8, correlation_id=9, client_id=None)
    assert null.encode(1) == struct.pack(">hhih", 3, 8, 9, -1)


def test_request_header_v2_keeps_the_classic_client_id_and_adds_tagged_fields() -> None:
    header = RequestHeader(api_key=3, api_version=12, correlation_id=9, client_id="ab")
    assert header.encode(2) == struct.pack(">hhih", 3, 12, 9, 2) + b"ab" + b"\x00"


def test_response_headers() -> None:
    assert ResponseHeader(correlation_id=5).encode(0) == b"\x00\x00\x00\x05"
    assert ResponseHeader(correlation_id=5).encode(1) == b"\x00\x00\x00\x05\x00"


def test_flexible_requests_use_header_v2_and_others_v1() -> None:
    flexible = encode_request(MetadataRequest(), version=9, correlation_id=1, client_id="c")
    classic = encode_request(MetadataRequest(), version=8, correlation_id=1, client_id="c")
    assert flexible[4:15] == struct.pack(">hhih", 3, 9, 1, 1) + b"c"
    assert flexible[15] == 0  # header tagged fields
    assert classic[4:15] == struct.pack(">hhih", 3, 8, 1, 1) + b"c"
    assert decode_request(flexible[4:])[0].client_id == "c"


def test_flexible_responses_use_header_v1_except_api_versions() -> None:
    metadata = encode_response(MetadataResponse(), version=9, correlation_id=7)
    assert metadata[4:9] == b"\x00\x00\x00\x07\x00"
    api_versions = encode_response(ApiVersionsResponse(), version=3, correlation_id=7)
    # Header v0, then the body's int16 error code.
    assert api_versions[4:10] == b"\x00\x00\x00\x07\x00\x00"
    assert decode_response(ApiVersionsRequest, 3, api_versions[4:]) == (7, ApiVersionsResponse())


def test_unknown_api_key_is_reported_with_the_correlation_id() -> None:
    frame = struct.pack(">hhih", 999, 0, 4242, -1)
    with pytest.raises(UnsupportedRequestError) as info:
        decode_request(frame)
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (
        999,
        0,
        4242,
    )


def test_unsupported_version_is_reported_with_the_correlation_id() -> None:
    frame = struct.pack(">hhih", 18, 99, 17, -1) + b"\x00"
    with pytest.raises(UnsupportedRequestError) as info:
        decode_request(frame)
    assert (info.value.api_key, info.value.api_version, info.value.correlation_id) == (18, 99, 17)
    assert isinstance(info.value, ProtocolError)


def test_trailing_bytes_after_a_request_are_rejected() -> None:
    frame = encode_request(MetadataRequest(), version=4, correlation_id=1, client_id=None)
    with pytest.raises(ProtocolError, match="left over"):
        decode_request(frame[4:] + b"\x00")


def test_encoding_a_value_that_does_not_fit_names_the_field() -> None:
    with pytest.raises(ProtocolError) as info:
        ProduceRequest(acks=70_000).encode(9)
    assert info.value.field == "acks"
    with pytest.raises(ProtocolError):
        ProduceRequest().encode(99)


# --- the frame splitter ---------------------------------------------------------------------


def frames_of(payloads: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


PAYLOADS = [b"", b"a", b"hello world", bytes(range(256)) * 3, b"\x00\x00\x00\x05"]


def test_splitter_one_byte_at_a_time() -> None:
    splitter = FrameSplitter()
    out: list[bytes] = []
    for byte in frames_of(PAYLOADS):
        out += splitter.feed(bytes([byte]))
    assert out == PAYLOADS
    assert splitter.buffered == 0


def test_splitter_all_at_once() -> None:
    splitter = FrameSplitter()
    assert splitter.feed(frames_of(PAYLOADS)) == PAYLOADS
    assert splitter.buffered == 0


@FUZZ
@given(st.lists(st.binary(max_size=40), max_size=8), st.data())
def test_splitter_random_splits(payloads: list[bytes], data: st.DataObject) -> None:
    stream = frames_of(payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    splitter = FrameSplitter()
    out: list[bytes] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        out += splitter.feed(memoryview(stream)[start:cut])
        start = cut
    assert out == payloads
    assert splitter.buffered == 0


def test_splitter_keeps_a_partial_frame_for_later() -> None:
    splitter = FrameSplitter()
    stream = frames_of([b"abc", b"defg"])
    assert splitter.feed(stream[:9]) == [b"abc"]
    assert splitter.buffered == 2
    assert splitter.feed(stream[9:]) == [b"defg"]


def test_a_frame_that_claims_more_than_the_limit_is_rejected_before_its_body() -> None:
    splitter = FrameSplitter(max_frame_size=1024)
    with pytest.raises(ProtocolError, match="frame size"):
        splitter.feed(struct.pack(">i", 1025))


def test_a_negative_frame_size_is_rejected() -> None:
    with pytest.raises(ProtocolError):
        FrameSplitter().feed(b"\xff\xff\xff\xfe" + b"x" * 10)


def test_a_frame_that_lies_small_yields_garbage_the_decoder_rejects() -> None:
    frame = encode_request(MetadataRequest(), version=4, correlation_id=1, client_id="c")
    lying = struct.pack(">i", len(frame) - 4 - 2) + frame[4:]
    first = FrameSplitter().feed(lying)[0]
    with pytest.raises(ProtocolError):
        decode_request(first)


# --- hostile input --------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=200))
def test_decode_request_random_bytes(data: bytes) -> None:
    outcome = value_or_refusal(lambda: decode_request(data), ProtocolError)
    assert isinstance(outcome, ProtocolError | tuple)


@FUZZ
@given(st.sampled_from(list(REQUEST_CLASSES.values())), st.integers(0, 17), st.binary(max_size=200))
def test_decode_request_random_body_behind_a_valid_header(
    cls: type[Message], version: int, body: bytes
) -> None:
    header = struct.pack(">hhih", cls.API_KEY, version, 1, -1)
    if cls.is_flexible(version):
        header += b"\x00"
    outcome = value_or_refusal(lambda: decode_request(header + body), ProtocolError)
    assert isinstance(outcome, ProtocolError) or isinstance(outcome[1], cls)


@FUZZ
@given(st.sampled_from(list(REQUEST_CLASSES.values())), st.integers(0, 17), st.binary(max_size=200))
def test_decode_response_random_bytes(cls: type[Message], version: int, data: bytes) -> None:
    outcome = value_or_refusal(lambda: decode_response(cls, version, data), ProtocolError)
    assert isinstance(outcome, ProtocolError) or isinstance(outcome[1], cls.RESPONSE)


@settings(FUZZ, max_examples=400)
@given(st.sampled_from(MESSAGE_VERSIONS), st.binary(max_size=120))
def test_every_message_decode_random_bytes(case: tuple[type[Message], int], data: bytes) -> None:
    cls, version = case
    outcome = value_or_refusal(lambda: cls.decode(data, version), ProtocolError)
    assert isinstance(outcome, ProtocolError | cls)


def test_huge_array_count_is_rejected_without_allocating() -> None:
    body = struct.pack(">i", 2**31 - 1)  # Metadata v1 topics: two billion of them
    with pytest.raises(ProtocolError, match="array of 2147483647 elements"):
        MetadataRequest.decode(body, 1)


def test_huge_compact_string_is_rejected() -> None:
    body = b"\xff\xff\xff\xff\x0f"  # a transactional id of 2**32 - 2 bytes
    with pytest.raises(ProtocolError, match="string of length"):
        ProduceRequest.decode(body + b"\x00" * 10, 9)


def test_overlong_varint_is_rejected() -> None:
    with pytest.raises(ProtocolError, match="varint"):
        ProduceRequest.decode(b"\xff" * 20, 9)


def test_invalid_utf8_is_a_protocol_error() -> None:
    # Metadata v0: one topic whose name is not UTF-8.
    body = struct.pack(">i", 1) + struct.pack(">h", 2) + b"\xff\xfe"
    with pytest.raises(ProtocolError, match="UTF-8") as info:
        MetadataRequest.decode(body, 0)
    assert info.value.field == "topics[0].name"


@pytest.mark.parametrize("version", [3, 8, 9, 11])
def test_request_parts_keep_large_record_batches_by_reference(version: int) -> None:
    big = [bytes([i]) * (200_000 + i) for i in range(3)]
    partitions = [
        PartitionProduceData(index=0, records=big[0]),
        PartitionProduceData(index=1, records=b"small"),
        PartitionProduceData(index=2, records=None),
        PartitionProduceData(index=3, records=big[1]),
        PartitionProduceData(index=4, records=big[2]),
    ]
    request = ProduceRequest(
        acks=-1,
        timeout_ms=1000,
        topic_data=[TopicProduceData(name="t", partition_data=partitions)],
    )
    parts = encode_request_parts(request, version=version, correlation_id=9, client_id="c")
    whole = encode_request(request, version=version, correlation_id=9, client_id="c")
    assert b"".join(parts) == whole
    assert struct.unpack(">i", whole[:4])[0] == len(whole) - 4
    # Each large batch is its own part, the very object given (never copied).
    assert [p for p in parts if len(p) >= 200_000] == big
    assert all(any(p is b for p in parts) for b in big)
    header, decoded = decode_request(whole[4:])
    assert (header.correlation_id, decoded) == (9, request)


def test_request_parts_of_a_small_request_are_one_buffer() -> None:
    request = ProduceRequest(acks=1, timeout_ms=5, topic_data=[])
    parts = encode_request_parts(request, version=9, correlation_id=1, client_id=None)
    assert len(parts) == 1
    assert bytes(parts[0]) == encode_request(request, version=9, correlation_id=1, client_id=None)


def test_request_parts_hold_no_reference_cycle() -> None:
    # The frame's last bytearray sat in its own `finished` list: a cycle that kept every
    # sent record batch alive until a full collection (a Spark worker's RSS grew with
    # the rows it loaded, ~100 B per 100 B row). Freed by reference counting alone now.
    big = b"x" * 100_000
    request = ProduceRequest(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(
                name="t",
                partition_data=[PartitionProduceData(index=0, records=big)],
            )
        ],
    )
    collecting = gc.isenabled()
    gc.disable()
    try:
        parts = encode_request_parts(request, version=9, correlation_id=1, client_id="c")
        assert len(parts) == 3  # header bytes, the batch itself, the rest
        last = weakref.ref(parts[-1])
        del parts
        assert last() is None
    finally:
        if collecting:
            gc.enable()
