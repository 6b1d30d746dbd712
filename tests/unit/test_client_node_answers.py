"""A node's Produce answers reach the core in the order the requests were written,
whatever order they end in: `NodeSender._answered`, called back by each answer
(`PendingResponse.on_done`), settles the oldest unsettled requests whose answers are in
and stops at the first still waiting (or not yet written).

The order matters to the core: a request that failed after a later one was answered
would otherwise be settled after it (a connection that breaks mid-write fails that
request, then the older ones in flight as it closes).
"""

from __future__ import annotations

import collections
import math
from typing import Any

import pytest

from trio_kafka.client._sender import NodeSender, ProduceAttempt
from trio_kafka.errors import ConnectionLostError, KafkaError
from trio_kafka.net import PendingResponse, primitives
from trio_kafka.protocol.messages import ProduceRequest


class RecordingSender:
    """The sender surface a NodeSender uses when answers come in: settling takes the
    attempt off its node's unsettled list (as `Sender._take` does) and is recorded."""

    def __init__(self) -> None:
        self.primitives = primitives()
        self.nodes: dict[int, NodeSender] = {}
        self.settled: list[tuple[Any, str]] = []

    def _take(self, attempt: ProduceAttempt) -> None:
        attempt.settled = True
        self.nodes[attempt.node].unsettled.remove(attempt)

    def settle_response(self, attempt: ProduceAttempt, response: Any) -> None:
        self._take(attempt)
        self.settled.append((attempt.batches[0], f"answer {response}"))

    def settle_failure(self, attempt: ProduceAttempt, error: KafkaError) -> None:
        self._take(attempt)
        self.settled.append((attempt.batches[0], f"failure {error}"))


def node_with(count: int) -> tuple[RecordingSender, NodeSender, list[ProduceAttempt]]:
    sender = RecordingSender()
    node = NodeSender(sender, 0)  # type: ignore[arg-type]
    sender.nodes[0] = node
    attempts = [ProduceAttempt(0, [i]) for i in range(count)]  # type: ignore[list-item]
    node.unsettled = collections.deque(attempts)
    return sender, node, attempts


def pending_answer(correlation_id: int = 0) -> PendingResponse:
    """A Produce's pending answer, as a connection registers it."""
    return PendingResponse(
        api_key=ProduceRequest.API_KEY,
        version=11,
        correlation_id=correlation_id,
        deadline=math.inf,
        request_class=ProduceRequest,
        event=primitives().event(),
    )


def written(node: NodeSender, attempt: ProduceAttempt) -> PendingResponse:
    """What the writer does once `connection.send` returned the pending answer."""
    pending = pending_answer(attempt.batches[0])  # type: ignore[arg-type]
    attempt.pending = pending
    pending.on_done(node._answered)
    return pending


async def test_answers_are_settled_in_write_order_whatever_order_they_end_in() -> None:
    sender, node, attempts = node_with(3)
    first, second, third = (written(node, a) for a in attempts)
    second._set_error(ConnectionLostError("lost"))
    assert sender.settled == []  # the first is still waiting: nothing may go before it
    third._set_response("c")
    assert sender.settled == []
    first._set_response("a")
    assert sender.settled == [(0, "answer a"), (1, "failure lost"), (2, "answer c")]
    assert not node.unsettled


async def test_a_request_not_yet_written_holds_back_the_answers_after_it() -> None:
    sender, node, attempts = node_with(2)
    later = written(node, attempts[1])
    later._set_response("b")
    assert sender.settled == []  # attempts[0] is still in the writer's outbox
    done = written(node, attempts[0])
    done._set_response("a")
    assert sender.settled == [(0, "answer a"), (1, "answer b")]


async def test_an_answer_already_in_when_written_is_settled_at_once() -> None:
    # The response can be read while the writer still waits in its socket write.
    sender, node, attempts = node_with(1)
    pending = pending_answer()
    pending._set_response("early")
    attempts[0].pending = pending
    pending.on_done(node._answered)
    assert sender.settled == [(0, "answer early")]


async def test_a_pending_response_takes_one_callback() -> None:
    pending = pending_answer()
    calls: list[str] = []
    pending.on_done(lambda: calls.append("one"))
    with pytest.raises(RuntimeError, match="one on_done callback"):
        pending.on_done(lambda: calls.append("two"))
    pending._set_error(ConnectionLostError("lost"))
    pending._set_response("late")  # (ignored: the outcome is set once)
    assert calls == ["one"]
    assert isinstance(pending.error, ConnectionLostError)
