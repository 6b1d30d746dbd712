"""Whole frames: header plus body, for requests and responses.

The request header version follows the API's flexibility (v2 for a flexible request, v1
otherwise); the response header likewise (v1 / v0), except that ApiVersions responses
always use header v0 so that a client that sent a version the broker does not know can
still read the broker's answer (KIP-511).

`encode_request_parts` gives a request frame as a list of buffers: records values of
`GATHER_MIN` bytes or more (a Produce request's record batches) are parts of their own,
referenced rather than copied, which is how the connection writes large requests.
`encode_request` joins those parts into one `bytes`.
"""

from __future__ import annotations

import struct
from typing import Any

from ..errors import ProtocolError, UnsupportedRequestError
from ._headers import RequestHeader, ResponseHeader
from ._schema import Request, Response
from ._types import Gather
from .messages import REQUEST_CLASSES

_SIZE = struct.Struct(">i")
_HEADER_PREFIX = struct.Struct(">hhi")
_API_VERSIONS_KEY = 18


def request_header_version(request_class: type[Request], version: int) -> int:
    return 2 if request_class.is_flexible(version) else 1


def response_header_version(request_class: type[Request] | type[Response], version: int) -> int:
    if request_class.API_KEY == _API_VERSIONS_KEY:
        return 0
    return 1 if request_class.is_flexible(version) else 0


def encode_request(
    message: Request, *, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """The whole request frame, size prefix included."""
    return b"".join(
        encode_request_parts(
            message, version=version, correlation_id=correlation_id, client_id=client_id
        )
    )


def encode_request_parts(
    message: Request, *, version: int, correlation_id: int, client_id: str | None
) -> list[bytes | bytearray | memoryview]:
    """The whole request frame as a list of buffers to write one after the other.

    Large records values (a Produce request's record batches) are parts of their own,
    never copied; everything else is encoded into bytearrays between them. A frame with
    no large records value is one bytearray.
    """
    cls = type(message)
    header = RequestHeader(
        api_key=cls.API_KEY,
        api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    out = Gather()
    out += b"\x00\x00\x00\x00"  # the size, known at the end
    header.write_to(out, request_header_version(cls, version))
    message.write_to(out, version)
    parts = out.parts()
    first = parts[0]
    assert isinstance(first, bytearray)  # Gather.cut and parts() keep it one
    first[0:4] = _SIZE.pack(sum(map(len, parts)) - 4)
    return parts


def decode_request(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, Any]:
    """A request frame's payload (no size prefix) -> (header, request body)."""
    data = bytes(frame)
    try:
        api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(data, 0)
    except struct.error:
        raise ProtocolError(
            f"a request frame of {len(data)} bytes is shorter than a request header",
            message_name="RequestHeader",
            offset=0,
        ) from None
    cls = REQUEST_CLASSES.get(api_key)
    if cls is None:
        raise UnsupportedRequestError(
            f"unknown API key {api_key}",
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
        )
    if not cls.MIN_VERSION <= api_version <= cls.MAX_VERSION:
        raise UnsupportedRequestError(
            f"{cls.__name__} version {api_version} is not supported "
            f"(supported: {cls.MIN_VERSION}-{cls.MAX_VERSION})",
            api_key=api_key,
            api_version=api_version,
            correlation_id=correlation_id,
        )
    header, pos = RequestHeader.read_from(
        data, 0, request_header_version(cls, api_version), exact=False
    )
    body, _ = cls.read_from(data, pos, api_version, exact=True)
    return header, body


def encode_response(message: Response, *, version: int, correlation_id: int) -> bytes:
    """The whole response frame, size prefix included."""
    out = bytearray(4)
    ResponseHeader(correlation_id=correlation_id).write_to(
        out, response_header_version(type(message), version)
    )
    message.write_to(out, version)
    out[0:4] = _SIZE.pack(len(out) - 4)
    return bytes(out)


def decode_response(
    request_class: type[Request], version: int, frame: bytes | bytearray | memoryview
) -> tuple[int, Any]:
    """A response frame's payload (no size prefix) -> (correlation id, response body)."""
    data = bytes(frame)
    header, pos = ResponseHeader.read_from(
        data, 0, response_header_version(request_class, version), exact=False
    )
    body, _ = request_class.RESPONSE.read_from(data, pos, version, exact=True)
    return header.correlation_id, body


def peek_correlation_id(frame: bytes | bytearray | memoryview) -> int:
    """The correlation id of a response frame, without decoding the rest."""
    try:
        return int(_SIZE.unpack_from(frame, 0)[0])
    except struct.error:
        raise ProtocolError(
            "a response frame shorter than its correlation id",
            message_name="ResponseHeader",
            offset=0,
        ) from None
