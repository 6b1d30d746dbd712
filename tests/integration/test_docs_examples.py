"""Every ```python block of the docs pages runs, so what a new user copies works.

README.md, docs/asyncio.md and docs/sync.md have tests of their own (tests/test_readme.py,
tests/test_docs_asyncio.py, tests/integration/test_producer_sync.py). Here: the other
pages. A block is one of three kinds:

- a program (it ends in `trio.run(main)`): run as `__main__`, as written;
- a fragment (top-level `async with`/`await`, a broker at "127.0.0.1:9092" or
  "broker:9092"): run as the body of an async function, against our mock broker with the
  address swapped in and the names it leaves to the reader (`values`, `rows`, `state`)
  given; then what it left behind is checked;
- a block that needs what this machine lacks (a Spark session reading S3): its calls are
  checked against the real signatures and option parser.

`test_every_block_is_covered` counts each page's blocks, so a new example fails here
until a test runs it.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import ssl
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio

from tests._docs import python_blocks
from tests.integration._helpers import create_topic
from trio_kafka import Acknowledged
from trio_kafka.broker import CAS_CONFIG, open_cluster
from trio_kafka.broker import SaslConfig as BrokerSasl
from trio_kafka.client import PartitionReader, open_producer
from trio_kafka.client._reader import IsolationLevel
from trio_kafka.net import open_selector

DOCS = Path(__file__).resolve().parents[2] / "docs"
TESTED_ELSEWHERE = {"asyncio.md", "sync.md", "shutdown.md"}
#: Each page's blocks, by kind: the tests below name them by (page, number from 1).
PROGRAMS = {
    ("getting-started.md", 1),
    ("mock-broker.md", 1),
    ("transactions.md", 1),
    ("fault-proxy.md", 1),
    ("fault-proxy.md", 2),
}
OTHERS = {
    ("cas.md", 1),
    ("cas.md", 2),
    ("cas.md", 3),
    ("cas.md", 4),
    ("fault-proxy.md", 3),  # a pytest test: tests/unit/test_testing_memory.py runs it
    ("mock-broker.md", 2),
    ("producer.md", 1),
    ("producer.md", 2),
    ("producer.md", 3),
    ("security.md", 1),
    ("security.md", 2),
    ("security.md", 3),  # OAUTHBEARER: tests/integration/test_kafka_security.py runs it
    ("simulator.md", 1),
    ("simulator.md", 2),
    ("simulator.md", 3),
    ("simulator.md", 4),
    ("spark.md", 1),
    ("spark.md", 2),
    ("spark.md", 3),
    ("observability.md", 1),  # sets the global tracer provider: run in a process of its own
    # pytest tests on Apache Kafka: tests/integration/test_kafka_security.py runs 1 and
    # 4 (on its node with every listener), test_docs_testing.py 2 and 3.
    ("testing.md", 1),
    ("testing.md", 2),
    ("testing.md", 3),
    ("testing.md", 4),
}


def blocks(page: str) -> list[str]:
    return python_blocks(DOCS / page)


def block(page: str, number: int) -> str:
    return blocks(page)[number - 1]


def test_every_block_is_covered() -> None:
    found = {
        (path.name, number)
        for path in sorted(DOCS.glob("*.md"))
        if path.name not in TESTED_ELSEWHERE
        for number in range(1, len(blocks(path.name)) + 1)
    }
    assert found == PROGRAMS | OTHERS, "a docs example no test runs, or a test of a gone one"
    assert all("trio.run(main)" in block(*where) for where in PROGRAMS)


#: The programs that start Tansu (`tansu_broker`): marked, as every Tansu test is.
ON_TANSU = {("fault-proxy.md", 2)}


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(where, marks=[pytest.mark.tansu] if where in ON_TANSU else [])
        for where in sorted(PROGRAMS)
    ],
    ids=lambda w: f"{w[0]}#{w[1]}",
)
def test_a_program_runs_as_written(where: tuple[str, int], capsys: Any) -> None:
    page, number = where
    assert ("tansu_broker(" in block(page, number)) == (where in ON_TANSU)
    code = compile(block(page, number), f"docs/{page}, python block {number}", "exec")
    exec(code, {"__name__": "__main__"})
    if "print(" in block(page, number):
        assert capsys.readouterr().out.strip()


async def run_fragment(page: str, number: int, bootstrap: str, **names: Any) -> dict[str, Any]:
    """Run a fragment as an async function's body (the broker's address swapped in, the
    reader's names given) and return its locals."""
    source = block(page, number)
    for placeholder in ("127.0.0.1:9092", "broker:9092", "broker:9093"):
        source = source.replace(placeholder, bootstrap)
    body = textwrap.indent(source, "    ")
    wrapped = f"async def _example():\n{body}\n    return locals()\n"
    namespace: dict[str, Any] = {"__name__": "docs_example", **names}
    exec(compile(wrapped, f"docs/{page}, python block {number}", "exec"), namespace)
    result: dict[str, Any] = await namespace["_example"]()
    return result


def test_observability_the_program_prints_its_spans() -> None:
    """Run in a child process: it installs a global tracer provider, which would turn
    telemetry on for every later producer of this process."""
    done = subprocess.run(
        [sys.executable, "-c", block("observability.md", 1)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert '"name": "send orders"' in done.stdout
    assert '"messaging.kafka.message.key": "user-7"' in done.stdout
    assert '"name": "place order"' in done.stdout
    assert "acknowledged at offset 0" in done.stdout


# -- docs/cas.md ------------------------------------------------------------------------

CAS: dict[str, str | None] = {CAS_CONFIG: "true"}


async def test_cas_start_a_broker_with_the_extension(capsys: Any) -> None:
    left = await run_fragment("cas.md", 1, "unused")
    assert re.fullmatch(r"127\.0\.0\.1:\d+", capsys.readouterr().out.strip())
    assert left["cluster"].state.topics["log"].config.expected_offset_check


async def test_cas_a_write_lands_at_its_expected_offset() -> None:
    async with open_cluster() as cluster:
        cluster.create_topic("log", 1, CAS)
        async with open_producer(cluster.bootstrap) as producer:
            for n in range(42):
                await producer.send("log", b"%d" % n, partition=0)
        left = await run_fragment("cas.md", 2, cluster.bootstrap, open_producer=open_producer)
    assert left["ack"].offset == 42


class _State:
    """The reader's `state` of docs/cas.md's commit-log writer: applies records, makes
    `updates` updates, then ends the writer's loop; but not before one copy of the
    states sharing `met` applied the other's entry after one of its own (else it goes on
    updating: the copies then meet whatever the scheduling, no wall-clock race)."""

    class Done(Exception):
        pass

    #: Updates past `updates` at most while waiting for the copies to meet.
    CAP = 20_000

    def __init__(self, name: str, updates: int, met: list[bool]) -> None:
        self.name, self.left, self.made, self.met = name, updates, 0, met
        self.applied: list[bytes] = []
        self.wrote = False

    def apply(self, value: bytes) -> None:
        mine = value.startswith(self.name.encode())
        if mine:
            self.wrote = True
        elif self.wrote:
            self.met[0] = True
        self.applied.append(value)

    def next_update(self) -> bytes:
        if self.made >= self.left and (self.met[0] or self.made >= self.left + self.CAP):
            raise self.Done
        self.made += 1
        return f"{self.name}-{self.made}".encode()


@pytest.mark.parametrize(
    "where",
    ["cas", "transactional", pytest.param("kafka", marks=pytest.mark.kafka)],
)
async def test_cas_two_commit_log_writers_apply_every_entry_once(
    where: str, request: pytest.FixtureRequest
) -> None:
    """Two copies of the page's writer on one partition, with CAS and (a topic without
    it) with transactions, on the mock broker, and with transactions on Apache Kafka 4.4:
    each copy's state is the committed log from its start, in order, every entry applied
    once (its own appends when they return, the others' when read). With CAS a copy
    loses races and catches up; with transactions the copies fence each other and
    reopen. Before, a catch-up read the copy's own appends back."""
    # Each copy makes 60 updates, and goes on until one copy has read the other's
    # entries after writing its own (`_State`): with a fixed count the first copy could
    # finish before the second began writing (2 of 6 runs with 15 updates on a loaded
    # machine; once with 60, transactional, in a fresh-clone run). Transactional, the
    # page's pause before reopening makes the copies take turns (about a second each);
    # without it the fenced copy took the log back inside the other's InitProducerId
    # backoff, and the other starved past the cap (a fresh-clone run, session 21). On
    # Kafka the older copy's commit racing the newer one's open is sometimes answered
    # INVALID_TXN_STATE or UNKNOWN_SERVER_ERROR (docs/compatibility.md): the copy is
    # dead all the same, and its append settled from the log.
    met = [False]
    states = [_State("a", 60, met), _State("b", 60, met)]
    async with contextlib.AsyncExitStack() as stack:
        if where == "kafka":
            # (The module's own node: the page's topic "state" is free there.)
            bootstrap = request.getfixturevalue("kafka").bootstrap
            await create_topic(bootstrap, "state", 1)
        else:
            cluster = await stack.enter_async_context(open_cluster())
            bootstrap = cluster.bootstrap
            cluster.create_topic("state", 1, CAS if where == "cas" else {})

        async def writer(state: _State) -> None:
            with pytest.raises(_State.Done):
                await run_fragment("cas.md", 3, bootstrap, state=state)

        async with trio.open_nursery() as nursery:
            for state in states:
                nursery.start_soon(writer, state)
        async with open_selector(bootstrap) as selector:
            reader = PartitionReader(selector, isolation=IsolationLevel.READ_COMMITTED)
            log = [r.value for r in await reader.read_all("state", 0)]
    assert len(log) == len(set(log))  # nothing written twice
    assert len(log) >= 60  # a CAS update that lost its offset is not written
    for state in states:
        assert state.applied == log[: len(state.applied)], state.name
    others = [
        value
        for state in states
        for n, value in enumerate(state.applied)
        if not value.startswith(state.name.encode())
        and any(v.startswith(state.name.encode()) for v in state.applied[:n])
    ]
    assert others, "neither copy ever read the other's entries after writing its own"
    assert {value[:1] for value in log} == {b"a", b"b"}


async def test_cas_a_bulk_load_and_its_rerun() -> None:
    rows = [b"row %d" % n for n in range(500)]
    async with open_cluster() as cluster:
        cluster.create_topic("events", 3, CAS)
        first = await run_fragment("cas.md", 4, cluster.bootstrap, rows=rows)
        again = await run_fragment("cas.md", 4, cluster.bootstrap, rows=rows)
    assert (first["result"].loaded, first["result"].skipped) == (500, 0)
    assert (again["result"].loaded, again["result"].skipped) == (0, 500)


# -- docs/producer.md, docs/mock-broker.md ---------------------------------------------


async def test_producer_the_calls_of_the_guide() -> None:
    values = [b"v%d" % n for n in range(100)]
    async with open_cluster(topics={"events": 3}) as cluster:
        left = await run_fragment(
            "producer.md", 1, cluster.bootstrap, open_producer=open_producer, values=values
        )
        log = [r for p in range(3) for b in cluster.decoded("events", p) for r in b.records]
    assert isinstance(left["ack"], Acknowledged) and left["count"] == 100
    assert all(handle.done() for handle in left["handles"])
    assert len(log) == 1 + 100 + 100
    assert next(r for r in log if r.key == b"user-1").headers == (("h", b"v"),)


async def test_producer_wait_for_topics_gives_the_counts_its_comment_says() -> None:
    topics = {"orders": 6, "payments": 3, "refunds": 3}
    async with open_cluster(topics=topics) as cluster, open_producer(cluster.bootstrap) as p:
        left = await run_fragment("producer.md", 2, cluster.bootstrap, producer=p)
    assert left["counts"] == topics
    assert f"# {topics}".replace("'", '"') in block("producer.md", 2)


async def test_producer_a_window_of_handles_settles_every_record_in_order() -> None:
    """More values than the window holds: the window fills and drains, and every value
    lands once, in call order (one partition); nothing is left in it."""
    values = [b"w%d" % n for n in range(25_000)]
    async with open_cluster(topics={"events": 1}) as cluster:
        async with open_producer(cluster.bootstrap) as producer:
            left = await run_fragment(
                "producer.md", 3, cluster.bootstrap, producer=producer, values=values
            )
        log = [r.value for b in cluster.decoded("events", 0) for r in b.records]
    assert not left["window"]
    assert log == values


async def test_mock_broker_a_dropped_answer_is_retried_once() -> None:
    async with open_cluster(topics={"orders": 1}) as cluster:
        await run_fragment("mock-broker.md", 2, cluster.bootstrap, cluster=cluster)
        async with open_producer(cluster.bootstrap, request_timeout=2.0) as producer:
            ack = await producer.send_and_wait("orders", b"once")
        log = [r.value for b in cluster.decoded("orders", 0) for r in b.records]
    assert log == [b"once"] and ack.offset == 0


# -- docs/security.md -------------------------------------------------------------------


@pytest.mark.parametrize("number", [1, 2])
async def test_security_both_ways_in(number: int, ca: Any, tmp_path: Path) -> None:
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server)
    users = BrokerSasl({"alice": "alice-secret"})
    async with open_cluster(sasl=users, ssl_context=server, topics={"events": 1}) as cluster:
        with contextlib.chdir(tmp_path):  # the page names ca.pem by a relative path
            await run_fragment(
                "security.md", number, cluster.bootstrap, open_producer=open_producer
            )
        log = [r.value for b in cluster.decoded("events", 0) for r in b.records]
    assert log == ([b"hello"] if number == 1 else [])


# -- docs/simulator.md ------------------------------------------------------------------


def test_simulator_a_workload_of_your_own_and_its_property_test() -> None:
    """The page's workload, registered as written, survives the page's property test
    (fewer examples here than its 50); the loop version runs a seed clean."""
    from trio_kafka.sim.runner import run_seed
    from trio_kafka.sim.workloads import SimContext, register

    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(block("simulator.md", 2), "docs/simulator.md, python block 2", "exec"), namespace)
    source = block("simulator.md", 1).replace("max_examples=50", "max_examples=5")
    exec(compile(source, "docs/simulator.md, python block 1", "exec"), namespace)
    namespace["test_orders_survive_every_fault_plan"]()

    loop: dict[str, Any] = {"SimContext": SimContext, "trio": trio}
    exec(compile(block("simulator.md", 3), "docs/simulator.md, python block 3", "exec"), loop)
    register("orders-loop", topics={"orders": 3})(loop["orders"])
    result = run_seed("orders-loop", 1, profile="lite").result
    assert result.ok, result.violations[:3]
    assert sum(result.ops.values()) > 1, result.ops


def test_simulator_an_applications_own_retries() -> None:
    """The page's retrying workload registers as written and checks clean; in standard
    seed 0 one attempt fails and its retry is acknowledged (20 records, 21 sends)."""
    from trio_kafka.sim.runner import run_seed

    namespace: dict[str, Any] = {"__name__": "docs_example_retry"}
    exec(compile(block("simulator.md", 4), "docs/simulator.md, python block 4", "exec"), namespace)
    result = run_seed("orders-retry", 0, profile="standard").result
    assert result.ok, result.violations[:3]
    assert (result.ops["ok"], result.ops["fail"]) == (20, 1), result.ops


# -- docs/spark.md ------------------------------------------------------------------------


def test_spark_the_calls_take_what_the_page_gives_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """No Spark session reading S3 here (tests/spark runs real loads): the page's calls
    bind to `write_dataframe`'s signature and its options parse."""
    import trio_kafka.spark
    from trio_kafka.spark._options import NAME, LoadOptions

    calls: list[inspect.BoundArguments] = []
    signature = inspect.signature(trio_kafka.spark.write_dataframe)
    monkeypatch.setattr(
        trio_kafka.spark, "write_dataframe", lambda *a, **k: calls.append(signature.bind(*a, **k))
    )

    class Chain:
        """spark.read.parquet(...) and df.write.format(...).mode(...).option(...).save()."""

        def __init__(self) -> None:
            self.calls: list[tuple[str, tuple[Any, ...]]] = []

        def __getattr__(self, name: str) -> Any:
            def call(*args: Any) -> Chain:
                self.calls.append((name, args))
                return self

            return call if name not in ("read", "write") else self

    spark, df = Chain(), Chain()
    exec(compile(block("spark.md", 1), "docs/spark.md, python block 1", "exec"), {"spark": spark})
    assert len(calls) == 1 and calls[0].arguments["df"] is spark
    exec(compile(block("spark.md", 3), "docs/spark.md, python block 3", "exec"), {"df": df})
    assert ("format", (NAME,)) in df.calls and ("mode", ("append",)) in df.calls
    options = {args[0]: args[1] for name, args in df.calls if name == "option"}
    assert LoadOptions.parse(options).load_id == "orders-2025-11-22"
    assert df.calls[-1][0] == "save"

    # Block 2, the spark-submit job script: its main() with the page's arguments, a
    # stand-in SparkSession (the builder chain) instead of a JVM.
    import types

    session = Chain()
    stub = types.ModuleType("pyspark.sql")
    stub.SparkSession = types.SimpleNamespace(builder=session)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyspark.sql", stub)
    monkeypatch.setattr(sys, "argv", ["load_orders.py", "2025-11-22", "broker:9092"])
    job: dict[str, Any] = {"__name__": "load_orders"}
    exec(compile(block("spark.md", 2), "docs/spark.md, python block 2", "exec"), job)
    job["main"]()
    assert len(calls) == 2
    assert calls[1].arguments["load_id"] == "orders-2025-11-22"
    assert calls[1].arguments["bootstrap"] == "broker:9092"
    assert ("appName", ("load orders 2025-11-22",)) in session.calls
