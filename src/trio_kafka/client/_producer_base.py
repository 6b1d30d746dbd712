"""`ProducerBase`: what the mixins of `Producer` (`_send_many.py`, `_cas_send.py`,
`_closing.py`, `_txn_calls.py`) use of it, declared once, for the type checker.

`Producer` (`_producer.py`) sets every attribute below in its `__init__` and defines
every method; a mixin's method reaches them through `self`. At run time this class is
empty: the attributes are annotations only and the method stubs exist only under
TYPE_CHECKING, so nothing here can shadow `Producer`'s own. Something a mixin needs of the
producer is declared here, not in the mixin. (The transaction driver has its own, smaller
view, `_transactions.TransactionHost`: it is not a mixin, and naming this class there would
tie the two modules in a cycle.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import anyio

    from trio_kafka.client._handles import RecordHandle
    from trio_kafka.client._sender import Sender
    from trio_kafka.client._telemetry import Telemetry
    from trio_kafka.client._transactions import TransactionDriver
    from trio_kafka.client._waiting_topic import WaitingTopic
    from trio_kafka.errors import KafkaError
    from trio_kafka.net import Event, KafkaSelector, TaskGroup
    from trio_kafka.producer import (
        BatchSpan,
        DeliveryHandle,
        Headers,
        ProducerBatch,
        ProducerConfig,
        ProducerCore,
        ProducerRecord,
    )


class ProducerBase:
    """The state and calls of `Producer` its mixins share (see the module doc)."""

    config: ProducerConfig
    selector: KafkaSelector
    # The sans-IO core (accumulator, sequencing) and the task that does the I/O.
    _core: ProducerCore
    _sender: Sender
    # The transaction driver: None unless transactional_id is set.
    _txn: TransactionDriver | None
    _telemetry: Telemetry | None
    _txn_span: Any
    # The nursery of the producer's own tasks (closing cancels it).
    _nursery: TaskGroup
    # Set when batches reach a final state (replaced each time: `_notify_progress`).
    _progress: Event
    # Serializers or interceptors: every send goes through `_prepare`.
    _slow: bool
    _closing: bool
    _closed: bool
    # send() calls so far (it checkpoints every 64).
    _calls: int
    # Cancel scopes of sends waiting for a topic's metadata: closing cancels them.
    _metadata_waits: set[anyio.CancelScope]
    # Records of topics whose metadata has not come yet, kept by topic (_pending.py).
    _waiting: dict[str, WaitingTopic]
    # Whether records queued there are kept (send() returns at once) once a broker has
    # answered, or their send() waits until they are placed.
    _keeps: bool
    _interceptors: tuple[Any, ...]
    _now: Callable[[], float]
    _checkpoint: Callable[[], Awaitable[None]]
    _new_event: Callable[[], Event]
    # The core's append, bound once (`ProducerCore.append`).
    _append: Callable[..., DeliveryHandle | None]

    if TYPE_CHECKING:

        async def send(
            self,
            topic: str | ProducerRecord,
            value: Any = None,
            *,
            key: Any = None,
            headers: Headers | None = None,
            partition: int | None = None,
            timestamp: int | None = None,
            expected_offset: int | None = None,
        ) -> RecordHandle: ...

        async def flush(self) -> None: ...

        def refresh_fast_path(self) -> None: ...

        def _refuse(self) -> None: ...

        def _prepare(
            self,
            topic: str,
            value: Any,
            key: Any,
            headers: Headers | None,
            partition: int | None,
            timestamp: int | None,
        ) -> tuple[str, Any, Any, Headers | None, int | None, int | None]: ...

        def _opened(self, batch: ProducerBatch) -> None: ...

        def _send_raised(self, topic: str, partition: int | None, error: KafkaError) -> None: ...

        def _notify_progress(self) -> None: ...

        async def _wait_for_topic(self, topic: str, deadline: float) -> None: ...

        async def _wait_for_metadata(self, topic: str, deadline: float) -> None: ...

        def _acknowledge(self, batch: ProducerBatch) -> None: ...

        def _buffer_full(
            self, size: int, waited: float, appended: list[BatchSpan] | None
        ) -> KafkaError: ...

        def _settle_all_waiting(
            self, error: KafkaError | None = None, timeout: float = 0.0
        ) -> None: ...

        async def _wait_for_room(
            self, deadline: float, size: int, appended: list[BatchSpan] | None
        ) -> None: ...


__all__ = ["ProducerBase"]
