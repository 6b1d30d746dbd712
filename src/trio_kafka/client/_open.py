"""`open_producer()`: an idempotent (or transactional) producer for an `async with`
block, on trio or asyncio. It builds the selector (unless one is shared), starts the
producer's tasks in a task group of their own, and closes the producer on the way out
(see `Producer`'s theory of operation in `_producer.py`).

This is also the one place where client/ reaches for the OS: the default clock,
randomness and wall time (`edge_defaults`), and a fresh conditional-writer id
(`new_writer_id`). Everything else in client/ receives these as arguments, so the
simulator can inject a virtual clock, a seeded generator and a virtual wall clock and
replay a run exactly.
"""

from __future__ import annotations

import contextlib
import importlib.util
import random
import ssl
import time
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

import anyio
import anyio.abc

from trio_kafka.client._producer import Producer, running
from trio_kafka.client._security import Security, pop_security
from trio_kafka.client._telemetry import require_opentelemetry
from trio_kafka.core import Harness, ProducerConfig
from trio_kafka.errors import ConfigError
from trio_kafka.net import (
    Clock,
    KafkaSelector,
    SaslConfig,
    TaskGroup,
    Transport,
    TrioClock,
    only_error,
    open_selector,
    open_task_group,
)

_SELECTOR_OPTIONS = (
    "client_id",
    "request_timeout",
    "max_in_flight",
    "reconnect_backoff",
    "reconnect_backoff_max",
    "retry_backoff",
    "retry_backoff_max",
    "connections_max_idle",
    "metadata_max_age",
    "metadata_max_idle",
    "max_block",
)


async def _task_nursery(*, task_status: anyio.abc.TaskStatus[TaskGroup]) -> None:
    """Hand back a task group that lives until its scope is cancelled (by `aclose`)."""
    async with open_task_group() as tasks:
        task_status.started(tasks)
        await anyio.sleep_forever()


@contextlib.asynccontextmanager
async def open_producer(
    bootstrap: str | Iterable[str] | None = None,
    *,
    selector: KafkaSelector | None = None,
    transport: Transport | None = None,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    wall_clock: Callable[[], float] | None = None,
    tls: ssl.SSLContext | bool | None = None,
    sasl: SaslConfig | None = None,
    metrics_interval: float = 60.0,
    harness: Harness | None = None,
    **options: Any,
) -> AsyncIterator[Producer]:
    """An idempotent producer, flushed and closed on exit (within `close_timeout`).

    `options` are `ProducerConfig` fields (`acks`, `linger`, `compression`, ...; a typo
    names the closest option). TLS: `tls=` an `ssl.SSLContext` (or True: the system
    trust store); SASL: `sasl=SaslConfig(mechanism, username, password)`; or Kafka's
    names, `security_protocol='SASL_SSL'`, `sasl_mechanism`, `sasl_plain_username`,
    `sasl_plain_password`, `ssl_cafile`, ... (client/_security.py, docs/security.md). Pass `selector` to share one `KafkaSelector` between
    producers (then `bootstrap`, `transport` and `sasl` are the selector's business).
    `clock`, `rng` and `wall_clock` are seams for the simulator; the defaults are the event
    loop's clock, an unseeded `random.Random` and `time.time`. `harness` is for test
    harnesses only (the simulator): the rules the producer's decisions follow and a
    fault hook (`Harness`; None: the client as it ships). The producer's metrics are
    logged at DEBUG on the `trio_kafka.producer` logger every `metrics_interval` seconds.
    """
    security = pop_security(options, tls, sasl)  # Kafka's security names leave options
    config = ProducerConfig.from_kwargs(**options)
    if config.compression in ("snappy", "lz4") and importlib.util.find_spec("cramjam") is None:
        # Refused now: in the sender, every batch would fail to encode.
        raise ConfigError(
            f"compression={config.compression!r} needs the cramjam library: "
            "pip install 'trio-kafka[compression]' (gzip and zstd need nothing more)"
        )
    if config.telemetry:
        require_opentelemetry()  # refused now, before any connection
    harness = Harness.given(harness)
    if isinstance(metrics_interval, bool) or not isinstance(metrics_interval, int | float):
        raise ConfigError(
            f"metrics_interval={metrics_interval!r} is not allowed: it must be a number of "
            f"seconds (0: never), not {type(metrics_interval).__name__}"
        )
    clock, rng, wall_clock = edge_defaults(clock, rng, wall_clock)
    # The exception the body raised, if any: the nurseries below wrap it in exception
    # groups, and the caller should see it as raised (`except RuntimeError` must work).
    body_error: BaseException | None = None
    try:
        async with contextlib.AsyncExitStack() as stack:
            if selector is None:
                if bootstrap is None:
                    raise ConfigError("open_producer needs bootstrap='host:port' or selector=")
                selector_options: dict[str, Any] = {
                    name: getattr(config, name) for name in _SELECTOR_OPTIONS
                }
                selector = await stack.enter_async_context(
                    open_selector(
                        bootstrap,
                        transport=security.transport(transport),
                        clock=clock,
                        rng=rng,
                        sasl=security.sasl,
                        **selector_options,
                    )
                )
            elif transport is not None or security != Security():
                raise ConfigError(
                    "transport=, tls=, sasl= and the security options belong to the "
                    "selector: pass them or selector=, not both"
                )
            async with open_task_group() as nursery:
                # The producer's tasks run in a task group of their own, so that closing
                # (which cancels them) never cancels the caller's block.
                tasks: TaskGroup = await nursery.start(_task_nursery)
                producer = Producer(
                    config, selector, clock, rng, wall_clock() - clock.now(), tasks, harness
                )
                # Started here, closed on the way out (at once if the body raised).
                async with running(producer, metrics_interval):
                    try:
                        yield producer
                    except BaseException as exc:
                        body_error = exc
                        raise
    except BaseExceptionGroup as group:
        if body_error is not None and only_error(group, body_error):
            raise body_error from body_error.__cause__
        raise


def edge_defaults(
    clock: Clock | None,
    rng: random.Random | None,
    wall_clock: Callable[[], float] | None,
) -> tuple[Clock, random.Random, Callable[[], float]]:
    """Fill in what the caller did not inject: trio's clock, a fresh unseeded generator
    (never the global one), and `time.time` for record timestamps."""
    return (
        clock if clock is not None else TrioClock(),
        rng if rng is not None else random.Random(),
        wall_clock if wall_clock is not None else time.time,
    )


def new_writer_id() -> str:
    """A fresh conditional-writer id (`uuid4`): the default of `open_conditional_writer`'s
    `writer_ids` seam; the simulator passes a deterministic source instead."""
    import uuid

    return uuid.uuid4().hex


__all__ = ["edge_defaults", "new_writer_id", "open_producer"]
