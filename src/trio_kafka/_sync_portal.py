"""The one bridge between calling threads and the event loop in the producer's thread.

Theory of operation
-------------------
`LoopThread(main)` starts anyio's blocking portal (`anyio.from_thread.
start_blocking_portal`, trio backend: trio stays first): a daemon thread running an event
loop that other threads reach through the portal. The constructor starts `main` with
`portal.start_task_soon` and returns once `main` calls `portal.started()` (or re-raises what
`main` raised before that). From then on other threads talk to `main` in two ways only:

- `put(item)`: hand an item to the run's inbox, in order. The inbox is a deque; the run
  is woken only when no wakeup is already on its way, so a burst of a thousand puts costs
  one wakeup. The wakeup is anyio's event loop token (`anyio.lowlevel.current_token()`,
  trio's `TrioToken.run_sync_soon` underneath), which never waits for the loop: callers
  put while holding the ledger's lock, which the loop thread also takes, so a put that
  waited for the loop (as the portal's own `call` and `start_task_soon` do) could wait
  forever. The loop side takes everything queued with `await portal.take()`.
- `run_soon(fn, *args)`: run a plain function in the loop thread, out of band (for
  what must not wait behind the inbox, such as hurrying a close), through the portal.

When `main` ends, for whatever reason, every item still in the inbox is passed to
`on_abandoned(item)`, and later `put`s return False: nothing handed over is ever left
without an answer. `join(timeout)` waits for `main` to end (bounded: a close never hangs
on the thread), then stops the portal, which ends the thread.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

_Item = TypeVar("_Item")

_names = itertools.count(1)


class LoopThread(Generic[_Item]):
    """`main` on an event loop in a daemon thread, with an ordered inbox (module doc)."""

    def __init__(
        self,
        main: Callable[[LoopThread[_Item]], Awaitable[None]],
        *,
        name: str,
        on_abandoned: Callable[[_Item], None],
        startup_timeout: float,
        backend: str = "trio",
    ) -> None:
        self._main = main
        self._on_abandoned = on_abandoned
        # Items from calling threads, taken in order by the loop side.
        self._inbox: collections.deque[_Item] = collections.deque()
        # Guards _kicked, _finished and the token (calling threads and the loop thread).
        self._lock = threading.Lock()
        # True while a wakeup of the loop side is scheduled and has not run yet.
        self._kicked = False
        # True once main has ended: put() refuses from then on.
        self._finished = False
        self._token: anyio.lowlevel.EventLoopToken | None = None
        # Set (in the loop thread) when the inbox may have items; owned by take().
        self._wake: anyio.Event | None = None
        # The loop thread's ident (for in_loop_thread).
        self._thread_id: int | None = None
        # Set by started(); main's own outcome is the portal's future for it.
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._stack = contextlib.ExitStack()
        self.thread_name = f"{name}-{next(_names)}"
        self._portal = self._stack.enter_context(
            anyio.from_thread.start_blocking_portal(backend, name=self.thread_name)
        )
        self._ended = self._portal.start_task_soon(self._run)
        concurrent.futures.wait(
            (self._started, self._ended),
            timeout=startup_timeout,
            return_when=concurrent.futures.FIRST_COMPLETED,
        )
        if not self._started.done():
            if self._ended.done():
                self._stack.close()
                self._ended.result()  # raises what main raised before started()
            raise TimeoutError(f"the {name} thread did not start within {startup_timeout} s")

    # -- any thread ----------------------------------------------------------------------

    def put(self, item: _Item) -> bool:
        """Queue `item` for the loop side; False (nothing queued) once main is over."""
        with self._lock:
            if self._finished:
                return False
            self._inbox.append(item)
            if self._kicked or self._token is None:
                return True
            self._kicked = True
            token = self._token
        with contextlib.suppress(anyio.RunFinishedError):
            token.backend_class.run_sync_soon(self._kick, (), token.native_token)
        return True

    def run_soon(self, fn: Callable[..., object], *args: Any) -> None:
        """Call `fn(*args)` in the loop thread soon (nothing happens once main is over)."""
        with self._lock:
            if self._finished:
                return
        with contextlib.suppress(RuntimeError, anyio.RunFinishedError):
            self._portal.start_task_soon(_call_sync, fn, args)

    def in_loop_thread(self) -> bool:
        return threading.get_ident() == self._thread_id

    def is_alive(self) -> bool:
        return not self._ended.done()

    def join(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` for main to end, then stop the portal (the thread ends);
        True if it has ended."""
        try:
            self._ended.result(timeout)
        except concurrent.futures.TimeoutError:
            return False
        except BaseException:  # main's own failure was reported where it happened
            pass
        self._stack.close()
        return True

    # -- the loop thread -----------------------------------------------------------------

    def started(self) -> None:
        """Called once by `main` when it is ready: the constructor returns."""
        with self._lock:
            self._token = anyio.lowlevel.current_token()
        self._wake = anyio.Event()
        if self._inbox:
            self._wake.set()
        self._started.set_result(None)

    async def take(self) -> list[_Item]:
        """Every item queued so far, in order (waits for at least one)."""
        inbox = self._inbox
        while not inbox:
            assert self._wake is not None, "take() before started()"
            if self._wake.is_set():
                self._wake = anyio.Event()
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

    async def _run(self) -> None:
        self._thread_id = threading.get_ident()
        try:
            await self._main(self)
        finally:
            with self._lock:
                self._finished = True
            while self._inbox:
                self._on_abandoned(self._inbox.popleft())


async def _call_sync(fn: Callable[..., object], args: tuple[Any, ...]) -> None:
    fn(*args)


__all__ = ["LoopThread"]
