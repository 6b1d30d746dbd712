"""The one bridge between calling threads and a trio run in its own thread.

Theory of operation
-------------------
`TrioThread(main)` starts a daemon thread running `trio.run(main, portal)`; the
constructor returns once `main` calls `portal.started()` (or re-raises what `main` raised
before that). From then on other threads talk to the run in two ways only:

- `put(item)`: hand an item to the run's inbox, in order. The inbox is a deque; the run
  is woken with `TrioToken.run_sync_soon` (trio's one thread-safe entry) only when no
  wakeup is already on its way, so a burst of a thousand puts costs one wakeup. The
  trio side takes everything queued with `await portal.take()`.
- `run_sync_soon(fn, *args)`: run a plain function in the run's thread, out of band
  (for what must not wait behind the inbox, such as hurrying a close).

When the run ends, for whatever reason, every item still in the inbox is passed to
`on_abandoned(item)`, and later `put`s return False: nothing handed over is ever left
without an answer. `join(timeout)` waits for the thread.

Kept small and in one place on purpose: a later issue replaces it with anyio's blocking
portal (docs/design.md, "asyncio too").
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import trio

_Item = TypeVar("_Item")

_names = itertools.count(1)


class TrioThread(Generic[_Item]):
    """A trio run in a daemon thread with an ordered inbox (see the module doc)."""

    def __init__(
        self,
        main: Callable[[TrioThread[_Item]], Awaitable[None]],
        *,
        name: str,
        on_abandoned: Callable[[_Item], None],
        startup_timeout: float,
    ) -> None:
        self._main = main
        self._on_abandoned = on_abandoned
        # Items from calling threads, taken in order by the trio side.
        self._inbox: collections.deque[_Item] = collections.deque()
        # Guards _kicked, _finished and the token (calling threads and the trio thread).
        self._lock = threading.Lock()
        # True while a wakeup of the trio side is scheduled and has not run yet.
        self._kicked = False
        # True once the run has ended: put() refuses from then on.
        self._finished = False
        self._token: trio.lowlevel.TrioToken | None = None
        # Set (in the trio thread) when the inbox may have items; owned by take().
        self._wake: trio.Event | None = None
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self.thread = threading.Thread(target=self._run, name=f"{name}-{next(_names)}", daemon=True)
        self.thread.start()
        try:
            self._started.result(timeout=startup_timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(
                f"the {name} thread did not start within {startup_timeout} s"
            ) from None

    # -- any thread ----------------------------------------------------------------------

    def put(self, item: _Item) -> bool:
        """Queue `item` for the trio side; False (nothing queued) once the run is over."""
        with self._lock:
            if self._finished:
                return False
            self._inbox.append(item)
            if self._kicked or self._token is None:
                return True
            self._kicked = True
            token = self._token
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(self._kick)
        return True

    def run_sync_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Call `fn(*args)` in the trio thread soon (nothing happens if the run is over)."""
        with self._lock:
            token = None if self._finished else self._token
        if token is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(fn, *args)

    def in_trio_thread(self) -> bool:
        return threading.current_thread() is self.thread

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the thread to end; True if it has."""
        self.thread.join(timeout)
        return not self.thread.is_alive()

    # -- the trio thread -----------------------------------------------------------------

    def started(self) -> None:
        """Called once by `main` when it is ready: the constructor returns."""
        with self._lock:
            self._token = trio.lowlevel.current_trio_token()
        self._wake = trio.Event()
        if self._inbox:
            self._wake.set()
        self._started.set_result(None)

    async def take(self) -> list[_Item]:
        """Every item queued so far, in order (waits for at least one)."""
        inbox = self._inbox
        while not inbox:
            assert self._wake is not None, "take() before started()"
            if self._wake.is_set():
                self._wake = trio.Event()
            await self._wake.wait()
        items = list(inbox)
        for _ in range(len(items)):
            inbox.popleft()
        return items

    def _kick(self) -> None:
        with self._lock:
            self._kicked = False
        if self._wake is not None:
            self._wake.set()

    def _run(self) -> None:
        try:
            trio.run(self._main, self)
        except BaseException as exc:
            if not self._started.done():
                self._started.set_exception(exc)
            else:
                raise
        finally:
            with self._lock:
                self._finished = True
            while self._inbox:
                self._on_abandoned(self._inbox.popleft())


__all__ = ["TrioThread"]
