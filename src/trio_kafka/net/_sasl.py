"""SASL authentication of a fresh connection: PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER.

Runs right after ApiVersions, before any other request (the Java client's order):
SaslHandshake v1 names the mechanism, then the mechanism's tokens travel in
SaslAuthenticate requests (KIP-152; the v0 handshake's raw, unframed tokens are not
supported). SCRAM (RFC 5802 / 7677) is done by `scramp`'s client; its nonce comes from the
injected random generator so that a simulated run replays exactly.

OAUTHBEARER (RFC 7628, KIP-255, extensions KIP-342) asks the configured token provider
for a token at each authentication (so a provider that refreshes its token is asked
again on every new connection), sends it in the GS2 client-first message, and reads a
non-empty answer as the broker's JSON error: RFC 7628 has the client acknowledge it with
a lone 0x01, after which Kafka fails the exchange with the reason.

A wrong password is `SASL_AUTHENTICATION_FAILED` in a SaslAuthenticate response, raised as
`AuthenticationError` (fatal: retrying with the same credentials cannot succeed).
"""

from __future__ import annotations

import enum
import inspect
import random
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeAlias

import attrs

from trio_kafka.errors import AuthenticationError, ConfigError, ErrorCode, error_info
from trio_kafka.net._connection import BrokerConnection
from trio_kafka.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from trio_kafka.protocol.messages.sasl_handshake import SaslHandshakeRequest


class SaslMechanism(enum.Enum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"
    OAUTHBEARER = "OAUTHBEARER"


def _mechanism(value: SaslMechanism | str) -> SaslMechanism:
    try:
        return SaslMechanism(value)
    except ValueError:
        names = ", ".join(m.value for m in SaslMechanism)
        raise ConfigError(f"SASL mechanism {value!r} is not one of {names}") from None


@attrs.frozen(slots=True)
class OAuthBearerToken:
    """A token for OAUTHBEARER and its SASL extensions (KIP-342, e.g. Confluent Cloud's
    `logicalCluster` and `identityPoolId`), as a token provider may return it."""

    value: str = attrs.field(repr=False)
    extensions: Mapping[str, str] = attrs.field(factory=dict)


class TokenSource(Protocol):
    """kafka-python's and aiokafka's `sasl_oauth_token_provider`: an object whose
    `token()` (plain or async) returns the token, with an optional `extensions()`."""

    def token(self) -> str | Awaitable[str]: ...


#: What `SaslConfig(token_provider=...)` takes: a function (plain or async) returning
#: the token, as a string or an `OAuthBearerToken`; or a `TokenSource`.
TokenProvider: TypeAlias = (
    Callable[[], str | OAuthBearerToken | Awaitable[str | OAuthBearerToken]] | TokenSource
)

# Kafka's grammar (OAuthBearerClientInitialResponse): a token is a JWS compact
# serialization; extension keys are letters, values printable ASCII.
_TOKEN = re.compile(r"[-_.a-zA-Z0-9]+")
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]+")


@attrs.frozen(slots=True)
class SaslConfig:
    """Credentials for SASL (the Java client's `sasl.mechanism` and JAAS user/password).

    OAUTHBEARER takes a `token_provider` instead of a user and password:
    `SaslConfig("OAUTHBEARER", token_provider=get_token)`, called at each
    authentication (each new connection); see `TokenProvider`.
    """

    mechanism: SaslMechanism = attrs.field(converter=_mechanism)
    username: str = ""
    password: str = attrs.field(default="", repr=False)
    token_provider: TokenProvider | None = attrs.field(default=None, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.mechanism is SaslMechanism.OAUTHBEARER:
            if self.token_provider is None:
                raise ConfigError(
                    "SASL OAUTHBEARER needs a token provider: SaslConfig('OAUTHBEARER', "
                    "token_provider=...) or sasl_oauthbearer_token_provider=..."
                )
            if self.username or self.password:
                raise ConfigError(
                    "SASL OAUTHBEARER authenticates with the token_provider's token, not a "
                    "username and password: leave them out"
                )
        elif self.token_provider is not None:
            raise ConfigError(
                f"a token provider is for SASL OAUTHBEARER, not {self.mechanism.value} "
                "(which takes a username and password)"
            )
        elif not self.username:
            raise ConfigError(
                f"SASL {self.mechanism.value} needs a username (and its password): "
                f"SaslConfig({self.mechanism.value!r}, username, password)"
            )


async def authenticate(connection: BrokerConnection, sasl: SaslConfig, rng: random.Random) -> None:
    """Authenticate `connection`; raises AuthenticationError on rejection."""
    where = f"{connection.host}:{connection.port}"
    handshake = await connection.request(
        SaslHandshakeRequest(mechanism=sasl.mechanism.value), version=1
    )
    if handshake.error_code != ErrorCode.NONE:
        offered = ", ".join(handshake.mechanisms) or "none"
        raise AuthenticationError(
            f"{where} refused SASL mechanism {sasl.mechanism.value} "
            f"({error_info(handshake.error_code).name}); it offers: {offered}"
        )
    match sasl.mechanism:
        case SaslMechanism.PLAIN:
            token = b"\0" + sasl.username.encode() + b"\0" + sasl.password.encode()
            await _exchange(connection, token, sasl, where)
        case SaslMechanism.OAUTHBEARER:
            bearer = await _provided_token(sasl.token_provider, where)
            challenge = await _exchange(connection, _client_first(bearer), sasl, where)
            if challenge:
                # The broker's JSON error ({"status":"invalid_token"}); acknowledging it
                # makes the broker fail the exchange, and _exchange raise its message.
                await _exchange(connection, b"\x01", sasl, where)
                raise AuthenticationError(
                    f"{where} rejected the SASL OAUTHBEARER token: "
                    f"{challenge.decode(errors='replace')}"
                )
        case SaslMechanism.SCRAM_SHA_256 | SaslMechanism.SCRAM_SHA_512:
            # Imported here, by the connections that use SCRAM: scramp brings asn1crypto
            # and importlib.metadata, ~15,000 objects that every process importing the
            # client would carry, and that the garbage collector's full collections
            # walk again each time (docs/benchmarks.md, "A cheaper record").
            import scramp

            client = scramp.ScramClient(
                [sasl.mechanism.value],
                sasl.username,
                sasl.password,
                c_nonce=format(rng.getrandbits(192), "048x"),
            )
            server_first = await _exchange(
                connection, client.get_client_first().encode(), sasl, where
            )
            try:
                client.set_server_first(server_first.decode())
                final = client.get_client_final()
            except scramp.ScramException as exc:
                raise AuthenticationError(
                    f"{where}: bad SCRAM server-first message: {exc}"
                ) from exc
            server_final = await _exchange(connection, final.encode(), sasl, where)
            try:
                client.set_server_final(server_final.decode())
            except scramp.ScramException as exc:
                # The broker could not prove it knows the password: not the broker we meant.
                raise AuthenticationError(
                    f"{where} failed the SCRAM server signature check: {exc}"
                ) from exc


async def _provided_token(provider: TokenProvider | None, where: str) -> OAuthBearerToken:
    """Ask `provider` for a token (awaiting it if it is async) and check it is one Kafka
    can parse. A provider that fails fails the authentication, naming why."""
    name = getattr(provider, "__qualname__", type(provider).__qualname__)
    source: Any = provider  # a function, or an object with token()
    try:
        getter = getattr(source, "token", None)
        result = getter() if callable(getter) else source()
        if inspect.isawaitable(result):
            result = await result
        extensions: Any = {}
        if callable(getter) and callable(getattr(source, "extensions", None)):
            extensions = source.extensions()
            if inspect.isawaitable(extensions):
                extensions = await extensions
    except Exception as exc:
        raise AuthenticationError(
            f"SASL OAUTHBEARER to {where}: the token provider {name} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(result, str):
        result = OAuthBearerToken(result, dict(extensions or {}))
    if not isinstance(result, OAuthBearerToken):
        raise AuthenticationError(
            f"SASL OAUTHBEARER to {where}: the token provider {name} returned "
            f"{type(result).__name__}, not a token (a str or an OAuthBearerToken)"
        )
    if not _TOKEN.fullmatch(result.value):
        raise AuthenticationError(
            f"SASL OAUTHBEARER to {where}: the token provider {name} returned a token that "
            "is not a JWS compact serialization (letters, digits, '-', '_' and '.' only)"
        )
    for key, value in result.extensions.items():
        if key == "auth" or not _EXTENSION_KEY.fullmatch(key):
            raise AuthenticationError(
                f"SASL OAUTHBEARER extension name {key!r} is not allowed (letters only, "
                "and not 'auth')"
            )
        if not isinstance(value, str) or not _EXTENSION_VALUE.fullmatch(value):
            raise AuthenticationError(
                f"SASL OAUTHBEARER extension {key}={value!r}: the value must be printable ASCII"
            )
    return result


def _client_first(bearer: OAuthBearerToken) -> bytes:
    """RFC 7628's client initial response: GS2 header (no authorization id), then
    key=value pairs separated by 0x01: auth, the extensions, and an empty one."""
    pairs = [f"auth=Bearer {bearer.value}"]
    pairs += [f"{key}={value}" for key, value in bearer.extensions.items()]
    return ("n,," + "".join(f"\x01{pair}" for pair in pairs) + "\x01\x01").encode()


async def _exchange(
    connection: BrokerConnection, token: bytes, sasl: SaslConfig, where: str
) -> bytes:
    response: Any = await connection.request(SaslAuthenticateRequest(auth_bytes=token))
    if response.error_code != ErrorCode.NONE:
        detail = response.error_message or error_info(response.error_code).message
        whose = "" if sasl.mechanism is SaslMechanism.OAUTHBEARER else f" of user {sasl.username!r}"
        raise AuthenticationError(
            f"{where} rejected SASL {sasl.mechanism.value} authentication{whose} "
            f"({error_info(response.error_code).name}): {detail}"
        )
    return bytes(response.auth_bytes or b"")
