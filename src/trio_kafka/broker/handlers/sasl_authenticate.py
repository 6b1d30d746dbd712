"""SaslAuthenticate (API key 36), v0-2: one SASL token each way. A failure closes the
connection after the answer (the shell does it, seeing the session FAILED)."""

from __future__ import annotations

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker._sasl import SaslSession
from trio_kafka.protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)

REQUEST = SaslAuthenticateRequest


def handle(ctx: RequestContext, req: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    session = ctx.session if ctx.session is not None else SaslSession(None)
    step = session.step(req.auth_bytes)
    return SaslAuthenticateResponse(
        error_code=step.error, error_message=step.message, auth_bytes=step.token
    )
