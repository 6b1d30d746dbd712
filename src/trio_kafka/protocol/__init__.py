"""The Kafka wire protocol (sans-IO): what the other packages of trio-kafka use of it.

`_codec.py` is the generic codec: wire types, the schema DSL in which `messages/`
declares every API (one module per API), headers, whole frames and the splitting of a
stream into frames. `_produce.py` is the producer's fast path for its one hot request,
byte for byte what the codec writes and reads: `ProduceFrame` (a Produce request from the
producer's data) and `read_produce_answer` (its answer). The varint readers
(`read_uvarint`, `read_uvarlong`, raising `Malformed`; `write_uvarint`) also serve the record batch
decoder (records/), whose varints are the same encoding. See `docs/design.md` for where
this layer sits.
"""

from __future__ import annotations

from ._codec import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameSplitter,
    Malformed,
    Request,
    RequestHeader,
    coalesce,
    decode_response,
    encode_request,
    encode_request_parts,
    encode_response,
    read_uvarint,
    read_uvarlong,
    write_uvarint,
)
from ._produce import INTERNAL_TOPICS, ProduceAnswer, ProduceFrame, read_produce_answer
from .messages import REQUEST_CLASSES, decode_request

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "INTERNAL_TOPICS",
    "REQUEST_CLASSES",
    "FrameSplitter",
    "Malformed",
    "ProduceAnswer",
    "ProduceFrame",
    "Request",
    "RequestHeader",
    "coalesce",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_request_parts",
    "encode_response",
    "read_produce_answer",
    "read_uvarint",
    "read_uvarlong",
    "write_uvarint",
]
