"""The security listeners of `kafka_broker()` as configuration, without a JVM: what goes
into server.properties and StorageTool, and the clear errors for bad arguments."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest

from trio_kafka.testing import KafkaNode, unsecured_jwt
from trio_kafka.testing._kafka_security import (
    ListenerSecurity,
    advertised_addresses,
    write_certificates,
)


def test_plaintext_only_adds_no_security_properties() -> None:
    props = ListenerSecurity().properties(None)
    assert props == {"listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"}
    assert ListenerSecurity().format_arguments() == []


def test_plaintext_always_comes_first_as_the_inter_broker_listener() -> None:
    assert ListenerSecurity(["sasl_ssl"]).listeners == ("PLAINTEXT", "SASL_SSL")


def test_sasl_listeners_get_each_mechanisms_jaas_and_scram_users_go_to_format() -> None:
    security = ListenerSecurity(
        ("PLAINTEXT", "SASL_PLAINTEXT"), {"alice": "alice-secret"}, ("PLAIN", "SCRAM-SHA-256")
    )
    props = security.properties(None)
    assert props["sasl.enabled.mechanisms"] == "PLAIN,SCRAM-SHA-256"
    assert props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_alice="alice-secret";'
    )
    assert "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config" in props
    assert security.format_arguments() == [
        "--add-scram",
        "SCRAM-SHA-256=[name=alice,password=alice-secret]",
    ]


def test_tls_listeners_use_the_pem_keystore(tmp_path: Path) -> None:
    props = ListenerSecurity(("SSL",)).properties(tmp_path / "keystore.pem")
    assert props["ssl.keystore.type"] == "PEM"
    assert props["ssl.keystore.location"] == str(tmp_path / "keystore.pem")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"listeners": ("TLS",)}, "listeners ['TLS'] are not among"),
        ({"sasl_mechanisms": ("GSSAPI",)}, "sasl_mechanisms ['GSSAPI'] must name some of"),
        ({"sasl_users": {"alice": 'pass"word'}}, "the password 'pass\"word' must be"),
        ({"sasl_users": {"al ice": "pw"}}, "the user name 'al ice' must be"),
    ],
)
def test_bad_arguments_are_named(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        ListenerSecurity(**arguments)  # type: ignore[arg-type]
    assert message in str(info.value)


def test_advertised_takes_an_address_or_one_per_listener() -> None:
    assert advertised_addresses("127.0.0.1:1") == {"PLAINTEXT": "127.0.0.1:1"}
    assert advertised_addresses({"sasl_ssl": "127.0.0.1:2"}) == {"SASL_SSL": "127.0.0.1:2"}
    with pytest.raises(ValueError, match="not among"):
        advertised_addresses({"TLS": "127.0.0.1:3"})


def test_a_missing_listener_says_how_to_add_it(tmp_path: Path) -> None:
    node = KafkaNode(node_id=1, port=1, controller_port=2, directory=tmp_path)
    assert node.address("plaintext") == "127.0.0.1:1"
    with pytest.raises(KeyError, match=r"no SASL_SSL listener .* listeners=\(\.\.\., 'SASL_SSL'\)"):
        node.address("SASL_SSL")


def test_the_keystore_holds_a_pkcs8_key_and_the_certificate(tmp_path: Path) -> None:
    ca_file, keystore = write_certificates(tmp_path)
    assert ca_file.read_text().startswith("-----BEGIN CERTIFICATE-----")
    text = keystore.read_text()
    assert text.startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8, all Kafka reads
    assert "-----BEGIN CERTIFICATE-----" in text


def test_tls_without_trustme_says_which_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "trustme", None)
    with pytest.raises(ImportError, match=r"pip install 'trio-kafka\[testing\]'"):
        write_certificates(tmp_path)


def test_an_unsecured_jwt_has_no_signature_and_the_claims() -> None:
    header, payload, signature = unsecured_jwt("alice", issued_at=100.0, lifetime=60).split(".")
    assert signature == ""

    def decode(part: str) -> object:
        return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))

    assert decode(header) == {"alg": "none"}
    assert decode(payload) == {"sub": "alice", "iat": 100.0, "exp": 160.0}
