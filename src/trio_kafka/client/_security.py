"""TLS and SASL for `open_producer`: our options, and Kafka's names mapped onto them.

Ours: `tls=` (an `ssl.SSLContext`, or True for the system trust store) and `sasl=` (a
`SaslConfig`). Kafka's, as the Java client, kafka-python and aiokafka spell them (dots
or underscores): `security_protocol` (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL),
`sasl_mechanism`, `sasl_plain_username` / `sasl_username`, `sasl_plain_password` /
`sasl_password`, `ssl_cafile`, `ssl_certfile`, `ssl_keyfile`; for OAUTHBEARER,
`sasl_oauthbearer_token_provider` (kafka-python's and aiokafka's
`sasl_oauth_token_provider`), the callable or object that returns the token.

Never silently weaker than asked: SASL options without a SASL protocol, a TLS protocol
with `tls=False`, or half the credentials are a `ConfigError`, not a plaintext
connection.
"""

from __future__ import annotations

import ssl
from typing import Any

import attrs

from trio_kafka.errors import ConfigError
from trio_kafka.net import (
    SaslConfig,
    TcpTransport,
    TlsTransport,
    Transport,
    tls_context,
    trust_of,
)

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
# Kafka's option name (underscored) -> the one it is read as.
_ALIASES = {
    "security_protocol": "security_protocol",
    "sasl_mechanism": "sasl_mechanism",
    "sasl_mechanisms": "sasl_mechanism",  # librdkafka's spelling
    "sasl_plain_username": "sasl_username",
    "sasl_username": "sasl_username",
    "sasl_plain_password": "sasl_password",
    "sasl_password": "sasl_password",
    "ssl_cafile": "ssl_cafile",
    "ssl_ca_location": "ssl_cafile",  # librdkafka's spelling
    "ssl_certfile": "ssl_certfile",
    "ssl_certificate_location": "ssl_certfile",
    "ssl_keyfile": "ssl_keyfile",
    "ssl_key_location": "ssl_keyfile",
    "sasl_oauthbearer_token_provider": "sasl_token_provider",
    "sasl_oauth_token_provider": "sasl_token_provider",  # kafka-python's, aiokafka's
}
_CREDENTIALS = ("sasl_mechanism", "sasl_username", "sasl_password", "sasl_token_provider")


@attrs.frozen
class Security:
    """What the connections use: a TLS context (None: plaintext) and SASL credentials."""

    ssl_context: ssl.SSLContext | None = None
    sasl: SaslConfig | None = None
    #: Where the trusted CAs come from (`TlsTransport.trust`, for verification errors).
    trust: str = ""

    def transport(self, inner: Transport | None) -> Transport | None:
        if self.ssl_context is None:
            return inner
        return TlsTransport(
            ssl_context=self.ssl_context,
            inner=inner if inner is not None else TcpTransport(),
            trust=self.trust,
        )


def pop_security(
    options: dict[str, Any], tls: ssl.SSLContext | bool | None, sasl: SaslConfig | None
) -> Security:
    """Take the Kafka security names out of `options` (the rest are producer options)
    and decide, with `tls=` and `sasl=`, what the connections use."""
    kafka: dict[str, Any] = {}
    for name in list(options):
        ours = _ALIASES.get(name.replace(".", "_"))
        if ours is not None:
            if ours in kafka:
                raise ConfigError(f"{name!r} is given twice (under two of its names)")
            kafka[ours] = options.pop(name)
    if tls is not None and not isinstance(tls, bool | ssl.SSLContext):
        raise ConfigError(
            f"tls={tls!r} is not allowed: pass an ssl.SSLContext, True (the system trust "
            "store) or False"
        )
    if sasl is not None and not isinstance(sasl, SaslConfig):
        raise ConfigError(
            f"sasl={sasl!r} is not allowed: pass trio_kafka.SaslConfig(mechanism, username, "
            "password), or security_protocol='SASL_SSL' with sasl_mechanism, "
            "sasl_plain_username and sasl_plain_password"
        )
    protocol = kafka.pop("security_protocol", None)
    if protocol is not None:
        protocol = str(protocol).upper()
        if protocol not in PROTOCOLS:
            raise ConfigError(
                f"security_protocol={protocol!r} is not allowed: use one of {', '.join(PROTOCOLS)}"
            )
    credentials = {k: kafka.pop(k) for k in _CREDENTIALS if k in kafka}
    files = {k: kafka.pop(k) for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile") if k in kafka}

    wants_tls = protocol in ("SSL", "SASL_SSL") or bool(files) or bool(tls)
    if protocol in ("PLAINTEXT", "SASL_PLAINTEXT") and (tls or files):
        raise ConfigError(
            f"security_protocol={protocol!r} contradicts "
            f"{'tls=' if tls else ', '.join(sorted(files))}: use 'SSL' or 'SASL_SSL' for TLS"
        )
    if tls is False and wants_tls:
        raise ConfigError(
            f"tls=False contradicts {'security_protocol=' + repr(protocol) if protocol else ', '.join(sorted(files))}"
        )
    context: ssl.SSLContext | None = None
    trust = ""
    if isinstance(tls, ssl.SSLContext):
        if files:
            raise ConfigError(
                f"{', '.join(sorted(files))} and tls=<SSLContext> both say how to verify: load "
                "the files into the context, or pass the files without tls="
            )
        context = tls
        trust = "the CAs loaded into the tls= SSLContext"
    elif wants_tls:
        trust = trust_of(files.get("ssl_cafile"))
        context = tls_context(
            cafile=files.get("ssl_cafile"),
            certfile=files.get("ssl_certfile"),
            keyfile=files.get("ssl_keyfile"),
        )

    wants_sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL") or bool(credentials) or sasl is not None
    if protocol in ("PLAINTEXT", "SSL") and (credentials or sasl is not None):
        given = ", ".join(sorted(credentials)) or "sasl="
        raise ConfigError(
            f"{given} given but security_protocol={protocol!r} does not authenticate: use "
            f"{'SASL_SSL' if protocol == 'SSL' else 'SASL_PLAINTEXT'}"
        )
    if sasl is not None and credentials:
        raise ConfigError(
            f"sasl= and {', '.join(sorted(credentials))} both give credentials: pass one"
        )
    if wants_sasl and sasl is None:
        sasl = _sasl_from_kafka_names(credentials, protocol)
    return Security(ssl_context=context, sasl=sasl, trust=trust)


def _sasl_from_kafka_names(credentials: dict[str, Any], protocol: str | None) -> SaslConfig:
    oauth = str(credentials.get("sasl_mechanism", "")).upper() == "OAUTHBEARER"
    needed = ("sasl_mechanism", "sasl_token_provider") if oauth else _CREDENTIALS[:3]
    missing = [k for k in needed if k not in credentials]
    if missing:
        names = {
            "sasl_username": "sasl_plain_username",
            "sasl_password": "sasl_plain_password",
            "sasl_token_provider": "sasl_oauthbearer_token_provider",
        }
        raise ConfigError(
            f"SASL{' (security_protocol=' + repr(protocol) + ')' if protocol else ''} "
            f"needs {', '.join(names.get(m, m) for m in missing)}, or sasl=SaslConfig(...)"
        )
    return SaslConfig(
        credentials["sasl_mechanism"],
        str(credentials.get("sasl_username", "")),
        str(credentials.get("sasl_password", "")),
        token_provider=credentials.get("sasl_token_provider"),
    )


__all__ = ["PROTOCOLS", "Security", "pop_security"]
