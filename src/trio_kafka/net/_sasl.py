"""SASL authentication of a fresh connection: PLAIN and SCRAM-SHA-256/512.

Runs right after ApiVersions, before any other request (the Java client's order):
SaslHandshake v1 names the mechanism, then the mechanism's tokens travel in
SaslAuthenticate requests (KIP-152; the v0 handshake's raw, unframed tokens are not
supported). SCRAM (RFC 5802 / 7677) is done by `scramp`'s client; its nonce comes from the
injected random generator so that a simulated run replays exactly.

A wrong password is `SASL_AUTHENTICATION_FAILED` in a SaslAuthenticate response, raised as
`AuthenticationError` (fatal: retrying with the same credentials cannot succeed).
"""

from __future__ import annotations

import enum
import random
from typing import Any

import attrs
import scramp

from trio_kafka.errors import AuthenticationError, ConfigError, ErrorCode, error_info
from trio_kafka.net._connection import BrokerConnection
from trio_kafka.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from trio_kafka.protocol.messages.sasl_handshake import SaslHandshakeRequest


class SaslMechanism(enum.Enum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


def _mechanism(value: SaslMechanism | str) -> SaslMechanism:
    try:
        return SaslMechanism(value)
    except ValueError:
        names = ", ".join(m.value for m in SaslMechanism)
        raise ConfigError(f"SASL mechanism {value!r} is not one of {names}") from None


@attrs.frozen(slots=True)
class SaslConfig:
    """Credentials for SASL (the Java client's `sasl.mechanism` and JAAS user/password)."""

    mechanism: SaslMechanism = attrs.field(converter=_mechanism)
    username: str
    password: str = attrs.field(repr=False)


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
        case SaslMechanism.SCRAM_SHA_256 | SaslMechanism.SCRAM_SHA_512:
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


async def _exchange(
    connection: BrokerConnection, token: bytes, sasl: SaslConfig, where: str
) -> bytes:
    response: Any = await connection.request(SaslAuthenticateRequest(auth_bytes=token))
    if response.error_code != ErrorCode.NONE:
        detail = response.error_message or error_info(response.error_code).message
        raise AuthenticationError(
            f"{where} rejected SASL {sasl.mechanism.value} authentication of user "
            f"{sasl.username!r} ({error_info(response.error_code).name}): {detail}"
        )
    return bytes(response.auth_bytes or b"")
