"""SaslHandshake (API key 17), v0-1: choose the mechanism (v0: raw tokens follow)."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker._sasl import SaslSession
from trio_kafka.protocol.messages.sasl_handshake import SaslHandshakeRequest, SaslHandshakeResponse

REQUEST = SaslHandshakeRequest


def handle(ctx: RequestContext, req: SaslHandshakeRequest) -> SaslHandshakeResponse:
    session = ctx.session if ctx.session is not None else SaslSession(None)
    error, enabled = session.handshake(req.mechanism, ctx.version)
    return SaslHandshakeResponse(error_code=error, mechanisms=enabled)
