"""DescribeConfigs (API key 32), versions 0-4; flexible from v4.

v1 synonyms (KIP-226), v3 type and documentation (KIP-507), v4 flexible.
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import BOOL, INT8, INT16, INT32, STRING, Request, Response, Struct, array, field


@attrs.frozen
class DescribeConfigsResource(Struct):
    resource_type: int = field(INT8)
    resource_name: str = field(STRING)
    configuration_keys: list[str] | None = field(array(STRING), nullable="0+")


@attrs.frozen
class DescribeConfigsRequest(Request):
    API_KEY = 32
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 4

    resources: list[DescribeConfigsResource] = field(array(DescribeConfigsResource))
    include_synonyms: bool = field(BOOL, "1+")
    include_documentation: bool = field(BOOL, "3+")


@attrs.frozen
class DescribeConfigsSynonym(Struct):
    name: str = field(STRING, "1+")
    value: str | None = field(STRING, "1+", nullable="0+")
    source: int = field(INT8, "1+")


@attrs.frozen
class DescribeConfigsResourceResult(Struct):
    name: str = field(STRING)
    value: str | None = field(STRING, nullable="0+")
    read_only: bool = field(BOOL)
    is_default: bool = field(BOOL, "0")
    config_source: int = field(INT8, "1+", default=-1)
    is_sensitive: bool = field(BOOL)
    synonyms: list[DescribeConfigsSynonym] = field(array(DescribeConfigsSynonym), "1+")
    config_type: int = field(INT8, "3+")
    documentation: str | None = field(STRING, "3+", nullable="0+")


@attrs.frozen
class DescribeConfigsResult(Struct):
    error_code: int = field(INT16)
    error_message: str | None = field(STRING, nullable="0+")
    resource_type: int = field(INT8)
    resource_name: str = field(STRING)
    configs: list[DescribeConfigsResourceResult] = field(array(DescribeConfigsResourceResult))


@attrs.frozen
class DescribeConfigsResponse(Response):
    API_KEY = 32
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 4

    throttle_time_ms: int = field(INT32)
    results: list[DescribeConfigsResult] = field(array(DescribeConfigsResult))


DescribeConfigsRequest.RESPONSE = DescribeConfigsResponse
