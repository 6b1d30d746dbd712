"""ApiVersions (API key 18), v0-4.

Advertises every API the broker handles with the version range it implements, and in
`SupportedFeatures` (v3+) the CAS extension `expected.offset.cas` (1-1) and, when the
cluster enables transactions v2, `transaction.version` (with the finalized level in
`FinalizedFeatures`). A request at a version we do not know is answered by the shell, in
v0 format, with UNSUPPORTED_VERSION and our ranges (KIP-511): see `unsupported_version`.
"""

from __future__ import annotations

import functools

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._registry import OTHER_HANDLERS
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.api_versions import (
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FinalizedFeatureKey,
    SupportedFeatureKey,
)

REQUEST = ApiVersionsRequest

#: The CAS extension's feature name and version range (docs/cas.md).
CAS_FEATURE = "expected.offset.cas"
CAS_FEATURE_VERSION = 1


def api_keys() -> list[ApiVersion]:
    return list(_api_keys())


@functools.cache
def _api_keys() -> tuple[ApiVersion, ...]:
    # Built once: the handler table is fixed once imported, and every connection asks
    # (a simulated run opens a dozen connections per seed). Our own range beside the rest.
    ranges = {key: (h.REQUEST.MIN_VERSION, h.max_version) for key, h in OTHER_HANDLERS.items()}
    ranges[REQUEST.API_KEY] = (REQUEST.MIN_VERSION, REQUEST.MAX_VERSION)
    return tuple(
        ApiVersion(api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(ranges.items())
    )


def handle(ctx: RequestContext, req: ApiVersionsRequest) -> ApiVersionsResponse:
    return _answer(ctx.state.options.transaction_version)


@functools.cache
def _answer(tv: int) -> ApiVersionsResponse:
    # One object per transaction version (the answer depends on nothing else), which
    # the connection shell encodes once (`_server._api_versions_frame`). Nobody mutates
    # a response: handlers build new ones.
    features = [
        SupportedFeatureKey(name=CAS_FEATURE, min_version=1, max_version=CAS_FEATURE_VERSION)
    ]
    finalized = []
    if tv >= 2:
        features.append(
            SupportedFeatureKey(name="transaction.version", min_version=0, max_version=2)
        )
        finalized.append(
            FinalizedFeatureKey(
                name="transaction.version", max_version_level=tv, min_version_level=tv
            )
        )
    return ApiVersionsResponse(
        error_code=ErrorCode.NONE,
        api_keys=api_keys(),
        supported_features=features,
        finalized_features_epoch=1 if finalized else -1,
        finalized_features=finalized,
    )


def unsupported_version() -> ApiVersionsResponse:
    """KIP-511: the answer to an ApiVersions version we do not speak, encoded as v0."""
    return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=api_keys())
