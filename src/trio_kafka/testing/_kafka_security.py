"""Security listeners for the Kafka nodes of `kafka_broker()` / `kafka_cluster()`.

Theory of operation. Each client listener is named after its security protocol
(`PLAINTEXT`, `SASL_PLAINTEXT`, `SSL`, `SASL_SSL`) and has a port of its own; the
inter-broker and controller listeners stay plaintext, so security never slows a test's
cluster down or hides why it did not start. TLS listeners share one PEM keystore per
cluster: a private CA (`ca.pem`, given to clients as `node.ca_file`) signed a
certificate for 127.0.0.1 and localhost, both made with `trustme` when the cluster is
created. SASL listeners enable the mechanisms asked for: PLAIN users live in the
listener's JAAS configuration, SCRAM users are written into the metadata log when the
node is formatted (`StorageTool format --add-scram`), and OAUTHBEARER validates
unsecured JWTs (`alg: none`, Kafka's `OAuthBearerUnsecuredValidatorCallbackHandler`),
so any token `unsecured_jwt()` makes is accepted until it expires.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs

#: The client listeners a node can have, by security protocol.
LISTENERS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
#: The SASL mechanisms a node can enable.
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

_SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# Names and passwords travel through a JAAS quoted string, a properties file and
# StorageTool's `[name=...,password=...]`: keep to characters none of them treats specially.
_SAFE = re.compile(r"[A-Za-z0-9._~!@#$%^&*+\-/:;?|]+")
_UNSECURED_VALIDATOR = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredValidatorCallbackHandler"
)
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}


def _listeners(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    names = tuple(dict.fromkeys(str(v).upper() for v in value))
    unknown = [n for n in names if n not in LISTENERS]
    if unknown:
        raise ValueError(f"listeners {unknown} are not among {', '.join(LISTENERS)}")
    # The inter-broker listener, and the one readiness is checked on.
    return ("PLAINTEXT", *(n for n in names if n != "PLAINTEXT"))


def _mechanisms(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str):
        value = (value,)
    names = tuple(dict.fromkeys(str(v).upper() for v in value))
    unknown = [n for n in names if n not in SASL_MECHANISMS]
    if unknown or not names:
        raise ValueError(
            f"sasl_mechanisms {list(value)} must name some of {', '.join(SASL_MECHANISMS)}"
        )
    return names


def _users(value: Mapping[str, str]) -> dict[str, str]:
    users = dict(value)
    for name, password in users.items():
        for what, text in (("user name", name), ("password", password)):
            if not isinstance(text, str) or not _SAFE.fullmatch(text):
                raise ValueError(
                    f"sasl_users: the {what} {text!r} must be a non-empty string of letters, "
                    "digits and ._~!@#$%^&*+-/:;?| (it goes into JAAS and StorageTool as is)"
                )
    return users


@attrs.frozen
class ListenerSecurity:
    """Which client listeners a node has, and what its SASL listeners accept."""

    listeners: tuple[str, ...] = attrs.field(default=("PLAINTEXT",), converter=_listeners)
    #: User name -> password, for PLAIN and SCRAM.
    sasl_users: Mapping[str, str] = attrs.field(factory=dict, converter=_users)
    sasl_mechanisms: tuple[str, ...] = attrs.field(default=SASL_MECHANISMS, converter=_mechanisms)

    @property
    def tls(self) -> bool:
        return any(name in ("SSL", "SASL_SSL") for name in self.listeners)

    @property
    def sasl(self) -> bool:
        return any(name.startswith("SASL_") for name in self.listeners)

    def properties(self, keystore: Path | None) -> dict[str, str]:
        """The server properties for the listeners beyond PLAINTEXT (not their ports)."""
        props: dict[str, str] = {
            "listener.security.protocol.map": ",".join(
                [f"{name}:{name}" for name in self.listeners] + ["CONTROLLER:PLAINTEXT"]
            )
        }
        if self.tls:
            if keystore is None:
                raise ValueError("a TLS listener needs a keystore")
            props["ssl.keystore.type"] = "PEM"
            props["ssl.keystore.location"] = str(keystore)
        if not self.sasl:
            return props
        props["sasl.enabled.mechanisms"] = ",".join(self.sasl_mechanisms)
        for listener in self.listeners:
            if not listener.startswith("SASL_"):
                continue
            prefix = f"listener.name.{listener.lower()}"
            for mechanism in self.sasl_mechanisms:
                options = ""
                if mechanism == "PLAIN":
                    options = "".join(f' user_{u}="{p}"' for u, p in self.sasl_users.items())
                elif mechanism == "OAUTHBEARER":
                    # The broker logs in too (its own token, never used: inter-broker is
                    # plaintext); the unsecured login handler needs a subject for it.
                    options = ' unsecuredLoginStringClaim_sub="broker"'
                    props[f"{prefix}.oauthbearer.sasl.server.callback.handler.class"] = (
                        _UNSECURED_VALIDATOR
                    )
                props[f"{prefix}.{mechanism.lower()}.sasl.jaas.config"] = (
                    f"{_LOGIN_MODULES[mechanism]} required{options};"
                )
        return props

    def format_arguments(self) -> list[str]:
        """StorageTool's `--add-scram` arguments: each user under each SCRAM mechanism."""
        if not self.sasl:
            return []
        arguments: list[str] = []
        for mechanism in self.sasl_mechanisms:
            if mechanism in _SCRAM:
                for name, password in self.sasl_users.items():
                    arguments += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
        return arguments


Advertised = str | Mapping[str, str]


def advertised_addresses(value: Advertised | None) -> dict[str, str]:
    """Security protocol -> the "host:port" a node advertises for it instead of its own."""
    if value is None:
        return {}
    if isinstance(value, str):
        return {"PLAINTEXT": value}
    named = {name.upper(): address for name, address in value.items()}
    unknown = [name for name in named if name not in LISTENERS]
    if unknown:
        raise ValueError(f"advertised names listeners {unknown}, not among {', '.join(LISTENERS)}")
    return named


def write_certificates(directory: Path) -> tuple[Path, Path]:
    """A fresh CA and a broker certificate for 127.0.0.1 and localhost, in `directory`:
    (the CA's certificate, the broker's PEM keystore: its PKCS#8 key then its chain)."""
    try:
        import trustme
        from cryptography.hazmat.primitives import serialization
    except ImportError as exc:
        raise ImportError(
            f"TLS listeners need the trustme package ({exc}): pip install 'trio-kafka[testing]'"
        ) from exc
    ca = trustme.CA(organization_name="trio-kafka test CA")
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    # Kafka's PEM keystore reads PKCS#8 keys only; trustme writes the traditional format.
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    keystore = directory / "broker-keystore.pem"
    keystore.write_bytes(pkcs8 + b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    return ca_file, keystore


def unsecured_jwt(
    subject: str = "alice", *, issued_at: float, lifetime: float = 3600.0, **claims: object
) -> str:
    """An unsecured JWT (`alg: none`, no signature) for `subject`, as the OAUTHBEARER
    listeners of `kafka_broker()` accept: valid from `issued_at` (seconds since the
    epoch, e.g. `time.time()`) for `lifetime` seconds. Extra `claims` (e.g.
    `scope="write"`) go into its payload. For tests only: anyone can forge one."""

    def part(value: Mapping[str, object]) -> str:
        raw = json.dumps(value, separators=(",", ":")).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    # Whole seconds, iat rounded down: a fraction rounded up to the broker's millisecond
    # put iat in the future when the broker checked it within that millisecond, and
    # Kafka's unsecured validator (no clock skew allowed) answered invalid_token.
    payload: dict[str, object] = {
        "sub": subject,
        "iat": math.floor(issued_at),
        "exp": math.floor(issued_at + lifetime),
        **claims,
    }
    return f"{part({'alg': 'none'})}.{part(payload)}."


__all__ = [
    "LISTENERS",
    "SASL_MECHANISMS",
    "Advertised",
    "ListenerSecurity",
    "advertised_addresses",
    "unsecured_jwt",
    "write_certificates",
]
