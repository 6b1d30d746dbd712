"""One request's outcome on a connection: `PendingResponse`, set once by the
connection's reader (the response or an error) or by its close (an error)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import anyio
import attrs

from trio_kafka.net._clock import Event
from trio_kafka.protocol import REQUEST_CLASSES, decode_response

_PRODUCE_KEY = 0


def request_name(request_class: type[Any]) -> str:
    """The request's API as its message class is named (`ProduceRequest`), also for a
    class that writes one its own way (the producer's `ProduceFrame`)."""
    return str(REQUEST_CLASSES.get(request_class.API_KEY, request_class).__name__)


#: (frame, version) -> (correlation id, response), as `decode_response` reads it.
ResponseReader = Callable[[bytes, int], tuple[int, Any]]


def expects_response(message: Any) -> bool:
    """False only for a Produce request with acks=0, which the broker never answers."""
    return not (type(message).API_KEY == _PRODUCE_KEY and getattr(message, "acks", -1) == 0)


@attrs.define(eq=False)
class PendingResponse:
    """The outcome of one request: `await pending` (or `await pending.wait()`) gives the
    response or raises; `done()` never blocks."""

    api_key: int
    version: int
    correlation_id: int
    #: When the response must have arrived (the event loop's timescale); inf for none.
    deadline: float
    request_class: type[Any]
    #: False for a Produce with acks=0: done as soon as it is written.
    expects_response: bool = True
    #: Reads the response frame at `version` into (correlation id, response); None for
    #: the generic codec (`decode_response`).
    reader: ResponseReader | None = None
    # Set exactly once, by the reader (response or error) or the closer (error). The
    # connection passes its backend's class (net/_clock.py: `primitives`).
    _event: Event = attrs.field(factory=anyio.Event, alias="event")
    _response: Any = attrs.field(default=None, init=False)
    _error: BaseException | None = attrs.field(default=None, init=False)

    def done(self) -> bool:
        return self._event.is_set()

    def read(self, frame: bytes, version: int) -> Any:
        """The response in `frame` (its reader's, or the generic codec's); raises
        `ProtocolError` for a frame that does not decode."""
        if self.reader is None:
            return decode_response(self.request_class, version, frame)[1]
        return self.reader(frame, version)[1]

    def result(self) -> Any:
        """The response (None for acks=0); raises the error; only once `done()`."""
        if not self._event.is_set():
            raise RuntimeError("the response has not arrived yet")
        if self._error is not None:
            raise self._error
        return self._response

    async def wait(self) -> Any:
        await self._event.wait()
        return self.result()

    def __await__(self) -> Generator[Any, None, Any]:
        return self.wait().__await__()

    def _set_response(self, response: Any) -> None:
        if not self._event.is_set():
            self._response = response
            self._event.set()

    def _set_error(self, error: BaseException) -> None:
        if not self._event.is_set():
            self._error = error
            self._event.set()

    def __repr__(self) -> str:
        if not self._event.is_set():
            state = "IN-FLIGHT"
        elif self._error is not None:
            state = f"FAILED {type(self._error).__name__}"
        else:
            state = "DONE"
        return (
            f"<PendingResponse [{request_name(self.request_class)} v{self.version}, "
            f"correlation id {self.correlation_id}, {state}]>"
        )


__all__ = ["PendingResponse", "expects_response"]
