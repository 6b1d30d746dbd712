"""Our mock broker for tests that run on both backends (`pytest.mark.anyio`).

The mock broker is trio's (`trio_kafka.broker`). Under trio, `mock_cluster` is
`open_cluster` in the test's own run, as before. Under asyncio it runs the same
`open_cluster` in a trio thread of its own (anyio's blocking portal) and the client
reaches it over TCP like any client; the test gets a `ThreadCluster`, whose method calls
(`create_topic`, `move_leader`, `add_hook`, `decoded`, ...) run in the broker's thread,
so the broker's state is only ever changed by that thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import sniffio

from trio_kafka.broker import Cluster, open_cluster


class ThreadCluster:
    """A `Cluster` served in another thread: methods run there, values read here."""

    def __init__(self, cluster: Cluster, portal: anyio.from_thread.BlockingPortal) -> None:
        self._cluster = cluster
        self._portal = portal

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._cluster, name)
        if not callable(value):
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._portal.call(_call, value, args, kwargs)

        return call


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return fn(*args, **kwargs)


@contextlib.asynccontextmanager
async def mock_cluster(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
    """`open_cluster(*args, **kwargs)` on the running backend (see the module doc)."""
    if sniffio.current_async_library() == "trio":
        async with open_cluster(*args, **kwargs) as cluster:
            yield cluster
        return
    stack = contextlib.ExitStack()

    def start() -> ThreadCluster:
        portal = stack.enter_context(anyio.from_thread.start_blocking_portal("trio"))
        cluster = stack.enter_context(
            portal.wrap_async_context_manager(open_cluster(*args, **kwargs))
        )
        return ThreadCluster(cluster, portal)

    cluster = await anyio.to_thread.run_sync(start)
    try:
        yield cluster
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(stack.close)
