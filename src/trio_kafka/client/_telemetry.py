"""OpenTelemetry for the producer: spans, metrics and trace context, as the messaging
semantic conventions (v1.44) lay them out, when the application has set OpenTelemetry up.

Theory of operation. `telemetry_for(setting, client_id)` decides once, when a producer
opens: with `telemetry=None` (the default) it is on only if the `opentelemetry` package
is importable and the application has installed an SDK tracer or meter provider as the
global one (the API's own default providers are no-ops: then nothing here runs, and
`send()` keeps its fast path, so telemetry that is not configured costs nothing per
record). `telemetry=False` turns it off, `True` requires it.

When on, every record gets a `send {topic}` span of kind PRODUCER, started in `send()`
(a child of the caller's current span) and ended when its outcome is known, with
`messaging.system=kafka`, `messaging.operation.name`/`type=send`,
`messaging.destination.name`, `messaging.client.id`, then
`messaging.destination.partition.id` and `messaging.kafka.offset` (or `error.type` and an
error status), and `messaging.kafka.message.key` for a key that is UTF-8 text. The span's
context goes into the record's headers as W3C trace context (`traceparent`,
`tracestate`: the global propagator's fields) unless `telemetry_headers=False`, so a
consumer can continue the trace. Two metrics: `messaging.client.sent.messages` (a
counter, per record, by topic, partition and `error.type`) and
`messaging.client.operation.duration` (a histogram in seconds, from `send()` to the
outcome). A transaction gets a span of its own (`transaction`, INTERNAL) that is current
inside `async with producer.transaction()`, so the records sent there are its children.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from trio_kafka.core import Acknowledged
from trio_kafka.errors import ConfigError

if TYPE_CHECKING:
    from trio_kafka.core import DeliveryHandle, Headers

logger = logging.getLogger("trio_kafka.telemetry")

#: The instrumentation scope's name (the tracer's and the meter's).
SCOPE = "trio_kafka"

_SYSTEM = "kafka"


def _configured() -> bool:
    """Whether the application installed a tracer or meter provider of its own (the
    API's defaults, a proxy to nothing, are not)."""
    from opentelemetry import metrics, trace

    tracer = trace.get_tracer_provider()
    meter = metrics.get_meter_provider()
    idle_traces = isinstance(tracer, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    idle_metrics = isinstance(
        meter, metrics._internal._ProxyMeterProvider | metrics.NoOpMeterProvider
    )
    return not (idle_traces and idle_metrics)


def require_opentelemetry() -> None:
    """Raise `ConfigError` naming the extra when OpenTelemetry is not installed."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError:
        raise ConfigError(
            "telemetry=True needs OpenTelemetry: pip install 'trio-kafka[otel]' "
            "(and set a tracer or meter provider, e.g. the SDK's)"
        ) from None


def telemetry_for(
    setting: bool | None, client_id: str, *, headers: bool = True
) -> Telemetry | None:
    """The producer's telemetry, or None when it is off (the module doc)."""
    if setting is False:
        return None
    if setting:
        require_opentelemetry()
    else:
        try:
            import opentelemetry.trace  # noqa: F401
        except ImportError:
            return None
    if setting is None and not _configured():
        return None
    return Telemetry(client_id, headers=headers)


class Telemetry:
    """Spans, metrics and trace context for one producer (the module doc)."""

    def __init__(self, client_id: str, *, headers: bool) -> None:
        from opentelemetry import metrics, propagate, trace

        self._trace = trace
        self._propagate = propagate
        self.client_id = client_id
        self.headers = headers
        self.tracer = trace.get_tracer(SCOPE)
        meter = metrics.get_meter(SCOPE)
        self.sent = meter.create_counter(
            "messaging.client.sent.messages",
            unit="{message}",
            description="Number of messages the producer attempted to send to the broker.",
        )
        self.duration = meter.create_histogram(
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of the send operation, from send() to its outcome.",
        )

    def start_send(
        self, topic: str, key: bytes | None, headers: Headers | None
    ) -> tuple[Any, Headers | None]:
        """Start a record's `send {topic}` span; the headers with its trace context."""
        attributes: dict[str, Any] = {
            "messaging.system": _SYSTEM,
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.destination.name": topic,
            "messaging.client.id": self.client_id,
        }
        if key is not None:
            with contextlib.suppress(UnicodeDecodeError):
                attributes["messaging.kafka.message.key"] = key.decode()
        span = self.tracer.start_span(
            f"send {topic}", kind=self._trace.SpanKind.PRODUCER, attributes=attributes
        )
        if self.headers:
            carrier: dict[str, str] = {}
            self._propagate.inject(carrier, context=self._trace.set_span_in_context(span))
            if carrier:
                added = [(name, value.encode()) for name, value in carrier.items()]
                headers = [*(headers or ()), *added]
        return span, headers

    def watch(self, handle: DeliveryHandle, span: Any, topic: str) -> None:
        """End `span` with the record's outcome, and count it."""
        started = time.monotonic()

        def done(handle: DeliveryHandle) -> None:
            outcome = handle.outcome
            attributes: dict[str, Any] = {
                "messaging.system": _SYSTEM,
                "messaging.operation.name": "send",
                "messaging.destination.name": topic,
            }
            if isinstance(outcome, Acknowledged):
                attributes["messaging.destination.partition.id"] = str(outcome.partition)
                span.set_attribute("messaging.destination.partition.id", str(outcome.partition))
                if outcome.offset >= 0:
                    span.set_attribute("messaging.kafka.offset", outcome.offset)
            elif outcome is not None:
                error = type(outcome.error).__qualname__
                attributes["error.type"] = error
                attributes["messaging.destination.partition.id"] = str(outcome.partition)
                span.set_attribute("error.type", error)
                span.set_status(
                    self._trace.Status(self._trace.StatusCode.ERROR, str(outcome.error))
                )
            self.sent.add(1, attributes)
            self.duration.record(time.monotonic() - started, attributes)
            span.end()

        handle.add_done_callback(done)

    def fail(self, span: Any, topic: str, error: BaseException) -> None:
        """`send()` raised: the span ends with the error, and the record is counted."""
        name = type(error).__qualname__
        span.set_attribute("error.type", name)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
        span.end()
        self.sent.add(
            1,
            {
                "messaging.system": _SYSTEM,
                "messaging.operation.name": "send",
                "messaging.destination.name": topic,
                "error.type": name,
            },
        )

    def begin_transaction(self, transactional_id: str) -> Any:
        """Start a `transaction` span (INTERNAL), ended by `end_transaction`."""
        return self.tracer.start_span(
            "transaction",
            kind=self._trace.SpanKind.INTERNAL,
            attributes={
                "messaging.system": _SYSTEM,
                "messaging.client.id": self.client_id,
                "messaging.kafka.transactional_id": transactional_id,
            },
        )

    def end_transaction(self, span: Any, outcome: str, error: BaseException | None) -> None:
        """End a transaction's span: `outcome` is "commit" or "abort"; `error` what the
        commit or abort raised, if anything."""
        span.set_attribute("messaging.kafka.transaction.outcome", outcome)
        if error is not None:
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
        span.end()

    def begin_load(self, topic: str, load_id: str) -> Any:
        """Start a bulk load's `load {topic}` span (one for the run, none per row)."""
        return self.tracer.start_span(
            f"load {topic}",
            kind=self._trace.SpanKind.PRODUCER,
            attributes={
                "messaging.system": _SYSTEM,
                "messaging.operation.name": "load",
                "messaging.operation.type": "send",
                "messaging.destination.name": topic,
                "messaging.kafka.load_id": load_id,
            },
        )

    def end_load(self, span: Any, result: Any, error: BaseException | None) -> None:
        """End a load's span with what the run did (`LoadResult`) or its error."""
        if result is not None:
            span.set_attribute("messaging.batch.message_count", result.loaded)
            span.set_attribute("messaging.kafka.load.skipped", result.skipped)
            span.set_attribute("messaging.kafka.load.guarantee", result.guarantee)
        if error is not None:
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, str(error)))
        span.end()

    @contextlib.contextmanager
    def current(self, span: Any) -> Iterator[None]:
        """`span` is the current span for the block (records sent there are its
        children)."""
        with self._trace.use_span(span, end_on_exit=False):
            yield
