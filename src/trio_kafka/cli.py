"""The `trio-kafka` command."""

from __future__ import annotations

import click

from trio_kafka._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trio-kafka")
def main() -> None:
    """trio-kafka: a Kafka producer whose writes are never lost, duplicated or ambiguous."""


def _read_users(values: tuple[str, ...]) -> dict[str, str]:
    """`user:password` pairs, or files holding one `user:password` per line."""
    from pathlib import Path

    users: dict[str, str] = {}
    for value in values:
        path = Path(value)
        lines = path.read_text().splitlines() if path.is_file() else [value]
        for line in lines:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, password = line.partition(":")
            if not sep or not user:
                raise click.BadParameter(
                    f"expected user:password, got {line!r}", param_hint="--sasl-users"
                )
            users[user] = password
    return users


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9092,
    show_default=True,
    help="Port of the first broker (the others follow; 0: free ports, printed).",
)
@click.option(
    "--brokers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="How many brokers (ports port, port+1...).",
)
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Partitions of auto-created topics.",
)
@click.option("--no-auto-create", is_flag=True, help="Do not create topics on Metadata requests.")
@click.option(
    "--transaction-version",
    type=click.Choice(["1", "2"]),
    default="1",
    show_default=True,
    help="2: KIP-890 transactions v2.",
)
@click.option(
    "--sasl-users",
    multiple=True,
    metavar="FILE|USER:PASSWORD",
    help="Require SASL with these users.",
)
@click.option(
    "--sasl-mechanism",
    multiple=True,
    type=click.Choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]),
    help="Mechanisms to accept (default: all three).",
)
@click.option(
    "--tls-cert", type=click.Path(exists=True, dir_okay=False), help="TLS certificate (PEM)."
)
@click.option(
    "--tls-key", type=click.Path(exists=True, dir_okay=False), help="TLS private key (PEM)."
)
@click.option(
    "--advertised-listener",
    multiple=True,
    metavar="HOST:PORT",
    help="Address clients are told for each broker, in node order (e.g. a fault proxy's).",
)
def broker(
    host: str,
    port: int,
    brokers: int,
    partitions: int,
    no_auto_create: bool,
    transaction_version: str,
    sasl_users: tuple[str, ...],
    sasl_mechanism: tuple[str, ...],
    tls_cert: str | None,
    tls_key: str | None,
    advertised_listener: tuple[str, ...],
) -> None:
    """Run the in-memory mock Kafka broker until interrupted."""
    import errno
    import logging
    import signal
    import ssl

    import trio

    from trio_kafka._cli.proxy import host_port
    from trio_kafka.broker import MECHANISMS, ClusterOptions, SaslConfig, open_cluster
    from trio_kafka.net import sole_error

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if port and port + brokers - 1 > 65535:
        raise click.BadParameter(
            f"{brokers} brokers from port {port} would need ports up to {port + brokers - 1}",
            param_hint="--port",
        )
    if bool(tls_cert) != bool(tls_key):
        raise click.UsageError("--tls-cert and --tls-key go together")
    sasl = None
    if sasl_users:
        sasl = SaslConfig(_read_users(sasl_users), mechanisms=sasl_mechanism or MECHANISMS)
    elif sasl_mechanism:
        raise click.UsageError("--sasl-mechanism needs --sasl-users")
    ssl_context = None
    if tls_cert and tls_key:
        ssl_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ssl_context.load_cert_chain(tls_cert, tls_key)
    advertised = None
    if advertised_listener:
        if len(advertised_listener) != brokers:
            raise click.BadParameter(
                f"{len(advertised_listener)} address(es) for {brokers} broker(s): "
                "give one per broker",
                param_hint="--advertised-listener",
            )
        advertised = [host_port(a, "--advertised-listener") for a in advertised_listener]
        if any(p == 0 for _, p in advertised):
            raise click.BadParameter(
                "port 0 cannot be advertised", param_hint="--advertised-listener"
            )
    options = ClusterOptions(
        auto_create_topics=not no_auto_create,
        default_partitions=partitions,
        transaction_version=int(transaction_version),
    )

    async def run() -> None:
        async with open_cluster(
            brokers,
            host=host,
            port=port,
            options=options,
            sasl=sasl,
            ssl_context=ssl_context,
            advertised=advertised,
        ) as cluster:
            security = (
                ("SASL_SSL" if ssl_context else "SASL_PLAINTEXT")
                if sasl
                else ("SSL" if ssl_context else "PLAINTEXT")
            )
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                listening = ",".join(f"{h}:{p}" for _, (h, p) in sorted(cluster.listening.items()))
                shown = cluster.bootstrap
                if shown != listening:
                    shown = f"{listening}, advertised as {shown}"
                click.echo(f"trio-kafka mock broker: {shown} ({security})", err=True)
                async for signum in signals:
                    # Its normal end: exit 0 (docs/shutdown.md). The data was in memory.
                    click.echo(
                        f"received {signal.Signals(signum).name}: the mock broker stopped "
                        "(its data was in memory and is gone)",
                        err=True,
                    )
                    return

    try:
        trio.run(run)
    except (OSError, BaseExceptionGroup) as exc:
        # Listening failed (the port is taken, the host is not this machine's): say so,
        # not a traceback through the cluster's nursery.
        error = sole_error(exc) if isinstance(exc, BaseExceptionGroup) else exc
        if not isinstance(error, OSError):
            raise
        raise click.ClickException(
            f"cannot listen on {host}:{port}: {error.strerror or error}"
            + (
                " (another broker runs there? try another --port)"
                if error.errno == errno.EADDRINUSE
                else ""
            )
        ) from None


from trio_kafka._cli.simulate import simulate  # noqa: E402

main.add_command(simulate)

from trio_kafka._cli.load import load  # noqa: E402
from trio_kafka._cli.tail import tail  # noqa: E402

main.add_command(load)
main.add_command(tail)

from trio_kafka._cli.demo import demo  # noqa: E402

main.add_command(demo)

from trio_kafka._cli.proxy import proxy  # noqa: E402

main.add_command(proxy)
