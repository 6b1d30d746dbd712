"""ACLs on Apache Kafka 4.4: a producer whose principal lacks a permission is told so at
once, with the topic or transactional id and the ACL an administrator would grant, and
nothing else it does is hurt.

One node with the StandardAuthorizer and `allow.everyone.if.no.acl.found=false`, a
SASL_PLAINTEXT listener (PLAIN) for the users below, and ACLs made through
confluent-kafka's AdminClient (the reference client) on the PLAINTEXT listener, whose
principal (ANONYMOUS) is a super user, as the nodes' own connections must be:

- alice may write and describe topic `open`, only describe topic `describe-only`, and
  write and describe transactional id `tx-ok`; topic `closed` is not hers;
- carol may only describe topic `open` (so she may write nowhere);
- bob may do nothing.

Before, a topic the principal may not describe was waited for until `max_block` (60 s
by default) and then reported as missing ("Create it ..."); a refused write, a refused
transactional id and a refused idempotent producer said only "[..._AUTHORIZATION_FAILED]
... authorization failed.", naming neither what nor how to grant it.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest

from trio_kafka import (
    Acknowledged,
    SaslConfig,
    TopicAuthorizationError,
    TransactionAbortableError,
    TransactionalIdAuthorizationError,
    open_producer,
)
from trio_kafka.client import Producer
from trio_kafka.errors import FatalBrokerError, KafkaError
from trio_kafka.testing import KafkaNode, kafka_broker

pytestmark = pytest.mark.kafka

ck_admin = pytest.importorskip("confluent_kafka.admin")

USERS = {"alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"}
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "false",
}
E = TypeVar("E", bound=KafkaError)
#: Each refusal must come long before max_block (30 s below; 60 s by default).
FAST = 10.0


def _grant(admin: Any, resource: Any, name: str, principal: str, operations: list[Any]) -> None:
    acl = ck_admin
    bindings = [
        acl.AclBinding(
            resource,
            name,
            acl.ResourcePatternType.LITERAL,
            principal,
            "*",
            operation,
            acl.AclPermissionType.ALLOW,
        )
        for operation in operations
    ]
    for future in admin.create_acls(bindings).values():
        future.result()


@pytest.fixture(scope="module")
def secured() -> Iterator[KafkaNode]:
    with kafka_broker(
        listeners=("PLAINTEXT", "SASL_PLAINTEXT"),
        sasl_users=USERS,
        sasl_mechanisms=("PLAIN",),
        server_properties=AUTHORIZER,
        log_level="WARN",
    ) as node:
        admin = ck_admin.AdminClient({"bootstrap.servers": node.bootstrap})
        topics = [ck_admin.NewTopic(name, 1, 1) for name in ("open", "closed", "describe-only")]
        for future in admin.create_topics(topics).values():
            future.result()
        write, describe = ck_admin.AclOperation.WRITE, ck_admin.AclOperation.DESCRIBE
        topic, txn = ck_admin.ResourceType.TOPIC, ck_admin.ResourceType.TRANSACTIONAL_ID
        _grant(admin, topic, "open", "User:alice", [write, describe])
        _grant(admin, topic, "describe-only", "User:alice", [describe])
        _grant(admin, txn, "tx-ok", "User:alice", [write, describe])
        _grant(admin, topic, "open", "User:carol", [describe])
        yield node


def _options(node: KafkaNode, user: str = "alice", **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap": node.address("SASL_PLAINTEXT"),
        "sasl": SaslConfig("PLAIN", user, USERS[user]),
        "max_block": 30.0,
        **extra,
    }


async def _refused_at_once(
    error: type[E], call: Callable[[Producer], Awaitable[Any]], **options: Any
) -> E:
    """The `error` that `call(producer)` on a new producer with `options` raises (from
    the call or the close), checked to come within FAST seconds."""
    started = time.monotonic()
    with pytest.raises(error) as info:
        async with open_producer(**options) as producer:
            await call(producer)
    assert time.monotonic() - started < FAST
    return info.value


async def test_a_topic_the_principal_may_not_describe_fails_the_send_at_once(
    secured: KafkaNode,
) -> None:
    started = time.monotonic()
    async with open_producer(**_options(secured)) as producer:
        with pytest.raises(TopicAuthorizationError) as info:
            await producer.send("closed", b"v")
        assert time.monotonic() - started < FAST
        assert info.value.topic == "closed"
        message = str(info.value)
        assert "not authorized to describe topic 'closed'" in message
        assert "--operation Write --operation Describe --topic closed" in message
        # The producer goes on with the topics it may write.
        assert isinstance(await producer.send_and_wait("open", b"fine"), Acknowledged)


async def test_records_kept_for_a_topic_the_principal_may_not_describe_fail_at_once(
    secured: KafkaNode,
) -> None:
    # A producer that has had a Metadata answer keeps a record for a topic it does not
    # know yet and returns its handle at once (docs/producer.md): the handle fails.
    async with open_producer(**_options(secured)) as producer:
        await producer.send_and_wait("open", b"warm")
        started = time.monotonic()
        handles = [await producer.send("closed", b"%d" % i) for i in range(3)]
        for handle in handles:
            with pytest.raises(TopicAuthorizationError, match="topic 'closed'"):
                await handle
        assert time.monotonic() - started < FAST


async def test_a_refused_write_names_the_topic_and_the_write_acl_and_hurts_no_other(
    secured: KafkaNode,
) -> None:
    async with open_producer(**_options(secured)) as producer:
        refused = await producer.send("describe-only", b"no")
        fine = await producer.send("open", b"yes")
        with pytest.raises(TopicAuthorizationError) as info:
            await refused
        assert isinstance(await fine, Acknowledged)
        assert info.value.topic == "describe-only"
        assert "may describe the topic but not WRITE it" in str(info.value)
        assert "--topic describe-only" in str(info.value)


async def test_a_refused_transactional_id_is_fatal_and_names_the_id_and_its_acl(
    secured: KafkaNode,
) -> None:
    error = await _refused_at_once(
        TransactionalIdAuthorizationError,
        lambda producer: producer.init_transactions(),
        **_options(secured, transactional_id="tx-other"),
    )
    assert error.transactional_id == "tx-other"
    assert "--operation Write --operation Describe --transactional-id tx-other" in str(error)


async def test_a_topic_refused_in_a_transaction_aborts_it_and_the_next_one_commits(
    secured: KafkaNode,
) -> None:
    async with open_producer(**_options(secured, transactional_id="tx-ok")) as producer:
        await producer.init_transactions()
        with pytest.raises(TransactionAbortableError) as info:
            async with producer.transaction():
                await producer.send("describe-only", b"no")
        refused = info.value.cause if info.value.cause is not None else info.value
        assert "describe-only" in str(refused) or "describe-only" in str(info.value)
        async with producer.transaction():
            handle = await producer.send("open", b"committed")
        assert isinstance(await handle, Acknowledged)


async def test_an_idempotent_producer_without_any_write_acl_says_what_kip_679_needs(
    secured: KafkaNode,
) -> None:
    # carol may describe the topic, so nothing but InitProducerId can refuse her (bob,
    # who may not even describe it, meets whichever refusal comes first).
    error = await _refused_at_once(
        FatalBrokerError,
        lambda producer: producer.send_and_wait("open", b"v"),
        **_options(secured, user="carol"),
    )
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(error)
    assert "WRITE operation on at least one topic" in str(error)
    assert "enable_idempotence=False" in str(error)
    # Without idempotence the same principal learns which topic it lacks.
    async with open_producer(**_options(secured, user="bob", enable_idempotence=False)) as plain:
        with pytest.raises(TopicAuthorizationError, match="topic 'open'"):
            await plain.send("open", b"v")
