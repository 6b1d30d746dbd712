"""The `trio-kafka` command."""

from __future__ import annotations

import click

from trio_kafka import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trio-kafka")
def main() -> None:
    """trio-kafka: a Kafka producer whose writes are never lost, duplicated or ambiguous."""
