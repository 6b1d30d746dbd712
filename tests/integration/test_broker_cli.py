"""`trio-kafka broker` runs the mock broker until interrupted."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration._helpers import interrupt_and_collect
from trio_kafka.testing import free_port

confluent_kafka = pytest.importorskip("confluent_kafka")


def test_cli_broker_serves_a_producer_and_logs_connections(tmp_path: Path) -> None:
    port = free_port()
    users = tmp_path / "users.txt"
    users.write_text("# users\nalice:secret\n")
    cli = Path(sys.executable).parent / "trio-kafka"
    # (Leaving the block closes the pipe and reaps the child, killed if it outlived the
    # test: a pipe left open failed a later test with a ResourceWarning.)
    with subprocess.Popen(
        [
            str(cli),
            "broker",
            "--port",
            str(port),
            "--sasl-users",
            str(users),
            "--sasl-mechanism",
            "SCRAM-SHA-256",
        ],
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            _serve_a_producer(proc, port)
        finally:
            _, err = interrupt_and_collect(proc, signal.SIGINT, 10)
    assert "connection from 127.0.0.1" in err
    assert proc.returncode == 0


def _serve_a_producer(proc: subprocess.Popen[str], port: int) -> None:
    """The broker's banner names its address and SASL; a confluent-kafka producer
    with SCRAM-SHA-256 gets its record acknowledged at offset 0."""
    assert proc.stderr is not None
    banner = proc.stderr.readline()
    assert f"127.0.0.1:{port}" in banner
    assert "SASL_PLAINTEXT" in banner
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": "secret",
            "log_level": 0,
        }
    )
    offsets: list[int] = []
    producer.produce("cli", value=b"x", on_delivery=lambda e, m: offsets.append(m.offset()))
    assert producer.flush(10) == 0
    assert offsets == [0]
    del producer


def test_mock_broker_process_serves_its_partitions_and_stops() -> None:
    from trio_kafka.testing import mock_broker_process

    with mock_broker_process(partitions=3) as bootstrap:
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "log_level": 0})
        delivered: list[tuple[int, int]] = []
        for i in range(30):
            producer.produce(
                "auto",
                value=b"%d" % i,
                partition=i % 3,
                on_delivery=lambda e, m: delivered.append((m.partition(), m.offset())),
            )
        assert producer.flush(10) == 0
        topics = producer.list_topics("auto", timeout=10).topics
        assert len(topics["auto"].partitions) == 3
        assert sorted(delivered) == [(p, o) for p in range(3) for o in range(10)]
        del producer
        host, port = bootstrap.split(":")
    with pytest.raises(OSError), socket.create_connection((host, int(port)), 1.0):
        pass
