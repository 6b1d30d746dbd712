"""The transaction coordinator's node dies (SIGKILL: connects refused, or the connection
lost with a request out): the producer forgets the coordinator and asks FindCoordinator
again at once, not after the failed request's backoff, so it reaches the node that
takes over as soon as the cluster names it (checked for the failover fix: a failed
produce connect now refreshes metadata; the coordinator path needed no change)."""

from __future__ import annotations

import pytest

from tests.unit.test_transactions import added, expect, found, ready
from trio_kafka.core._transaction import Coordinator, TxnRequestKind
from trio_kafka.errors import BrokerConnectionError, ConnectionLostError, KafkaError

K = TxnRequestKind


@pytest.mark.parametrize(
    ("error", "sent"),
    [(BrokerConnectionError("refused"), False), (ConnectionLostError("lost"), True)],
    ids=["connect-refused", "connection-lost"],
)
def test_a_dead_coordinator_is_looked_up_again_at_once(error: KafkaError, sent: bool) -> None:
    m = ready()
    m.begin()
    m.maybe_add_partition(("t", 0))
    first = expect(m, K.ADD_PARTITIONS)
    m.handle_failure(first, error, 0.0, sent=sent)
    assert m.coordinator is None
    lookup = expect(m, K.FIND_COORDINATOR, now=0.0)  # no backoff before the lookup
    m.handle_response(lookup, found(node=2), 0.0)
    again = expect(m, K.ADD_PARTITIONS, now=1.0)
    assert again.coordinator == Coordinator(2, "b2", 9092)
    m.handle_response(again, added(again), 1.0)
    assert m.is_send_to_partition_allowed(("t", 0))
