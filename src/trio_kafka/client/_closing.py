"""`Producer.flush` and `Producer.aclose`: sending everything now and waiting for it,
and closing (abort an open transaction, flush within `close_timeout`, then settle the
rest without waiting and stop the producer's tasks). The order of a close and why:
`_producer.py`'s theory of operation.
"""

from __future__ import annotations

import anyio

from trio_kafka.client._producer_base import ProducerBase
from trio_kafka.errors import ProducerClosedError


class ClosingMixin(ProducerBase):
    """`Producer.flush`, `Producer.aclose` and the settling of everything at close."""

    async def flush(self) -> None:
        """Send everything appended so far now and wait until every record has settled.

        Raises `ProducerClosedError` once the producer is closed."""
        if self._closed:
            self._refuse()
        core = self._core
        core.begin_flush()
        try:
            self._sender.wake()
            while (core.has_unfinished or self._waiting) and self._sender.fatal_error is None:
                await self._progress.wait()
            await self._checkpoint()
        finally:
            core.end_flush()

    async def aclose(self, timeout: float | None = None) -> None:
        """Close the producer and return: abort an open transaction (as Java's `close`
        does), flush for up to `timeout` (default `close_timeout`), then settle the rest
        without waiting (see the module doc) and stop the tasks. Callable anywhere, also
        inside `async with open_producer(...)` (whose exit is then a no-op); later
        `send()` and `flush()` raise `ProducerClosedError`."""
        if self._closed or self._closing:
            await self._checkpoint()
            return
        timeout = self.config.close_timeout if timeout is None else timeout
        if timeout < 0:
            raise ValueError(f"aclose(timeout={timeout}) is not allowed: it must be >= 0")
        with anyio.move_on_after(timeout):
            if self._txn is not None:
                await self._txn.abort_bounded()
            self._closing = True
            self.refresh_fast_path()
            core = self._core
            core.close()
            self._sender.wake()
            while (core.has_unfinished or self._waiting) and self._sender.fatal_error is None:
                await self._progress.wait()
        self._settle_everything(timeout)

    def _settle_everything(self, timeout: float) -> None:
        if self._closed:
            return
        self._closed = True
        self._closing = True
        self.refresh_fast_path()
        self._core.close()
        error = ProducerClosedError(
            "the producer closed before this record was acknowledged (within its close "
            f"timeout of {timeout} s)"
        )
        self._sender.closing = True
        self._settle_all_waiting(None, timeout)
        for node in list(self._sender.nodes.values()):
            node.settle_all(error)
        self._core.fail_all(error)
        self._notify_progress()
        for scope in self._metadata_waits:
            scope.cancel()
        self._nursery.cancel_scope.cancel()


__all__ = ["ClosingMixin"]
