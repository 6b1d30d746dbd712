"""The Kafka wire protocol: message schemas, headers and frames (sans-IO).

Messages are declared once in a small DSL (`_schema.field`) and encoded, sized and
decoded at any supported version by one generic codec; see `messages/` for one module
per API and `docs/design.md` for where this layer sits. The producer's own hot path has
two writers of its own beside the codec, equal to it byte for byte: `ProduceFrame` (a
Produce request from the producer's data) and `read_produce_answer` (its answer).
"""

from __future__ import annotations

from ..errors import ProtocolError, UnsupportedRequestError
from . import messages
from ._codec import (
    decode_request,
    decode_response,
    encode_request,
    encode_request_parts,
    encode_response,
    peek_correlation_id,
    request_header_version,
    response_header_version,
)
from ._frames import DEFAULT_MAX_FRAME_SIZE, FrameSplitter, coalesce
from ._headers import RequestHeader, ResponseHeader
from ._produce_answer import PartitionAnswer, ProduceAnswer, read_produce_answer
from ._produce_frame import ProduceFrame
from ._schema import FieldSpec, Message, Request, Response, Struct, Versions, field_specs
from .messages import REQUEST_CLASSES

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "REQUEST_CLASSES",
    "FieldSpec",
    "FrameSplitter",
    "Message",
    "PartitionAnswer",
    "ProduceAnswer",
    "ProduceFrame",
    "ProtocolError",
    "Request",
    "RequestHeader",
    "Response",
    "ResponseHeader",
    "Struct",
    "UnsupportedRequestError",
    "Versions",
    "coalesce",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_request_parts",
    "encode_response",
    "field_specs",
    "messages",
    "peek_correlation_id",
    "read_produce_answer",
    "request_header_version",
    "response_header_version",
]
