"""The connection shell: frames in, handlers, frames out, over any trio stream.

Theory of operation
-------------------
`serve_connection(cluster, node_id, stream)` owns one client connection of one node. It
splits the byte stream into frames (`FrameSplitter`, which refuses a negative or huge
size), decodes each request and answers them one at a time, in order, as a Kafka broker
does per connection. The stream may be a TCP socket, a TLS stream or a simulator's memory
stream: nothing here knows which.

For each request:

1. an undecodable frame closes the connection (Kafka does the same: there is no
   correlation id to answer under); an unknown API key or version likewise, except
   ApiVersions, which is answered in v0 format with UNSUPPORTED_VERSION and our ranges
   (KIP-511) so the client can pick a version;
2. when the cluster requires SASL, anything but ApiVersions, SaslHandshake and
   SaslAuthenticate before authentication closes the connection, as does a failed
   authentication (after its answer);
3. BEFORE hooks, the handler (pure, applied to the shared `ClusterState` without any
   await in between), then AFTER hooks;
4. a Fetch that has less than MinBytes waits for the cluster to change, up to MaxWaitMs;
5. acks=0 Produce requests get no answer.

Any other exception in a handler is logged and closes this connection only; the broker
keeps serving everyone else.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import struct
from collections.abc import Callable
from typing import Any, Protocol

import trio

from trio_kafka.broker._context import RequestContext
from trio_kafka.broker._hooks import BLACKHOLE, DROP, Delay, Hook, HookCall, Phase
from trio_kafka.broker._sasl import SaslConfig, SaslSession, SaslStage
from trio_kafka.broker._state import ClusterState
from trio_kafka.broker.handlers import HANDLERS, PRE_AUTH_KEYS, api_versions, fetch
from trio_kafka.errors import ProtocolError, UnsupportedRequestError
from trio_kafka.protocol import (
    FrameSplitter,
    RequestHeader,
    decode_request,
    encode_response,
)
from trio_kafka.protocol.messages.produce import ProduceRequest

log = logging.getLogger("trio_kafka.broker")

_API_VERSIONS = 18
_PRODUCE = 0
_FETCH = 1
_RECEIVE_SIZE = 65536
_CORRELATION_ID = struct.Struct(">i")


class _Close(Exception):
    """Close this connection (after sending what is already sent)."""


class Served(Protocol):
    """What serving a connection needs of its cluster (`_cluster.Cluster` is one): kept
    here so that this module does not import the cluster that imports it."""

    state: ClusterState
    hooks: list[Hook]
    sasl: SaslConfig | None
    sasl_nonce: Callable[[], str] | None
    max_frame_size: int

    async def wait_changed(self) -> None: ...


def _hooked(cluster: Served, phase: Phase, node_id: int, api_key: int) -> bool:
    """A hook of `phase` matches this request: only then is a `HookCall` built and
    `_apply_hooks` awaited (the simulator's hooks are on Produce alone, and every request
    asked)."""
    return any(hook.matches(phase, node_id, api_key) for hook in cluster.hooks)


async def _apply_hooks(cluster: Served, phase: Phase, call: HookCall) -> Any:
    """Run the hooks of `phase`; returns None (go on) or the first decisive result."""
    for hook in list(cluster.hooks):
        if not hook.matches(phase, call.node_id, call.api_key):
            continue
        if hook.times is not None:
            hook.times -= 1
        result = hook.fn(call)
        if inspect.isawaitable(result):
            result = await result
        if result is None:
            continue
        if isinstance(result, Delay):
            await trio.sleep(result.seconds)
            continue
        return result
    return None


async def serve_connection(
    cluster: Served, node_id: int, stream: trio.abc.Stream, *, peer: str = ""
) -> None:
    """Serve one client connection until it closes (or must be closed)."""
    session = SaslSession(cluster.sasl, nonce=cluster.sasl_nonce)
    splitter = FrameSplitter(max_frame_size=cluster.max_frame_size)
    log.info("node %d: connection from %s", node_id, peer or "?")
    reason = "closed by client"
    try:
        while True:
            data = await stream.receive_some(_RECEIVE_SIZE)
            if not data:
                break
            try:
                frames = splitter.feed(data)
            except ProtocolError as exc:
                raise _Close(f"bad frame: {exc}") from None
            for frame in frames:
                await _serve_frame(cluster, node_id, stream, session, frame, peer)
    except _Close as exc:
        reason = str(exc)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        reason = "connection lost"
    except Exception:
        log.exception("node %d: connection from %s failed", node_id, peer or "?")
        reason = "internal error"
    finally:
        log.info("node %d: connection from %s ended: %s", node_id, peer or "?", reason)
        with (
            trio.move_on_after(1, shield=True),
            contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError),
        ):
            await stream.aclose()


async def _serve_frame(
    cluster: Served,
    node_id: int,
    stream: trio.abc.Stream,
    session: SaslSession,
    frame: bytes,
    peer: str,
) -> None:
    if session.raw_tokens and session.stage is SaslStage.HANDSHAKEN:
        # After a v0 SaslHandshake the SASL tokens travel as bare frames.
        step = session.step(frame)
        if step.error:
            raise _Close(f"SASL authentication failed: {step.message}")
        await stream.send_all(len(step.token).to_bytes(4, "big") + step.token)
        return
    try:
        header, request = decode_request(frame)
    except UnsupportedRequestError as exc:
        if exc.api_key == _API_VERSIONS:
            answer = api_versions.unsupported_version()
            await stream.send_all(
                encode_response(answer, version=0, correlation_id=exc.correlation_id)
            )
            return
        raise _Close(f"unsupported request: {exc}") from None
    except ProtocolError as exc:
        raise _Close(f"undecodable request: {exc}") from None
    handler = HANDLERS.get(header.api_key)
    if handler is None or header.api_version > handler.max_version:
        if header.api_key == _API_VERSIONS:
            answer = api_versions.unsupported_version()
            await stream.send_all(
                encode_response(answer, version=0, correlation_id=header.correlation_id)
            )
            return
        raise _Close(f"no handler for API key {header.api_key} v{header.api_version}")
    if not session.authenticated and header.api_key not in PRE_AUTH_KEYS:
        raise _Close(f"API key {header.api_key} before SASL authentication")

    # Without a hook for this request (the usual case) no HookCall is built and nothing
    # is awaited (`_apply_hooks` would not checkpoint either). The AFTER pass asks again:
    # a hook may be added while a Fetch waits.
    response = None
    if cluster.hooks and _hooked(cluster, Phase.BEFORE, node_id, header.api_key):
        response = await _apply_hooks(cluster, Phase.BEFORE, HookCall(node_id, header, request))
        if response is DROP:
            raise _Close("dropped by a hook before the request was applied")
        if response is BLACKHOLE:
            await trio.sleep_forever()
    ctx = RequestContext(
        cluster.state,
        node_id,
        header,
        principal=session.principal,
        client_host=peer,
        session=session,
    )
    if response is None:
        cluster.state.tick()
        response = handler.handle(ctx, request)
        if header.api_key == _FETCH:
            response = await _wait_for_fetch(cluster, ctx, request, response)
        after = (
            await _apply_hooks(cluster, Phase.AFTER, HookCall(node_id, header, request, response))
            if cluster.hooks and _hooked(cluster, Phase.AFTER, node_id, header.api_key)
            else None
        )
        if after is DROP:
            raise _Close("dropped by a hook after the request was applied")
        if after is BLACKHOLE:
            await trio.sleep_forever()
        if after is not None:
            response = after
    if header.api_key == _PRODUCE and isinstance(request, ProduceRequest) and request.acks == 0:
        return  # acks=0: the client expects no answer
    await _send(stream, response, header)
    if session.stage is SaslStage.FAILED:
        raise _Close("SASL authentication failed")


async def _send(stream: trio.abc.Stream, response: Any, header: RequestHeader) -> None:
    if header.api_key == _API_VERSIONS:
        frame = _api_versions_frame(response, header.api_version, header.correlation_id)
    else:
        frame = encode_response(
            response, version=header.api_version, correlation_id=header.correlation_id
        )
    await stream.send_all(frame)


#: version -> (the ApiVersions answer last encoded, its frame with correlation id 0).
_API_VERSIONS_FRAMES: dict[int, tuple[Any, bytes]] = {}


def _api_versions_frame(response: Any, version: int, correlation_id: int) -> bytes:
    """The ApiVersions answer's frame. Every connection asks, and the handler answers
    with one object per cluster configuration (`api_versions.handle`): its frame is
    encoded once and only the correlation id changes. (An ApiVersions response header is
    v0 at every version, KIP-511: size, then the correlation id, then the body.)"""
    cached = _API_VERSIONS_FRAMES.get(version)
    if cached is None or cached[0] is not response:
        cached = (response, encode_response(response, version=version, correlation_id=0))
        _API_VERSIONS_FRAMES[version] = cached
    frame = cached[1]
    return frame[:4] + _CORRELATION_ID.pack(correlation_id) + frame[8:]


async def _wait_for_fetch(cluster: Served, ctx: RequestContext, request: Any, response: Any) -> Any:
    """Hold a Fetch until it has MinBytes or MaxWaitMs passed, re-reading on each change."""
    if fetch.ready(request, response) or request.max_wait_ms <= 0:
        return response
    deadline = trio.current_time() + request.max_wait_ms / 1000
    while not fetch.ready(request, response):
        with trio.move_on_at(deadline) as scope:
            await cluster.wait_changed()
        if scope.cancelled_caught:
            break
        response = fetch.handle(ctx, request)
    return fetch.handle(ctx, request)
