"""Implementations of `trio-kafka` subcommands (registered in `trio_kafka.cli`)."""
