"""DescribeCluster (API key 60), versions 0-1; flexible from v0.

v0 (KIP-700), v1 endpoint type for controllers (KIP-919). Optional: clients that see it in
ApiVersions may use it instead of Metadata for cluster information.
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import (
    BOOL,
    INT8,
    INT16,
    INT32,
    INT32_MIN,
    STRING,
    Request,
    Response,
    Struct,
    array,
    field,
)


@attrs.frozen
class DescribeClusterRequest(Request):
    API_KEY = 60
    MIN_VERSION = 0
    MAX_VERSION = 1
    FLEXIBLE_VERSION = 0

    include_cluster_authorized_operations: bool = field(BOOL)
    endpoint_type: int = field(INT8, "1+", default=1)


@attrs.frozen
class DescribeClusterBroker(Struct):
    broker_id: int = field(INT32)
    host: str = field(STRING)
    port: int = field(INT32)
    rack: str | None = field(STRING, nullable="0+", default=None)


@attrs.frozen
class DescribeClusterResponse(Response):
    API_KEY = 60
    MIN_VERSION = 0
    MAX_VERSION = 1
    FLEXIBLE_VERSION = 0

    throttle_time_ms: int = field(INT32)
    error_code: int = field(INT16)
    error_message: str | None = field(STRING, nullable="0+", default=None)
    endpoint_type: int = field(INT8, "1+", default=1)
    cluster_id: str = field(STRING)
    controller_id: int = field(INT32, default=-1)
    brokers: list[DescribeClusterBroker] = field(array(DescribeClusterBroker))
    cluster_authorized_operations: int = field(INT32, default=INT32_MIN)


DescribeClusterRequest.RESPONSE = DescribeClusterResponse
