"""Our message declarations against Kafka's official JSON definitions, field by field.

For every declared API (request and response) and every version we support: the same
fields in the same order, with the snake_case of the JSON name, the same type, present in
the same versions, nullable in the same versions, tagged with the same tag in the same
versions, the same default, the same flexible and valid versions.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import attrs
import pytest

from trio_kafka.protocol import (
    REQUEST_CLASSES,
    Message,
    RequestHeader,
    ResponseHeader,
    Struct,
    Versions,
    field_specs,
)
from trio_kafka.protocol._schema import StructType
from trio_kafka.protocol._types import Array

MESSAGE_CLASSES: list[type[Message]] = [
    c for req in REQUEST_CLASSES.values() for c in (req, req.RESPONSE)
]

# The header's JSON names are prefixed; the interface names them without the prefix.
RENAMED = {
    ("RequestHeader", "RequestApiKey"): "api_key",
    ("RequestHeader", "RequestApiVersion"): "api_version",
}


def load_json(directory: Path, name: str) -> dict[str, Any]:
    text = (directory / "message" / f"{name}.json").read_text()
    return json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.MULTILINE))


def snake(name: str) -> str:
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


ZERO: dict[str, Any] = {
    "int8": 0,
    "int16": 0,
    "int32": 0,
    "int64": 0,
    "uint16": 0,
    "float64": 0.0,
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": b"",
    "uuid": uuid.UUID(int=0),
}


def json_default(field: dict[str, Any]) -> Any:
    """The default Kafka's generated code gives the field."""
    kind = field["type"]
    if kind.startswith("[]"):
        return []
    if kind not in ZERO:
        return "struct"  # a default instance: checked by recursion
    if "default" not in field:
        return ZERO[kind]
    raw = field["default"]
    if isinstance(raw, bool | int):
        return raw
    if kind == "bool":
        return raw == "true"
    if kind == "string":
        return None if raw == "null" else raw
    if kind == "float64":
        return float(raw)
    return int(raw, 0)


def our_default(a: attrs.Attribute[Any]) -> Any:
    default = a.default
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        value = default.factory()  # type: ignore[union-attr]
        return "struct" if isinstance(value, Struct) else value
    return default


def type_name(wire: Any) -> str:
    return str(wire.json_name)


def compare_fields(
    owner: str,
    json_fields: list[dict[str, Any]],
    cls: type[Struct],
    versions: range,
    commons: dict[str, list[dict[str, Any]]],
    problems: list[str],
) -> None:
    ours = field_specs(cls)
    attributes = {a.name: a for a in attrs.fields(cls)}
    if [RENAMED.get((owner, f["name"]), snake(f["name"])) for f in json_fields] != [
        name for name, _ in ours
    ]:
        problems.append(
            f"{owner}: fields {[f['name'] for f in json_fields]} vs ours {[n for n, _ in ours]}"
        )
        return
    for jf, (name, spec) in zip(json_fields, ours):
        where = f"{owner}.{jf['name']}"
        if type_name(spec.type) != jf["type"]:
            problems.append(f"{where}: type {jf['type']} vs ours {type_name(spec.type)}")
        json_versions = Versions.parse(jf["versions"])
        json_nullable = Versions.parse(jf.get("nullableVersions", "none"))
        json_tagged = Versions.parse(jf.get("taggedVersions", "none"))
        json_flexible = jf.get("flexibleVersions")
        for v in versions:
            for what, theirs, mine in (
                ("present", json_versions, spec.versions),
                ("nullable", json_nullable, spec.nullable),
                ("tagged", json_tagged, spec.tagged),
            ):
                if (v in theirs) != (v in mine):
                    problems.append(f"{where} v{v}: {what} in JSON={v in theirs}, ours={v in mine}")
        if jf.get("tag") != spec.tag:
            problems.append(f"{where}: tag {jf.get('tag')} vs ours {spec.tag}")
        if (json_flexible is None) != (spec.flexible is None) or (
            json_flexible is not None and Versions.parse(json_flexible) != spec.flexible
        ):
            problems.append(f"{where}: field flexibleVersions {json_flexible} vs {spec.flexible}")
        expected = json_default(jf)
        actual = our_default(attributes[name])
        if expected != actual or type(expected) is not type(actual):
            problems.append(f"{where}: default {expected!r} vs ours {actual!r}")
        element = spec.type.element if isinstance(spec.type, Array) else spec.type
        if isinstance(element, StructType):
            nested = jf.get("fields") or commons[jf["type"].removeprefix("[]")]
            compare_fields(element.json_name, nested, element.cls, versions, commons, problems)


#: Versions Apache Kafka added after the snapshot in ../shared/kafka-protocol, each the
#: same on the wire as the one before: Produce v12 is v11 saying the producer uses
#: transactions v2 (KIP-890; Kafka 4.4 fails a v2 transaction's Produce v11 with
#: TRANSACTION_ABORTABLE, since only v12 adds the partition to the transaction).
NEWER_THAN_SNAPSHOT = {"ProduceRequest": 12, "ProduceResponse": 12}


def check_message(directory: Path, cls: type[Message]) -> list[str]:
    definition = load_json(directory, cls.JSON_NAME or cls.__name__)
    problems: list[str] = []
    valid = Versions.parse(definition["validVersions"])
    high = NEWER_THAN_SNAPSHOT.get(cls.__name__, valid.high)
    if (valid.low, high) != (cls.MIN_VERSION, cls.MAX_VERSION):
        problems.append(
            f"validVersions {definition['validVersions']} vs ours "
            f"{cls.MIN_VERSION}-{cls.MAX_VERSION}"
        )
    flexible = Versions.parse(definition.get("flexibleVersions", "none"))
    ours = NO_FLEX if cls.FLEXIBLE_VERSION is None else Versions(cls.FLEXIBLE_VERSION, None)
    if flexible != ours:
        problems.append(f"flexibleVersions {flexible} vs ours {ours}")
    if "apiKey" in definition and definition["apiKey"] != getattr(cls, "API_KEY", None):
        problems.append(f"apiKey {definition['apiKey']} vs ours {getattr(cls, 'API_KEY', None)}")
    commons = {s["name"]: s["fields"] for s in definition.get("commonStructs", [])}
    compare_fields(
        definition["name"],
        definition["fields"],
        cls,
        range(cls.MIN_VERSION, cls.MAX_VERSION + 1),
        commons,
        problems,
    )
    return problems


NO_FLEX = Versions.parse("none")


@pytest.mark.parametrize(
    "cls", [*MESSAGE_CLASSES, RequestHeader, ResponseHeader], ids=lambda c: c.__name__
)
def test_declaration_matches_the_official_json(
    kafka_protocol_dir: Path, cls: type[Message]
) -> None:
    assert check_message(kafka_protocol_dir, cls) == []


def test_every_request_has_its_response_and_a_unique_api_key() -> None:
    for api_key, request in REQUEST_CLASSES.items():
        assert api_key == request.API_KEY
        assert request.__name__.removesuffix("Request") == request.RESPONSE.__name__.removesuffix(
            "Response"
        )
        assert api_key == request.RESPONSE.API_KEY
        assert (request.MIN_VERSION, request.MAX_VERSION, request.FLEXIBLE_VERSION) == (
            request.RESPONSE.MIN_VERSION,
            request.RESPONSE.MAX_VERSION,
            request.RESPONSE.FLEXIBLE_VERSION,
        )


def test_the_apis_the_brief_requires_cover_at_least_their_ranges() -> None:
    required = {
        "ApiVersions": (0, 4),
        "Metadata": (0, 12),
        "Produce": (3, 11),
        "InitProducerId": (0, 5),
        "FindCoordinator": (0, 6),
        "AddPartitionsToTxn": (0, 5),
        "AddOffsetsToTxn": (0, 4),
        "EndTxn": (0, 5),
        "TxnOffsetCommit": (0, 4),
        "ListOffsets": (1, 10),
        "Fetch": (4, 17),
        "CreateTopics": (2, 7),
        "DeleteTopics": (1, 6),
        "DescribeConfigs": (1, 4),
        "SaslHandshake": (0, 1),
        "SaslAuthenticate": (0, 2),
        "DescribeProducers": (0, 0),
        "WriteTxnMarkers": (0, 1),
        "OffsetCommit": (0, 9),
        "OffsetFetch": (0, 9),
        "JoinGroup": (0, 9),
        "SyncGroup": (0, 5),
        "Heartbeat": (0, 4),
        "LeaveGroup": (0, 5),
    }
    by_name = {c.__name__.removesuffix("Request"): c for c in REQUEST_CLASSES.values()}
    for name, (low, high) in required.items():
        cls = by_name[name]
        assert low >= cls.MIN_VERSION and high <= cls.MAX_VERSION, name


def test_the_checker_notices_a_divergence(kafka_protocol_dir: Path) -> None:
    """Guard the guard: a wrong declaration must produce a complaint."""
    from trio_kafka.protocol._schema import field
    from trio_kafka.protocol._types import INT16, INT32, STRING

    @attrs.frozen
    class EndTxnRequest(Message):  # v1-v5 of the real one, with Committed as int16
        MIN_VERSION = 0
        MAX_VERSION = 5
        FLEXIBLE_VERSION = 3

        transactional_id: str = field(STRING)
        producer_id: int = field(INT32)
        producer_epoch: int = field(INT16)
        committed: int = field(INT16)

    problems = check_message(kafka_protocol_dir, EndTxnRequest)
    assert any("ProducerId: type int64" in p for p in problems)
    assert any("Committed: type bool" in p for p in problems)
