"""`trio-kafka load` and `tail` against the mock broker's TLS and SASL listeners, with
the flags that mirror `open_producer`'s Kafka options; bad combinations are click errors
naming the flags, before anything connects."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from trio_kafka.broker import SaslConfig, ThreadedCluster, run_in_thread
from trio_kafka.cli import main

trustme = pytest.importorskip("trustme")

USERS = {"alice": "alice-secret"}


def _server_context(ca: Any) -> ssl.SSLContext:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server)
    return server


@pytest.fixture(scope="module")
def sasl_ssl(ca: Any) -> Iterator[ThreadedCluster]:
    with run_in_thread(1, sasl=SaslConfig(USERS), ssl_context=_server_context(ca)) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def tls_only(ca: Any) -> Iterator[ThreadedCluster]:
    with run_in_thread(1, ssl_context=_server_context(ca)) as cluster:
        yield cluster


def _rows(tmp_path: Path) -> Path:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"id": "a"}\n{"id": "b"}\n')
    return rows


def _sasl(ca_file: Path, mechanism: str = "SCRAM-SHA-512") -> list[str]:
    return [
        "--security-protocol",
        "SASL_SSL",
        "--sasl-mechanism",
        mechanism,
        "--sasl-username",
        "alice",
        "--ssl-cafile",
        str(ca_file),
    ]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_load_and_tail_over_sasl_ssl(
    tmp_path: Path, sasl_ssl: ThreadedCluster, ca_file: Path, mechanism: str
) -> None:
    topic = f"secure-{mechanism.lower()}"
    flags = [*_sasl(ca_file, mechanism), "--sasl-password", USERS["alice"]]
    loaded = CliRunner().invoke(
        main,
        [
            "load",
            str(_rows(tmp_path)),
            "--topic",
            topic,
            "--bootstrap",
            sasl_ssl.bootstrap,
            "--quiet",
            *flags,
        ],
    )
    assert loaded.exit_code == 0, loaded.output
    tailed = CliRunner().invoke(
        main, ["tail", "--topic", topic, "--bootstrap", sasl_ssl.bootstrap, *flags]
    )
    assert tailed.exit_code == 0, tailed.output
    assert [line.split("\t")[2] for line in tailed.output.splitlines()] == [
        '{"id": "a"}',
        '{"id": "b"}',
    ]


def test_the_sasl_password_comes_from_the_environment(
    tmp_path: Path, sasl_ssl: ThreadedCluster, ca_file: Path
) -> None:
    result = CliRunner().invoke(
        main,
        [
            "load",
            str(_rows(tmp_path)),
            "--topic",
            "env",
            "--bootstrap",
            sasl_ssl.bootstrap,
            "--quiet",
            *_sasl(ca_file),
        ],
        env={"TRIO_KAFKA_SASL_PASSWORD": USERS["alice"]},
    )
    assert result.exit_code == 0, result.output


def test_a_wrong_password_is_an_authentication_error(
    tmp_path: Path, sasl_ssl: ThreadedCluster, ca_file: Path
) -> None:
    result = CliRunner().invoke(
        main,
        [
            "tail",
            "--topic",
            "any",
            "--bootstrap",
            sasl_ssl.bootstrap,
            *_sasl(ca_file),
            "--sasl-password",
            "wrong",
        ],
    )
    assert result.exit_code == 1, result.output
    assert "Authentication" in result.output


def test_tls_alone_with_a_ca_file(tmp_path: Path, tls_only: ThreadedCluster, ca_file: Path) -> None:
    # --ssl-cafile alone means SSL, as ssl_cafile= does for open_producer.
    flags = ["--bootstrap", tls_only.bootstrap, "--ssl-cafile", str(ca_file)]
    loaded = CliRunner().invoke(
        main, ["load", str(_rows(tmp_path)), "--topic", "tls", "--quiet", *flags]
    )
    assert loaded.exit_code == 0, loaded.output
    tailed = CliRunner().invoke(main, ["tail", "--topic", "tls", *flags])
    assert tailed.exit_code == 0, tailed.output
    assert len(tailed.output.splitlines()) == 2


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--sasl-username", "alice"], "--sasl-mechanism"),
        (["--security-protocol", "PLAINTEXT", "--sasl-mechanism", "PLAIN"], "--sasl-mechanism"),
        (["--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN"], "--sasl-password"),
        (["--security-protocol", "TLS"], "--security-protocol"),
        (["--sasl-mechanism", "GSSAPI"], "--sasl-mechanism"),
        (["--ssl-cafile", "/no/such/ca.pem"], "--ssl-cafile"),
    ],
)
@pytest.mark.parametrize("command", ["load", "tail"])
def test_bad_security_flags_are_refused_naming_the_flag(
    tmp_path: Path, command: str, flags: list[str], named: str
) -> None:
    args = ["--topic", "t", "--bootstrap", "127.0.0.1:1", *flags]
    if command == "load":
        args = [str(_rows(tmp_path)), *args]
    result = CliRunner().invoke(main, [command, *args])
    assert result.exit_code == 2, result.output
    assert named in result.output


def test_a_pem_that_is_not_one_is_refused_naming_the_flag(tmp_path: Path) -> None:
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    result = CliRunner().invoke(
        main, ["tail", "--topic", "t", "--bootstrap", "127.0.0.1:1", "--ssl-cafile", str(bad)]
    )
    assert result.exit_code == 2, result.output
    assert "--ssl-cafile" in result.output
