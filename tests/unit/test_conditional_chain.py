"""The chain of a CAS writer's pipelined appends (client/_conditional.py, `_Chain`):
whether an append sent is in doubt, the question every later append asks before it is
sent. A count kept by the answers of the batches and the settling of the appends, not a
walk of the appends in flight (issue 35)."""

from __future__ import annotations

from trio_kafka.client._conditional import _Chain, _Link
from trio_kafka.client._handles import RecordHandle
from trio_kafka.core import ProducerBatch
from trio_kafka.errors import ExpectedOffsetMismatchError


def _sent(chain: _Chain, batch: ProducerBatch, expected: int) -> _Link:
    """An append at `expected`, in `batch`, handed to the producer."""
    link = _Link(b"v", None, [], expected, expected, chain)
    batch.values.append(b"v")
    link.handle = RecordHandle(batch, len(batch.values) - 1)
    chain.sent(link)
    return link


def _mismatch(batch: ProducerBatch) -> None:
    batch.fail(
        ExpectedOffsetMismatchError(
            "taken", expected_offset=batch.expected_offset, log_end_offset=9
        )
    )


def test_appends_answered_with_a_failure_are_in_doubt_before_their_tasks_run() -> None:
    chain = _Chain()
    batch = ProducerBatch("log", 0, 1024, 0.0, expected_offset=0)
    first, second = _sent(chain, batch, 0), _sent(chain, batch, 1)
    assert not chain.in_doubt()
    _mismatch(batch)  # (no task has run: only the batch's answer says so)
    assert chain.in_doubt()
    assert first.doubted and second.doubted


def test_the_doubt_ends_once_every_append_answered_so_is_settled() -> None:
    chain = _Chain()
    batch = ProducerBatch("log", 0, 1024, 0.0, expected_offset=0)
    first, second = _sent(chain, batch, 0), _sent(chain, batch, 1)
    _mismatch(batch)
    first.failed = True
    chain.settle(first)
    assert chain.in_doubt()
    chain.doubt(second)  # its task met the answer too: counted once
    second.failed = True
    chain.settle(second)
    assert not chain.in_doubt()


def test_appends_acknowledged_put_none_in_doubt_and_leave_the_chain() -> None:
    chain = _Chain()
    batch = ProducerBatch("log", 0, 1024, 0.0, expected_offset=0)
    links = [_sent(chain, batch, n) for n in range(3)]
    batch.complete(0)
    assert not chain.in_doubt()
    for link in links:
        chain.settle(link)
    assert not chain.links


def test_an_append_settled_before_its_batch_failed_is_not_in_doubt() -> None:
    """An append settled (its task cancelled: `unknown`) before its batch's answer came
    is no longer in doubt: it is settled as one that may have been written."""
    chain = _Chain()
    batch = ProducerBatch("log", 0, 1024, 0.0, expected_offset=0)
    link = _sent(chain, batch, 0)
    link.unknown = True
    chain.settle(link)
    _mismatch(batch)
    assert not chain.in_doubt()


def test_a_failure_of_one_batch_puts_only_its_own_appends_in_doubt() -> None:
    chain = _Chain()
    first = ProducerBatch("log", 0, 1024, 0.0, expected_offset=0)
    second = ProducerBatch("log", 0, 1024, 0.0, expected_offset=1)
    early, late = _sent(chain, first, 0), _sent(chain, second, 1)
    first.complete(0)
    chain.settle(early)
    _mismatch(second)
    assert chain.in_doubt() and late.doubted
    assert list(chain.links) == [late]
