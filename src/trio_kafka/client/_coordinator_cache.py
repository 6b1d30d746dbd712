"""The transaction coordinators found through each selector, by transactional id.

Producers opened on one selector (a transactional conditional writer opens its own
beside the producer it was given, and again each time a newer writer fences it) share
what they learned: the next one starts with its InitProducerId instead of a
FindCoordinator round trip, as librdkafka's coordinator cache saves it within a client
(docs/transactions.md). A stale entry costs one answer: NOT_COORDINATOR, or a failed
request, makes the manager look the coordinator up again, and the driver forgets it
here. Weak by selector: a cache lives as long as its connections.
"""

from __future__ import annotations

import weakref

from trio_kafka.net import KafkaSelector
from trio_kafka.producer.transactions import Coordinator

_FOUND: weakref.WeakKeyDictionary[KafkaSelector, dict[str, Coordinator]] = (
    weakref.WeakKeyDictionary()
)


def known_coordinator(selector: KafkaSelector, transactional_id: str) -> Coordinator | None:
    """The coordinator of `transactional_id` last found through `selector`, if any."""
    return _FOUND.get(selector, {}).get(transactional_id)


def remember_coordinator(
    selector: KafkaSelector, transactional_id: str, found: Coordinator | None
) -> None:
    """What a producer on `selector` now knows (None: it has to look it up again)."""
    if found is not None:
        _FOUND.setdefault(selector, {})[transactional_id] = found
    else:
        _FOUND.get(selector, {}).pop(transactional_id, None)
