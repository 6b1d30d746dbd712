"""The blocking facade `trio_kafka.sync.Producer` against the mock broker in a thread
(and against a silent port, for what must not depend on a broker answering).

No wall-clock assertions: where a bound matters (close), the test checks what the bound
produced (the thread is gone, every record has a final outcome), plus at most a loose
`timeout + 5 s` that cannot flake.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from tests._docs import python_blocks
from tests.integration._helpers import FAST, consume_all, create_topic
from tests.integration._real import RealBroker
from trio_kafka._sync_runner import Runner
from trio_kafka.broker import Hook, HookCall, ThreadedCluster, run_in_thread
from trio_kafka.client import Acknowledged, Ambiguous, Failed
from trio_kafka.core import ProducerRecord
from trio_kafka.errors import (
    AmbiguousError,
    ConfigError,
    ErrorCode,
    ProducerClosedError,
)
from trio_kafka.protocol.messages.metadata import MetadataRequest
from trio_kafka.sync import DeliveryFuture, Producer


@contextlib.contextmanager
def silent_port() -> Iterator[str]:
    """A TCP port that accepts connections (the kernel's backlog) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def producer_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("trio-kafka-producer")}


def pending_topic(name: str) -> Any:
    """A Metadata hook: `name` is being created (LEADER_NOT_AVAILABLE, as Kafka answers
    while it auto-creates a topic), for as long as the hook is installed."""

    def hook(call: HookCall) -> Any:
        topics = [
            attrs.evolve(t, error_code=ErrorCode.LEADER_NOT_AVAILABLE, partitions=[])
            if t.name == name
            else t
            for t in call.response.topics
        ]
        return attrs.evolve(call.response, topics=topics)

    return hook


def install(broker: ThreadedCluster, hook: Any) -> Hook:
    return broker.call(lambda: broker.cluster.add_hook(MetadataRequest, hook, after=True))


# -- sending ----------------------------------------------------------------------------


def test_send_flush_and_results_from_a_plain_thread() -> None:
    with run_in_thread(topics={"t": 3}) as broker:
        with Producer(bootstrap=broker.bootstrap, linger=0.001) as producer:
            futures = [producer.send("t", b"v%d" % i, key=b"k%d" % (i % 7)) for i in range(2000)]
            assert producer.flush(timeout=10) == 0
            assert all(f.done() for f in futures)
            results = [f.result(timeout=0) for f in futures]
            assert all(isinstance(r, Acknowledged) for r in results)
            assert all(f.outcome == r for f, r in zip(futures, results, strict=True))
            assert producer.metrics().records_acknowledged == 2000
        offsets = {(r.partition, r.offset) for r in results}
        assert len(offsets) == 2000


def test_sends_from_many_threads_all_arrive() -> None:
    with run_in_thread(topics={"t": 2}) as broker:
        producer = Producer(bootstrap=broker.bootstrap)
        futures = []
        lock = threading.Lock()

        def work(n: int) -> None:
            mine = [producer.send("t", b"%d-%d" % (n, i)) for i in range(500)]
            with lock:
                futures.extend(mine)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        producer.close()
        assert len(futures) == 2000
        assert all(isinstance(f.result(timeout=0), Acknowledged) for f in futures)
        with pytest.raises(ProducerClosedError):
            producer.send("t", b"late")


def test_a_send_waiting_for_metadata_does_not_hold_back_another_topic() -> None:
    with run_in_thread(topics={"ready": 1, "creating": 1}) as broker:
        install(broker, pending_topic("creating"))
        with Producer(bootstrap=broker.bootstrap, max_block=60.0, **FAST) as producer:
            waiting = producer.send("creating", b"first")
            healthy = producer.send("ready", b"second")
            # Before the fix this waited for `waiting`'s max_block (60 s) and timed out.
            assert isinstance(healthy.result(timeout=30), Acknowledged)
            assert not waiting.done()
            # Still waiting when closed: it was never appended, so it failed (not ambiguous).
            producer.close(timeout=0)
        assert isinstance(waiting.outcome, Failed)
        assert isinstance(waiting.exception(timeout=0), ProducerClosedError)


def test_records_of_one_topic_keep_their_order_behind_a_metadata_wait() -> None:
    with run_in_thread(topics={"creating": 1}) as broker:
        hook = install(broker, pending_topic("creating"))
        with Producer(bootstrap=broker.bootstrap, max_block=60.0, **FAST) as producer:
            futures = [producer.send("creating", b"%d" % i) for i in range(100)]
            time.sleep(0.2)
            assert not any(f.done() for f in futures)
            broker.call(broker.cluster.remove_hook, hook)
            offsets = [f.result(timeout=30).offset for f in futures]
        assert offsets == list(range(100))


def test_records_queued_behind_a_metadata_wait_fail_with_it_not_one_max_block_each() -> None:
    with run_in_thread(topics={"creating": 1}) as broker:
        install(broker, pending_topic("creating"))
        with Producer(bootstrap=broker.bootstrap, max_block=0.5, **FAST) as producer:
            futures = [producer.send("creating", b"%d" % i) for i in range(200)]
            # Before the fix each record waited its own max_block after the one before
            # it: 200 x 0.5 s.
            assert producer.flush(timeout=30) == 0
        for future in futures:
            assert isinstance(future.outcome, Failed)
            assert "creating" in str(future.outcome.error)


def test_records_of_topics_with_metadata_share_one_lane_and_keep_their_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With a lane task per topic, records round robin over many topics started a task
    # for nearly every record (a lane ends when its queue is empty): at 1,000 topics
    # 6.1 s of CPU for 101,000 records, 3.0 s with the shared lane.
    started: list[str | None] = []
    start_lane = Runner._start_lane

    def spy(self: Runner, producer: Any, key: str | None, lane: Any) -> None:
        started.append(key)
        start_lane(self, producer, key, lane)

    monkeypatch.setattr(Runner, "_start_lane", spy)
    names = [f"topic-{i:03d}" for i in range(100)]
    with run_in_thread(topics={**dict.fromkeys(names, 1), "creating": 1}) as broker:
        with Producer(bootstrap=broker.bootstrap, max_block=60.0, **FAST) as producer:
            for name in names:
                producer.send(name, b"first")
            assert producer.flush(timeout=30) == 0
            assert sorted(k for k in started if k is not None) == names  # a lane each
            started.clear()
            hook = install(broker, pending_topic("creating"))
            waiting = [producer.send("creating", b"%d" % i) for i in range(50)]
            futures = [producer.send(names[i % 100], b"%d" % i) for i in range(5_000)]
            # The known topics' records do not wait behind the topic being created: all
            # acknowledged while it is still held (no time bound: a loaded machine is slow)...
            for future in futures:
                future.result(timeout=60)
            assert not any(w.done() for w in waiting)
            assert producer.flush(timeout=0) == len(waiting)
            broker.call(broker.cluster.remove_hook, hook)
            assert producer.flush(timeout=30) == 0
        # ... which has a lane of its own (its sends keep its records without waiting
        # for the metadata, so the lane may run dry and start again); the others share
        # one, started again only when it has run dry (a few times), not once per record.
        assert 1 <= started.count("creating") <= 10, started
        assert set(started) == {None, "creating"} and len(started) < 100, len(started)
        assert [f.result().offset for f in waiting] == list(range(50))
        for name in names:  # in order per topic: after the first record, 1, 2, ...
            mine = [f.result().offset for i, f in enumerate(futures) if names[i % 100] == name]
            assert mine == list(range(1, 51))


# -- flush ------------------------------------------------------------------------------


def test_flush_returns_how_many_records_are_still_pending() -> None:
    with run_in_thread(topics={"ready": 1, "creating": 1}) as broker:
        install(broker, pending_topic("creating"))
        with Producer(bootstrap=broker.bootstrap, max_block=60.0, **FAST) as producer:
            producer.send("ready", b"a")
            assert producer.flush(timeout=30) == 0
            stuck = [producer.send("creating", b"%d" % i) for i in range(3)]
            delivered = producer.send("ready", b"b")
            # Before the fix: a bare TimeoutError().
            assert producer.flush(timeout=0.5) == 3
            assert isinstance(delivered.outcome, Acknowledged)
            assert not any(f.done() for f in stuck)
            producer.close(timeout=0)
        assert all(isinstance(f.outcome, Failed) for f in stuck)


# -- close ------------------------------------------------------------------------------


def test_close_is_bounded_by_its_timeout_when_the_broker_is_silent() -> None:
    before = producer_threads()
    with silent_port() as bootstrap:
        producer = Producer(bootstrap=bootstrap, max_block=60.0, close_timeout=60.0)
        futures = [producer.send("t", b"x%d" % i) for i in range(10)]
        start = time.monotonic()
        producer.close(timeout=1.0)
        took = time.monotonic() - start
    # Before the fix: close(timeout=1) returned after 6 s with the thread still alive.
    assert producer_threads() == before, "the producer's thread outlived close()"
    # Bounded by close()'s timeout, not by close_timeout (60 s): a wide margin, so a
    # loaded machine cannot fail it.
    assert took < 60.0
    for future in futures:
        assert future.done()
        assert isinstance(future.outcome, Failed)
        assert isinstance(future.exception(timeout=0), ProducerClosedError)
    producer.close()  # idempotent


def test_close_reports_records_in_flight_as_ambiguous() -> None:
    with run_in_thread(topics={"t": 1}) as broker:
        from trio_kafka.broker import BLACKHOLE
        from trio_kafka.protocol.messages.produce import ProduceRequest

        broker.call(lambda: broker.cluster.add_hook(ProduceRequest, lambda call: BLACKHOLE))
        producer = Producer(bootstrap=broker.bootstrap, request_timeout=60.0, linger=0.0)
        in_flight = producer.send("t", b"x")
        assert producer.flush(timeout=0.5) == 1
        producer.close(timeout=0.5)
        assert isinstance(in_flight.outcome, Ambiguous)
        assert isinstance(in_flight.exception(timeout=0), AmbiguousError)


def test_close_racing_sends_from_many_threads_leaves_no_future_pending() -> None:
    with run_in_thread(topics={"a": 2, "b": 1, "creating": 1}) as broker:
        install(broker, pending_topic("creating"))
        producer = Producer(broker.bootstrap, max_block=60.0, **FAST)
        futures: list[DeliveryFuture] = []
        refused: list[BaseException] = []
        lock = threading.Lock()
        started = threading.Barrier(5)
        first_acknowledged = threading.Event()

        def work(n: int) -> None:
            mine: list[DeliveryFuture] = []
            started.wait()
            try:
                mine.append(producer.send("a", b"first"))
                mine[0].add_done_callback(lambda f: first_acknowledged.set())
                for i in range(100_000):
                    mine.append(producer.send(("a", "b", "creating")[i % 3], b"%d-%d" % (n, i)))
            except ProducerClosedError as exc:
                refused.append(exc)
            with lock:
                futures.extend(mine)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        started.wait()
        assert first_acknowledged.wait(30)
        producer.close(timeout=0.5)
        for thread in threads:
            thread.join()
        assert len(refused) == 4, "every sender thread was stopped by the close"
        assert futures and all(f.done() for f in futures)
        outcomes = {type(f.outcome) for f in futures}
        assert outcomes <= {Acknowledged, Failed, Ambiguous}
        assert Acknowledged in outcomes and Failed in outcomes


def test_the_context_manager_closes_and_a_second_close_does_nothing() -> None:
    before = producer_threads()
    with run_in_thread(topics={"t": 1}) as broker:
        with Producer(bootstrap=broker.bootstrap) as producer:
            future = producer.send("t", b"x")
        assert isinstance(future.outcome, Acknowledged)
        producer.close()
        producer.close(timeout=0)
        assert producer.metrics().records_acknowledged == 1  # as it closed
    assert producer_threads() == before
    with pytest.raises(ProducerClosedError, match="closed"):
        producer.send("t", b"y")
    with pytest.raises(ProducerClosedError, match="closed"):
        producer.flush()


def test_the_interpreter_exits_with_an_unclosed_producer() -> None:
    with run_in_thread(topics={"t": 1}) as broker:
        script = textwrap.dedent(
            f"""
            from trio_kafka.sync import Producer
            p = Producer(bootstrap={broker.bootstrap!r}, close_timeout=2.0)
            f = p.send("t", b"x")
            print(f.result(timeout=10).offset)
            p.send("t", b"never flushed")
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "0"
        assert broker.call(lambda: broker.cluster.state.partition("t", 0).log.log_end_offset) == 2  # type: ignore[union-attr]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_is_told_to_make_its_own_producer_and_the_parent_goes_on() -> None:
    """gunicorn's preload, multiprocessing's fork: the producer's thread stays in the
    parent. The child's calls are refused at once, naming the fork (they used to be
    queued for a thread that is not there: futures never settled, close() hung), and
    its exit does not hang; the parent's producer is unaffected."""
    with run_in_thread(topics={"t": 1}) as broker:
        script = textwrap.dedent(
            f"""
            import os, sys, time
            from trio_kafka.errors import ProducerClosedError
            from trio_kafka.sync import Producer
            p = Producer(bootstrap={broker.bootstrap!r})
            print("parent", p.send("t", b"before").result(timeout=10).offset, flush=True)
            pid = os.fork()
            if pid == 0:
                started = time.monotonic()
                for name, call in [
                    ("send", lambda: p.send("t", b"child")),
                    ("flush", lambda: p.flush(5)),
                    ("metrics", lambda: p.metrics()),
                ]:
                    try:
                        call()
                        print("child", name, "was not refused", flush=True)
                    except ProducerClosedError as exc:
                        assert f"created in process {{os.getppid()}}" in str(exc), exc
                        assert "Create a new Producer in the child" in str(exc), exc
                        print("child", name, "refused", flush=True)
                p.close(5)
                print("child closed", round(time.monotonic() - started), flush=True)
                sys.exit(0)  # a normal exit: the atexit hook must not wait for anything
            _, status = os.waitpid(pid, 0)
            print("child exit", os.waitstatus_to_exitcode(status), flush=True)
            print("parent", p.send("t", b"after").result(timeout=10).offset, flush=True)
            p.close()
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split("\n")[:-1] == [
            "parent 0",
            "child send refused",
            "child flush refused",
            "child metrics refused",
            "child closed 0",
            "child exit 0",
            "parent 1",
        ], (done.stdout, done.stderr)
        assert broker.call(lambda: broker.cluster.state.partition("t", 0).log.log_end_offset) == 2  # type: ignore[union-attr]


# -- the per-record future --------------------------------------------------------------


def test_the_future_runs_callbacks_and_waits_with_a_timeout() -> None:
    with run_in_thread(topics={"t": 1, "creating": 1}) as broker:
        install(broker, pending_topic("creating"))
        with Producer(bootstrap=broker.bootstrap, **FAST) as producer:
            called: list[DeliveryFuture] = []
            settled = threading.Event()
            future = producer.send("t", b"x")

            def on_done(f: DeliveryFuture) -> None:
                called.append(f)
                settled.set()

            future.add_done_callback(on_done)
            assert settled.wait(30)
            assert called == [future] and future.done()
            waiting = producer.send("creating", b"y")
            assert waiting.outcome is None
            with pytest.raises(TimeoutError):
                waiting.result(timeout=0.05)
            producer.close(timeout=0)


# -- wrong input ------------------------------------------------------------------------


def test_wrong_input_is_refused_at_send_naming_it_and_hurts_no_other_record() -> None:
    with run_in_thread(topics={"t": 1}) as broker:
        with Producer(bootstrap=broker.bootstrap) as producer:
            with pytest.raises(TypeError, match=r"topic.*int"):
                producer.send(42, b"x")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"value.*str.*bytes"):
                producer.send("t", "text")
            with pytest.raises(TypeError, match=r"key.*int"):
                producer.send("t", b"x", key=7)
            with pytest.raises(TypeError, match=r"partition.*str"):
                producer.send("t", b"x", partition="0")  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"value.*str"):
                producer.send(ProducerRecord("t", "text"))  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="either a ProducerRecord"):
                producer.send(ProducerRecord("t", b"x"), b"y")
            with pytest.raises(ValueError, match=r"timeout.*-1"):
                producer.flush(timeout=-1)
            good = producer.send("t", b"ok")
            assert producer.flush(timeout=30) == 0
            assert isinstance(good.outcome, Acknowledged)
        with pytest.raises(ValueError, match=r"timeout.*-2"):
            Producer(bootstrap=broker.bootstrap).close(timeout=-2)


def test_a_typo_in_an_option_fails_in_the_constructor() -> None:
    with pytest.raises(ConfigError, match=r"lingr.*linger"):
        Producer(bootstrap="127.0.0.1:1", lingr=0.01)


def test_security_options_are_taken_and_a_wrong_one_fails_in_the_constructor() -> None:
    with pytest.raises(ConfigError, match=r"security_protocol='SASL_TLS' is not allowed"):
        Producer("127.0.0.1:1", security_protocol="SASL_TLS")
    with pytest.raises(ConfigError, match=r"tls=False contradicts security_protocol='SSL'"):
        Producer("127.0.0.1:1", security_protocol="SSL", tls=False)
    with pytest.raises(ConfigError, match=r"tls='yes' is not allowed"):
        Producer("127.0.0.1:1", tls="yes")


def test_a_missing_bootstrap_fails_in_the_constructor() -> None:
    with pytest.raises(ConfigError, match="bootstrap"):
        Producer()
    with pytest.raises(ConfigError, match="selector"):
        Producer("127.0.0.1:1", selector=object())


def test_a_callback_may_send_but_not_wait_for_the_producer() -> None:
    with run_in_thread(topics={"t": 1}) as broker, Producer(broker.bootstrap) as producer:
        seen: list[Any] = []
        chained = threading.Event()

        def on_done(future: DeliveryFuture) -> None:
            with pytest.raises(RuntimeError, match="own thread"):
                producer.flush()
            with pytest.raises(RuntimeError, match="own thread"):
                producer.close()
            follow_up = producer.send("t", b"follow-up")
            follow_up.add_done_callback(lambda f: (seen.append(f.outcome), chained.set()))

        producer.send("t", b"first").add_done_callback(on_done)
        assert chained.wait(30)
        assert isinstance(seen[0], Acknowledged) and seen[0].offset == 1


# -- transactions -----------------------------------------------------------------------


def test_committed_and_aborted_transactions_as_confluent_reads_them() -> None:
    with run_in_thread(topics={"t": 2}) as broker:
        with Producer(bootstrap=broker.bootstrap, transactional_id="sync-tx", **FAST) as p:
            p.init_transactions(timeout=30)
            with p.transaction():
                for i in range(100):
                    p.send("t", b"committed-%d" % i, partition=i % 2)
            p.begin_transaction()
            aborted = [p.send("t", b"aborted-%d" % i, partition=i % 2) for i in range(100)]
            assert p.flush(timeout=30) == 0  # written, so read_uncommitted sees them
            p.abort_transaction()
            assert all(isinstance(f.outcome, Acknowledged) for f in aborted)
            with pytest.raises(RuntimeError, match="boom"), p.transaction():
                p.send("t", b"rolled-back", partition=0)
                raise RuntimeError("boom")
            p.begin_transaction()
            p.send("t", b"committed-last", partition=1)
            p.commit_transaction()
        committed = {b"committed-%d" % i for i in range(100)} | {b"committed-last"}
        seen = consume_all(broker.bootstrap, "t", 2, "read_committed")
        assert sorted(seen) == sorted(committed)
        everything = consume_all(broker.bootstrap, "t", 2, "read_uncommitted")
        assert set(everything) >= committed | {b"aborted-%d" % i for i in range(100)}


def test_offsets_commit_with_the_transaction() -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with run_in_thread(topics={"in": 1, "out": 1}) as broker:
        with Producer(bootstrap=broker.bootstrap, transactional_id="sync-eos", **FAST) as p:
            p.init_transactions()
            with p.transaction():
                p.send("out", b"derived")
                p.send_offsets_to_transaction({("in", 0): 42}, "group-a")
        consumer = confluent_kafka.Consumer(
            {"bootstrap.servers": broker.bootstrap, "group.id": "group-a", "log_level": 0}
        )
        try:
            (tp,) = consumer.committed([confluent_kafka.TopicPartition("in", 0)], 10)
        finally:
            consumer.close()
        assert tp.offset == 42


def test_close_bounds_a_commit_that_waits_for_a_record_of_a_topic_being_created() -> None:
    with run_in_thread(topics={"t": 1, "creating": 1}) as broker:
        install(broker, pending_topic("creating"))
        producer = Producer(
            bootstrap=broker.bootstrap, transactional_id="sync-stuck", max_block=60.0, **FAST
        )
        producer.init_transactions()
        producer.begin_transaction()
        waiting = producer.send("creating", b"x")
        committing = concurrent.futures.ThreadPoolExecutor(1)
        commit = committing.submit(producer.commit_transaction)
        with pytest.raises(TimeoutError):
            commit.result(timeout=0.2)  # the commit waits for `waiting` to be appended
        producer.close(timeout=0.5)
        committing.shutdown()
        assert isinstance(commit.exception(timeout=0), ProducerClosedError)
        assert isinstance(waiting.outcome, Failed)


def test_transactions_need_a_transactional_id_and_say_so() -> None:
    with run_in_thread(topics={"t": 1}) as broker, Producer(bootstrap=broker.bootstrap) as producer:
        with pytest.raises(ConfigError, match=r"Producer\(.*transactional_id="):
            producer.begin_transaction()
        with pytest.raises(ConfigError, match="transactional_id"), producer.transaction():
            pass
        assert isinstance(producer.send("t", b"x").result(timeout=30), Acknowledged)


def test_sends_and_a_transaction_against_a_real_broker(real_broker: RealBroker) -> None:
    topic = f"sync-{uuid.uuid4().hex[:8]}"
    trio.run(create_topic, real_broker.bootstrap, topic, 3)
    with Producer(real_broker.bootstrap, transactional_id=f"tx-{topic}", retry_backoff=0.02) as p:
        p.init_transactions(timeout=30)
        with p.transaction():
            futures = [p.send(topic, b"%d" % i, partition=i % 3) for i in range(1000)]
        assert all(isinstance(f.outcome, Acknowledged) for f in futures)
        p.begin_transaction()
        aborted = p.send(topic, b"aborted", partition=0)
        assert p.flush(timeout=30) == 0
        p.abort_transaction()
        assert isinstance(aborted.outcome, Acknowledged)
    values = consume_all(real_broker.bootstrap, topic, 3, "read_uncommitted", require_end=False)
    assert set(values) >= {b"%d" % i for i in range(1000)}
    committed = consume_all(real_broker.bootstrap, topic, 3, "read_committed", require_end=False)
    if real_broker.is_kafka:  # Tansu shows the aborted record to read_committed too
        assert sorted(committed) == sorted(b"%d" % i for i in range(1000))


# -- from asyncio -----------------------------------------------------------------------


def test_the_blocking_producer_from_asyncio() -> None:
    with run_in_thread(topics={"t": 1}) as broker:

        async def main() -> list[int]:
            loop = asyncio.get_running_loop()
            with Producer(bootstrap=broker.bootstrap) as producer:
                futures = [producer.send("t", b"%d" % i) for i in range(10)]
                acks = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
                assert await loop.run_in_executor(None, producer.flush, 10.0) == 0
                await asyncio.to_thread(producer.close, 10.0)
            return [a.offset for a in acks]

        assert asyncio.run(main()) == list(range(10))


# -- docs/sync.md -----------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[2] / "docs" / "sync.md"
DOC_BLOCKS = python_blocks(DOC)


def test_the_page_has_its_examples() -> None:
    assert len(DOC_BLOCKS) >= 4


@pytest.mark.parametrize("index", range(len(DOC_BLOCKS)))
def test_an_example_of_the_page_runs(index: int) -> None:
    code = compile(DOC_BLOCKS[index], f"docs/sync.md, python block {index + 1}", "exec")
    exec(code, {"__name__": "__main__"})
