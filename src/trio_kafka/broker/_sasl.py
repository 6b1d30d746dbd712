"""SASL on the broker side: PLAIN and SCRAM-SHA-256/512, one `SaslSession` per connection.

Theory of operation
-------------------
A connection starts unauthenticated when the cluster requires SASL. SaslHandshake picks a
mechanism (UNSUPPORTED_SASL_MECHANISM and the enabled list otherwise); then the client's
tokens arrive in SaslAuthenticate requests (handshake v1) or, after a v0 handshake, as
bare size-prefixed frames (the shell feeds those to `step` too). PLAIN checks the
password in one step; SCRAM (RFC 5802/7677, through `scramp`'s server) takes two: the
client-first message is answered with the salt and iteration count, the client-final with
the server signature. Any failure is final: the answer carries SASL_AUTHENTICATION_FAILED
and the shell closes the connection, as Kafka does; the client reports an
authentication error instead of hanging.

The session is pure apart from `scramp` drawing its nonce from the OS; pass `nonce` to
make a run reproducible.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs
import scramp

from trio_kafka.errors import ErrorCode

PLAIN = "PLAIN"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)


@attrs.define(eq=False)
class SaslConfig:
    """Which mechanisms a cluster accepts and its users (name -> password)."""

    users: dict[str, str]
    mechanisms: tuple[str, ...] = MECHANISMS
    # name -> (mechanism -> scramp auth info), computed once: PBKDF2 is slow on purpose.
    _scram: dict[str, dict[str, tuple[Any, ...]]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        for mechanism in self.mechanisms:
            if mechanism not in MECHANISMS:
                raise ValueError(f"unsupported SASL mechanism {mechanism!r}; known: {MECHANISMS}")
        for mechanism in self.mechanisms:
            if mechanism in SCRAM_MECHANISMS:
                m = scramp.ScramMechanism(mechanism)
                for user, password in self.users.items():
                    self._scram.setdefault(user, {})[mechanism] = m.make_auth_info(password)

    def scram_auth_info(self, mechanism: str, user: str) -> tuple[Any, ...]:
        return self._scram[user][mechanism]


class SaslStage(enum.Enum):
    START = "start"  # no handshake yet
    HANDSHAKEN = "handshaken"  # a mechanism is chosen, tokens expected
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


@attrs.frozen
class SaslStep:
    error: ErrorCode
    message: str | None = None
    token: bytes = b""


@attrs.define(eq=False)
class SaslSession:
    """One connection's authentication."""

    config: SaslConfig | None
    nonce: Callable[[], str] | None = None
    stage: SaslStage = SaslStage.START
    mechanism: str = ""
    # After a v0 handshake the tokens come as bare frames, not SaslAuthenticate requests.
    raw_tokens: bool = False
    principal: str = ""
    _scram: Any = None

    @property
    def authenticated(self) -> bool:
        return self.config is None or self.stage is SaslStage.AUTHENTICATED

    def handshake(self, mechanism: str, version: int) -> tuple[ErrorCode, list[str]]:
        enabled = list(self.config.mechanisms) if self.config is not None else []
        if self.stage is not SaslStage.START:
            return ErrorCode.ILLEGAL_SASL_STATE, enabled
        if mechanism not in enabled:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled
        self.mechanism = mechanism
        self.stage = SaslStage.HANDSHAKEN
        self.raw_tokens = version == 0
        return ErrorCode.NONE, enabled

    def step(self, token: bytes) -> SaslStep:
        if self.stage is not SaslStage.HANDSHAKEN or self.config is None:
            self.stage = SaslStage.FAILED
            return SaslStep(ErrorCode.ILLEGAL_SASL_STATE, "SaslAuthenticate before SaslHandshake")
        if self.mechanism == PLAIN:
            return self._plain(token)
        return self._scram_step(token)

    def _fail(self, message: str) -> SaslStep:
        self.stage = SaslStage.FAILED
        return SaslStep(ErrorCode.SASL_AUTHENTICATION_FAILED, message)

    def _plain(self, token: bytes) -> SaslStep:
        assert self.config is not None
        parts = token.split(b"\x00")
        if len(parts) != 3:
            return self._fail("malformed PLAIN token")
        user, password = parts[1].decode("utf-8", "replace"), parts[2].decode("utf-8", "replace")
        if self.config.users.get(user) != password or not user:
            return self._fail(f"Authentication failed: invalid credentials for user {user!r}")
        self.principal = user
        self.stage = SaslStage.AUTHENTICATED
        return SaslStep(ErrorCode.NONE)

    def _scram_step(self, token: bytes) -> SaslStep:
        assert self.config is not None
        config = self.config
        mechanism = self.mechanism
        try:
            if self._scram is None:

                def auth_fn(user: str) -> tuple[Any, ...]:
                    self.principal = user
                    try:
                        return config.scram_auth_info(mechanism, user)
                    except KeyError:
                        raise LookupError(f"unknown user {user!r}") from None

                nonce = self.nonce() if self.nonce is not None else None
                self._scram = scramp.ScramMechanism(mechanism).make_server(auth_fn, s_nonce=nonce)
                self._scram.set_client_first(token.decode("utf-8"))
                return SaslStep(ErrorCode.NONE, token=self._scram.get_server_first().encode())
            self._scram.set_client_final(token.decode("utf-8"))
            final = self._scram.get_server_final().encode()
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            return self._fail(
                f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}: {exc}"
            )
        self.stage = SaslStage.AUTHENTICATED
        return SaslStep(ErrorCode.NONE, token=final)
