"""The errors a new user meets first say what happened and what to do.

No broker at the address, a topic that does not exist, a CAS write to a topic or broker
without the extension, a misspelt or Java-style option name.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from trio_kafka.broker import ClusterOptions, open_cluster
from trio_kafka.cli import main
from trio_kafka.client import open_conditional_writer, open_producer
from trio_kafka.errors import (
    BrokerConnectionError,
    CasNotSupportedError,
    ConfigError,
    UnknownTopicError,
)
from trio_kafka.testing import TansuBroker


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_no_broker_at_the_address_says_so_and_how_to_start_one() -> None:
    address = f"127.0.0.1:{_unused_port()}"
    async with open_producer(address, max_block=0.5, reconnect_backoff=0.01) as producer:
        # A connection error, not UnknownTopicError: the topic is not the problem.
        with pytest.raises(BrokerConnectionError) as info:
            await producer.send("events", b"x")
    message = str(info.value)
    print(message)
    assert f"Is a broker running at {address}?" in message
    assert "ConnectionRefusedError" in message
    assert "'events'" in message
    assert "trio-kafka broker" in message
    assert "Create it" not in message


def test_load_with_no_broker_at_the_address_is_one_clear_line(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"a": 1}\n')
    address = f"127.0.0.1:{_unused_port()}"
    result = CliRunner().invoke(
        main, ["load", str(rows), "--topic", "t", "--bootstrap", address, "--quiet"]
    )
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and "ExceptionGroup" not in result.output
    assert "BrokerConnectionError" in result.output and address in result.output
    assert "is the broker running" in result.output


async def test_a_missing_topic_names_it_and_how_to_create_it() -> None:
    options = ClusterOptions(auto_create_topics=False)
    async with open_cluster(options=options) as cluster:
        producer_context = open_producer(cluster.bootstrap, max_block=0.5)
        async with producer_context as producer:
            with pytest.raises(UnknownTopicError) as info:
                await producer.send("no-such-topic", b"x")
    message = str(info.value)
    print(message)
    # The bootstrap address is also broker 0's: named once.
    assert message.count(cluster.bootstrap) == 1
    assert f"Brokers known: {cluster.bootstrap}" in message
    assert "'no-such-topic'" in message
    assert "UNKNOWN_TOPIC_OR_PARTITION" in message
    assert "create_topic" in message and "auto-creation" in message
    assert "0.5 s" in message


async def test_cas_to_a_topic_without_the_check_says_how_to_create_one() -> None:
    async with open_cluster() as cluster:
        cluster.create_topic("plain", 1)
        async with open_producer(cluster.bootstrap, linger=0) as producer:
            with pytest.raises(CasNotSupportedError) as info:
                await producer.send("plain", b"x", partition=0, expected_offset=0)
            message = str(info.value)
            print(message)
            assert "expected.offset.check.enable=true" in message
            assert "cas=True" in message
            with pytest.raises(CasNotSupportedError):
                async with open_conditional_writer("plain", 0, producer=producer):
                    pass


@pytest.mark.tansu
async def test_cas_to_a_broker_without_the_extension_is_refused(tansu: TansuBroker) -> None:
    from trio_kafka.client import create_topic

    async with open_producer(tansu.bootstrap, linger=0) as producer:
        await create_topic(producer.selector, "first-hour-cas", 1, cas=False, replication_factor=1)
        with pytest.raises(CasNotSupportedError) as info:
            await producer.send("first-hour-cas", b"x", partition=0, expected_offset=0)
    message = str(info.value)
    print(message)
    assert "does not advertise" in message and "expected.offset.cas" in message
    assert "trio-kafka broker" in message


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("lingr", "did you mean 'linger'?"),
        ("linger_ms", "did you mean 'linger'? (the Java client's name; in seconds here"),
        ("linger.ms", "did you mean 'linger'? (the Java client's name; in seconds here"),
        ("max.in.flight.requests.per.connection", "did you mean 'max_in_flight'?"),
        ("enable.idempotence", "did you mean 'enable_idempotence'?"),
        ("bootstrap_servers", "open_producer('host:9092')"),
        ("xyzzy", "the options are: acks, "),
    ],
)
async def test_an_unknown_option_names_the_right_one(option: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        async with open_producer("127.0.0.1:9", **{option: 1}):
            pass
    message = str(info.value)
    assert message.startswith(f"unknown producer option {option!r}")
    assert expected in message


async def test_open_producer_without_an_address_says_what_to_pass() -> None:
    with pytest.raises(ConfigError, match="bootstrap='host:port'"):
        async with open_producer():
            pass


async def test_a_refused_connection_says_nothing_listens_there() -> None:
    from trio_kafka.net import open_selector

    address = f"127.0.0.1:{_unused_port()}"
    async with open_selector(address) as selector:
        with pytest.raises(BrokerConnectionError) as info:
            await selector.refresh_metadata()
    message = str(info.value)
    assert address in message
    assert "nothing listens there: is the broker running, at this host and port?" in message
