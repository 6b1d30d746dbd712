"""Version negotiation with ApiVersions (KIP-35, KIP-511) and the broker's features.

For every API both sides know, the version used is the highest one in both ranges. The
client first asks at its own highest ApiVersions version; a broker that does not know it
answers UNSUPPORTED_VERSION with a v0 body listing its ApiVersions range (KIP-511), and the
client asks again at the highest version that range allows (v0 if it lists none).

Features (KIP-584) come from the v3+ response's tagged fields: `SupportedFeatures` (what
the broker can do: our CAS extension advertises `expected.offset.cas` there) and
`FinalizedFeatures` (what the cluster has switched on: `transaction.version`, KIP-890).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from trio_kafka._version import __version__
from trio_kafka.errors import ErrorCode, error_for_code
from trio_kafka.net._connection import BrokerConnection
from trio_kafka.protocol import REQUEST_CLASSES
from trio_kafka.protocol.messages.api_versions import ApiVersionsRequest

#: KIP-511: client software name and version, sent with ApiVersions v3+.
CLIENT_SOFTWARE_NAME = "trio-kafka"
CLIENT_SOFTWARE_VERSION = __version__

#: Feature names the producer checks.
CAS_FEATURE = "expected.offset.cas"
TRANSACTION_VERSION_FEATURE = "transaction.version"


@attrs.frozen(slots=True)
class ApiVersionsInfo:
    """What one broker told us in ApiVersions, and the versions we will use with it."""

    #: API key -> (min, max) the broker supports.
    broker_versions: Mapping[int, tuple[int, int]]
    #: API key -> the version to use: the highest in both ranges (absent: no overlap).
    negotiated: Mapping[int, int]
    #: Feature name -> (min_version, max_version) the broker supports.
    supported_features: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)
    #: Feature name -> (min_version_level, max_version_level) finalized in the cluster.
    finalized_features: Mapping[str, tuple[int, int]] = attrs.field(factory=dict)
    finalized_features_epoch: int = -1
    #: The ApiVersions version the broker answered.
    api_versions_version: int = 0

    def version_for(self, api_key: int) -> int | None:
        return self.negotiated.get(api_key)

    def supports_feature(self, name: str, version: int = 1) -> bool:
        """True when the broker's SupportedFeatures range for `name` includes `version`."""
        span = self.supported_features.get(name)
        return span is not None and span[0] <= version <= span[1]

    def finalized_level(self, name: str) -> int | None:
        """The cluster's finalized max version level of `name`, None when not finalized."""
        span = self.finalized_features.get(name)
        return None if span is None else span[1]

    @property
    def supports_cas(self) -> bool:
        return self.supports_feature(CAS_FEATURE, 1)

    @classmethod
    def from_response(cls, response: Any, *, version: int) -> ApiVersionsInfo:
        broker = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        negotiated: dict[int, int] = {}
        for api_key, (low, high) in sorted(broker.items()):
            request_class = REQUEST_CLASSES.get(api_key)
            if request_class is None:
                continue
            best = min(high, request_class.MAX_VERSION)
            if best >= max(low, request_class.MIN_VERSION):
                negotiated[api_key] = best
        return cls(
            broker_versions=broker,
            negotiated=negotiated,
            supported_features={
                f.name: (f.min_version, f.max_version)
                for f in getattr(response, "supported_features", ())
            },
            finalized_features={
                f.name: (f.min_version_level, f.max_version_level)
                for f in getattr(response, "finalized_features", ())
            },
            finalized_features_epoch=getattr(response, "finalized_features_epoch", -1),
            api_versions_version=version,
        )


async def negotiate(connection: BrokerConnection) -> ApiVersionsInfo:
    """Ask `connection`'s broker for its versions and set `connection.api_versions`."""
    version = ApiVersionsRequest.MAX_VERSION
    request = ApiVersionsRequest(
        client_software_name=CLIENT_SOFTWARE_NAME,
        client_software_version=CLIENT_SOFTWARE_VERSION,
    )
    response = await connection.request(request, version=version)
    if response.error_code == ErrorCode.UNSUPPORTED_VERSION:
        theirs = [
            k.max_version for k in response.api_keys if k.api_key == ApiVersionsRequest.API_KEY
        ]
        version = max(0, min(ApiVersionsRequest.MAX_VERSION, theirs[0])) if theirs else 0
        response = await connection.request(request, version=version)
    if response.error_code != ErrorCode.NONE:
        raise error_for_code(
            response.error_code,
            f"{connection.host}:{connection.port} refused ApiVersions v{version}",
        )
    info = ApiVersionsInfo.from_response(response, version=version)
    connection.api_versions = dict(info.negotiated)
    return info
