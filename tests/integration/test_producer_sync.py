"""The blocking facade `trio_kafka.sync.Producer` against the mock broker in a thread."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from trio_kafka.broker import run_in_thread
from trio_kafka.client import Acknowledged
from trio_kafka.errors import ConfigError, ProducerClosedError
from trio_kafka.sync import Producer


def test_send_flush_and_results_from_a_plain_thread() -> None:
    with run_in_thread(topics={"t": 3}) as broker:
        with Producer(bootstrap=broker.bootstrap, linger=0.001) as producer:
            futures = [producer.send("t", b"v%d" % i, key=b"k%d" % (i % 7)) for i in range(2000)]
            producer.flush(timeout=10)
            assert all(f.done() for f in futures)
            results = [f.result(timeout=0) for f in futures]
            assert all(isinstance(r, Acknowledged) for r in results)
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


def test_a_typo_in_an_option_fails_in_the_constructor() -> None:
    with pytest.raises(ConfigError, match=r"lingr.*linger"):
        Producer(bootstrap="127.0.0.1:1", lingr=0.01)


def test_close_is_bounded_when_the_broker_is_gone() -> None:
    with run_in_thread(topics={"t": 1}) as broker:
        bootstrap = broker.bootstrap
    producer = Producer(bootstrap=bootstrap, max_block=0.2, close_timeout=0.2)
    future = producer.send("t", b"x")
    start = time.monotonic()
    producer.close()
    assert time.monotonic() - start < 3.0
    assert future.done() and future.exception() is not None


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
