"""The TLS and SASL options of the client commands (`load`, `tail`).

The same names as `open_producer`'s Kafka options, as flags: `--security-protocol`,
`--sasl-mechanism`, `--sasl-username`, `--sasl-password` (or the environment variable
TRIO_KAFKA_SASL_PASSWORD, kept out of the process list), `--ssl-cafile`,
`--ssl-certfile`, `--ssl-keyfile`. The client's own rules decide what they mean
(client/_security.py: never silently weaker than asked); a combination it refuses is a
click error naming the options.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

import click

from trio_kafka.client import PROTOCOLS, Security, pop_security
from trio_kafka.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PASSWORD_ENV = "TRIO_KAFKA_SASL_PASSWORD"

# Kafka's option name (as the client's messages spell it) -> the flag.
_FLAGS = {
    "security_protocol": "--security-protocol",
    "sasl_mechanism": "--sasl-mechanism",
    "sasl_plain_username": "--sasl-username",
    "sasl_username": "--sasl-username",
    "sasl_plain_password": "--sasl-password",
    "sasl_password": "--sasl-password",
    "ssl_cafile": "--ssl-cafile",
    "cafile": "--ssl-cafile",
    "ssl_certfile": "--ssl-certfile",
    "certfile": "--ssl-certfile",
    "ssl_keyfile": "--ssl-keyfile",
    "keyfile": "--ssl-keyfile",
}
_NAMES = re.compile(r"\b(" + "|".join(sorted(_FLAGS, key=len, reverse=True)) + r")\b")
_PARAMS = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
)


def security_options(command: F) -> F:
    """Add the TLS and SASL flags to a click command."""
    pem = click.Path(exists=True, dir_okay=False)
    options = [
        click.option(
            "--security-protocol",
            # Checked by the client's rules (any case), shown as Kafka spells them.
            metavar="[" + "|".join(PROTOCOLS) + "]",
            help="How to reach the brokers (default PLAINTEXT; SSL or SASL_SSL with "
            "--ssl-* or --sasl-* alone).",
        ),
        click.option("--sasl-mechanism", type=click.Choice(MECHANISMS), help="SASL mechanism."),
        click.option("--sasl-username", help="SASL user name."),
        click.option(
            "--sasl-password",
            envvar=PASSWORD_ENV,
            help=f"SASL password (better: the environment variable {PASSWORD_ENV}).",
        ),
        click.option("--ssl-cafile", type=pem, help="CA certificates (PEM) to verify brokers by."),
        click.option("--ssl-certfile", type=pem, help="Client certificate (PEM), mutual TLS."),
        click.option("--ssl-keyfile", type=pem, help="Client certificate's private key (PEM)."),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def pop_security_options(params: dict[str, Any]) -> Security:
    """Take the flags out of a command's `params` and decide what the connections use;
    a combination the client refuses is a `click.BadParameter` naming the flags."""
    given = {name: params.pop(name) for name in _PARAMS}
    kafka = {name: value for name, value in given.items() if value is not None}
    try:
        return pop_security(kafka, None, None)
    except ConfigError as exc:
        # The client's remedies in flag names (its `sasl=` alternative is not a flag).
        message = _NAMES.sub(lambda m: _FLAGS[m.group(1)], str(exc))
        message = message.replace(", or sasl=SaslConfig(...)", "")
        named = dict.fromkeys(_FLAGS[m.group(1)] for m in _NAMES.finditer(str(exc)))
        raise click.BadParameter(message, param_hint=" / ".join(named) or None) from None


__all__ = ["PASSWORD_ENV", "pop_security_options", "security_options"]
