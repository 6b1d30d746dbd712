"""`ProduceFrame` (the producer's Produce request) writes, at every version, the bytes
the generic codec writes for the `ProduceRequest` it stands for; and the connection
names it as that request in its errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_kafka.net._pending import request_name
from trio_kafka.protocol import ProduceFrame, decode_request, encode_request_parts
from trio_kafka.protocol.messages.produce import ProduceRequest

VERSIONS = range(ProduceRequest.MIN_VERSION, ProduceRequest.MAX_VERSION + 1)

_names = st.text(st.characters(codec="utf-8"), max_size=10) | st.sampled_from(["t" * 200])
_records = st.binary(max_size=40) | st.sampled_from([b"r" * 40_000])  # one over GATHER_MIN
_data = st.dictionaries(
    _names,
    st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), _records), max_size=4)
    | st.lists(st.tuples(st.integers(0, 9), st.just(b"x")), min_size=127, max_size=128),
    max_size=3,
)
_frames = st.builds(
    ProduceFrame,
    transactional_id=st.none() | _names,
    acks=st.sampled_from([-1, 0, 1]),
    timeout_ms=st.integers(-(2**31), 2**31 - 1),
    data=_data,
)


def _bytes(message: object, version: int) -> bytes:
    parts = encode_request_parts(message, version=version, correlation_id=5, client_id="c")  # type: ignore[arg-type]
    return b"".join(parts)


@pytest.mark.parametrize("version", VERSIONS)
@given(frame=_frames)
@settings(max_examples=40, deadline=None)
def test_a_frame_writes_the_codecs_bytes_for_its_request(version: int, frame: ProduceFrame) -> None:
    written = _bytes(frame, version)
    assert written == _bytes(frame.request(), version)
    header, request = decode_request(written[4:])
    assert header.api_key == 0 and header.api_version == version
    if version >= 3:
        assert request == frame.request()


def test_a_large_batch_is_its_own_part_never_copied() -> None:
    batch = b"r" * 40_000
    frame = ProduceFrame(None, -1, 30_000, {"t": [(0, b"small"), (1, batch)]})
    parts = encode_request_parts(frame, version=11, correlation_id=1, client_id="c")  # type: ignore[arg-type]
    assert any(part is batch for part in parts)


def test_a_version_it_has_not_is_refused() -> None:
    frame = ProduceFrame(None, -1, 30_000, {"t": [(0, b"x")]})
    with pytest.raises(ValueError, match="ProduceRequest has no version 13"):
        _bytes(frame, 13)


def test_it_is_named_as_the_request_it_writes() -> None:
    assert request_name(ProduceFrame) == "ProduceRequest" == request_name(ProduceRequest)
