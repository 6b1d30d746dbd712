"""The one idempotent InitProducerId loop: the producer's sender (`Sender`) and the bulk
loader's CAS partitions (`_bulk.py`) both get their producer id here.

InitProducerId without a transactional id, to the least loaded node, with the caller's
`transaction_timeout` (the producer's configured one; brokers ignore it without a
transactional id, but it is what the Java client sends). A connection that cannot be
made or an answer that did not come (nothing is written by this request, so another try
is always safe) and a retriable error code back off (the one backoff) and try again; a
broker without InitProducerId raises `FatalError`, as does a refused credential; a
code that is not retriable raises its error. The transactional producer's
InitProducerId is the transaction manager's (core/_transaction.py): it goes to the
transaction coordinator and answers change the transaction's state.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from trio_kafka.core import ExponentialBackoff
from trio_kafka.errors import (
    AmbiguousError,
    BrokerConnectionError,
    ErrorCode,
    FatalError,
    KafkaError,
    error_for_code,
    error_info,
    idempotence_refused,
)
from trio_kafka.net import KafkaSelector
from trio_kafka.protocol.messages.init_producer_id import InitProducerIdRequest

logger = logging.getLogger("trio_kafka.producer")


async def init_idempotent_producer_id(
    selector: KafkaSelector,
    *,
    timeout: float,
    transaction_timeout: float,
    backoff: ExponentialBackoff,
    attempts: int | None = None,
    wanted: Callable[[], bool] = lambda: True,
) -> tuple[int, int] | None:
    """(producer id, epoch) of a new idempotent producer (see the module doc). Before
    each try `wanted()` says whether one is still needed (None is returned when not);
    after `attempts` failed tries (None: no bound) the last error is raised."""
    tries = 0
    error: KafkaError = KafkaError("InitProducerId was not tried")
    while wanted() and (attempts is None or tries < attempts):
        try:
            connection = await selector.connection(selector.least_loaded_node())
            version = connection.api_versions.get(InitProducerIdRequest.API_KEY)
            if version is None:
                raise FatalError(
                    f"broker {connection.host}:{connection.port} does not support "
                    "InitProducerId: idempotence needs it (or set enable_idempotence=False)"
                )
            request = InitProducerIdRequest(
                transactional_id=None,
                transaction_timeout_ms=int(transaction_timeout * 1000),
            )
            response = await connection.request(request, timeout=timeout)
        except (BrokerConnectionError, AmbiguousError) as exc:
            error = exc
        else:
            code = response.error_code
            if code == ErrorCode.NONE:
                logger.debug(
                    "producer id %s epoch %s", response.producer_id, response.producer_epoch
                )
                return response.producer_id, response.producer_epoch
            if code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED:
                raise idempotence_refused()
            error = error_for_code(code, f"InitProducerId v{version}")
            if not error_info(code).retriable:
                raise error
        logger.debug("InitProducerId failed (attempt %d): %s", tries + 1, error)
        await anyio.sleep(backoff.backoff(tries, selector.rng))
        tries += 1
    if attempts is not None and tries >= attempts:
        raise error
    return None


__all__ = ["init_idempotent_producer_id"]
