"""The real brokers a module runs on, one fixture for both (issue 33): Apache Kafka 4.4
first (what users run), then Tansu.

`real_broker` is module scoped and parametrized by `broker_kind` ("kafka", "tansu";
marked `kafka` / `tansu`, so `-m kafka` selects one tier). On Kafka every module shares
the module's one `kafka` node (a JVM: ~3 s to start, ~300 MB), across the anyio backends
too; on Tansu a module gets a fresh process per backend, as before (Tansu keeps
everything in memory and never frees it). Names that must be fresh (topics,
transactional ids, groups) go through `RealBroker.name`, which adds a tag unique to the
fixture instance, so the trio and asyncio runs of a module never meet on one Kafka.

`tansu_differs(request, reason)` marks the running test as an expected failure on Tansu
(strict: it must fail there) for one of Tansu's known differences
(docs/compatibility.md); on Kafka the test must pass.
"""

from __future__ import annotations

import contextlib
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from trio_kafka.net import ByteStream, TcpTransport
from trio_kafka.testing import KafkaNode, TansuBroker, tansu_broker

#: The tiers, Kafka first; each param carries its marker.
KINDS = [
    pytest.param("kafka", marks=pytest.mark.kafka),
    pytest.param("tansu", marks=pytest.mark.tansu),
]


@attrs.frozen
class RealBroker:
    """A running broker of either kind: `bootstrap`, `kind`, `port`, and `name(base)`."""

    kind: str
    process: KafkaNode | TansuBroker
    tag: str

    @property
    def bootstrap(self) -> str:
        return self.process.bootstrap

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def is_kafka(self) -> bool:
        return self.kind == "kafka"

    def name(self, base: str) -> str:
        """`base` made unique to this fixture instance (a topic, transactional id, group)."""
        return f"{base}-{self.tag}"


@contextlib.contextmanager
def real_broker_for(request: pytest.FixtureRequest, kind: str, tag: str) -> Iterator[RealBroker]:
    """The module's Kafka node (the `kafka` fixture), or a fresh Tansu."""
    if kind == "kafka":
        node: KafkaNode = request.getfixturevalue("kafka")
        yield RealBroker("kafka", node, f"{tag}{uuid.uuid4().hex[:4]}")
        return
    with tansu_broker() as tansu:
        yield RealBroker("tansu", tansu, tag)


def real_broker_per_backend() -> Any:
    """A module's `real_broker` when the module runs on both anyio backends
    (`pytest.mark.anyio`): one per (broker kind, backend). In the module:
    `real_broker = real_broker_per_backend()`."""

    @pytest.fixture(scope="module")
    def real_broker(
        request: pytest.FixtureRequest, broker_kind: str, anyio_backend: str
    ) -> Iterator[RealBroker]:
        with real_broker_for(request, broker_kind, anyio_backend[:2]) as broker:
            yield broker

    return real_broker


def tansu_differs(request: pytest.FixtureRequest, broker: RealBroker, reason: str) -> None:
    """On Tansu, this test is expected to fail (strictly) for `reason`."""
    if broker.kind == "tansu":
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"Tansu: {reason}"))


class RecordingTransport:
    """A TCP transport that notes every request it carries as (api key, version), in
    the order written: what a test asserts the client sent (e.g. no AddPartitionsToTxn
    under transactions v2)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, int]] = []
        self._inner = TcpTransport()

    def count(self, api_key: int) -> int:
        return sum(1 for key, _ in self.sent if key == api_key)

    def versions(self, api_key: int) -> set[int]:
        return {version for key, version in self.sent if key == api_key}

    async def connect(self, host: str, port: int) -> ByteStream:
        return _RecordingStream(await self._inner.connect(host, port), self.sent)


class _RecordingStream:
    def __init__(self, inner: ByteStream, sent: list[tuple[int, int]]) -> None:
        self._inner = inner
        self._sent = sent
        self._pending = bytearray()

    async def send_all(self, data: bytes | bytearray | memoryview, /) -> None:
        self._pending += data
        while len(self._pending) >= 8:
            size = int.from_bytes(self._pending[:4], "big")
            if len(self._pending) < 4 + size:
                break
            key, version = struct.unpack(">hh", self._pending[4:8])
            self._sent.append((key, version))
            del self._pending[: 4 + size]
        await self._inner.send_all(data)

    async def receive_some(self, max_bytes: int, /) -> bytes | bytearray:
        return await self._inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._inner.aclose()
