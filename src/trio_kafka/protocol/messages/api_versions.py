"""ApiVersions (API key 18), versions 0-4; flexible from v3.

v3 flexible with client software name and version (KIP-511), feature flags as tagged fields
(KIP-584), v4 lets SupportedFeatures.MinVersion be 0 (KAFKA-17011).
"""

# `field()` builds a fresh attrs field per declaration, not a shared default value.
# ruff: noqa: RUF009

from __future__ import annotations

import attrs

from .._codec import BOOL, INT16, INT32, INT64, STRING, Request, Response, Struct, array, field


@attrs.frozen
class ApiVersionsRequest(Request):
    API_KEY = 18
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 3

    client_software_name: str = field(STRING, "3+")
    client_software_version: str = field(STRING, "3+")


@attrs.frozen
class ApiVersion(Struct):
    api_key: int = field(INT16)
    min_version: int = field(INT16)
    max_version: int = field(INT16)


@attrs.frozen
class SupportedFeatureKey(Struct):
    name: str = field(STRING, "3+")
    min_version: int = field(INT16, "3+")
    max_version: int = field(INT16, "3+")


@attrs.frozen
class FinalizedFeatureKey(Struct):
    name: str = field(STRING, "3+")
    max_version_level: int = field(INT16, "3+")
    min_version_level: int = field(INT16, "3+")


@attrs.frozen
class ApiVersionsResponse(Response):
    API_KEY = 18
    MIN_VERSION = 0
    MAX_VERSION = 4
    FLEXIBLE_VERSION = 3

    error_code: int = field(INT16)
    api_keys: list[ApiVersion] = field(array(ApiVersion))
    throttle_time_ms: int = field(INT32, "1+")
    supported_features: list[SupportedFeatureKey] = field(array(SupportedFeatureKey), "3+", tag=0)
    finalized_features_epoch: int = field(INT64, "3+", tag=1, default=-1)
    finalized_features: list[FinalizedFeatureKey] = field(array(FinalizedFeatureKey), "3+", tag=2)
    zk_migration_ready: bool = field(BOOL, "3+", tag=3)


ApiVersionsRequest.RESPONSE = ApiVersionsResponse
