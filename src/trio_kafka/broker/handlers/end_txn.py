"""EndTxn (API key 26), v0-5.

Commits or aborts: the coordinator moves to PrepareCommit/PrepareAbort and the markers
(a control batch in every partition of the transaction, the pending offsets of its
groups) are written, immediately unless `ClusterOptions.marker_delay_ms` holds them back
(then CONCURRENT_TRANSACTIONS answers whatever arrives meanwhile). With transactions v2
(cluster option, and the client sending v5, KIP-890 part 2) the epoch is bumped and the
new producer id and epoch are returned. PRODUCER_FENCED exists from v2.
"""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker.handlers._txn_common import fenced_for_version, not_txn_coordinator
from trio_kafka.errors import ErrorCode
from trio_kafka.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse

REQUEST = EndTxnRequest


def handle(ctx: RequestContext, req: EndTxnRequest) -> EndTxnResponse:
    state = ctx.state
    if not_txn_coordinator(ctx):
        return EndTxnResponse(error_code=ErrorCode.NOT_COORDINATOR)
    v2 = state.options.transaction_version >= 2 and ctx.version >= 5
    result = state.txn.end_txn(
        req.transactional_id,
        req.producer_id,
        req.producer_epoch,
        req.committed,
        ctx.now_ms(),
        v2=v2,
    )
    if result.markers is not None:
        state.start_markers(result.markers)
    return EndTxnResponse(
        error_code=fenced_for_version(result.error, ctx.version, 2),
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
    )
