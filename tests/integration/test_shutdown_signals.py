"""SIGTERM mid-stream loses nothing without a word.

A child process sends records with the blocking producer to the mock broker (a process
of its own, `mock_broker_process()`), writing a ledger line for each record handed
over (`sent i`) and for each outcome its delivery callback sees (`ack i partition
offset` or `fail i Error`). The test sends SIGTERM once a few thousand records are
acknowledged, while the stream goes on, and checks the ledger and the log: every record
handed over has an outcome, every acknowledged one is in the log at its offset, and the
log holds nothing twice. Without the handler (the control) the same signal ends the
process at once and records handed over are never settled: what the trial saw.

Real processes in real time: in SERIAL_PATHS (tests/conftest.py, "_signals.py").
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import trio

from trio_kafka.client import PartitionReader
from trio_kafka.net import open_selector
from trio_kafka.testing import mock_broker_process

CHILD = r"""
import sys, threading, time
from trio_kafka.errors import ProducerClosedError
from trio_kafka.sync import Producer

bootstrap, topic, ledger, mode = sys.argv[1:5]
out = open(ledger, "w", buffering=1)
lock = threading.Lock()

def write(line):
    with lock:
        out.write(line + "\n")
        out.flush()

def outcome(i):
    def settled(future):
        error = future.exception()
        if error is None:
            write(f"ack {i} {future.outcome.partition} {future.outcome.offset}")
        else:
            write(f"fail {i} {type(error).__name__}")
    return settled

producer = Producer(bootstrap, close_on_sigterm=mode == "handler", linger=0.005)
i = 0
try:
    while i < 2_000_000:
        future = producer.send(topic, b"%d" % i)
        write(f"sent {i}")
        future.add_done_callback(outcome(i))
        i += 1
except ProducerClosedError as exc:
    write(f"refused {i} {exc}")
time.sleep(120)  # the handler's close ends the process with the signal
"""

#: Acknowledged records before the signal (the stream is well under way).
ACKED_BEFORE_SIGNAL = 3000


def _ledger(path: Path) -> tuple[set[int], dict[int, tuple[int, int]], dict[int, str], list[str]]:
    sent: set[int] = set()
    acked: dict[int, tuple[int, int]] = {}
    failed: dict[int, str] = {}
    other: list[str] = []
    for line in path.read_text().splitlines():
        match line.split():
            case ["sent", i]:
                sent.add(int(i))
            case ["ack", i, partition, offset]:
                acked[int(i)] = (int(partition), int(offset))
            case ["fail", i, error]:
                failed[int(i)] = error
            case _:
                other.append(line)
    return sent, acked, failed, other


def _run_child(bootstrap: str, topic: str, ledger: Path, mode: str) -> int:
    """Start the child, SIGTERM it once ACKED_BEFORE_SIGNAL records are acknowledged;
    its exit status."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, bootstrap, topic, str(ledger), mode])
    try:
        deadline = time.monotonic() + 60
        while True:
            text = ledger.read_text() if ledger.exists() else ""
            if text.count("\nack ") >= ACKED_BEFORE_SIGNAL:
                break
            assert child.poll() is None, f"the child exited early: {child.returncode}"
            assert time.monotonic() < deadline, "the child acknowledged too little in 60 s"
            time.sleep(0.05)
        child.send_signal(signal.SIGTERM)
        return child.wait(60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


async def _log(bootstrap: str, topic: str) -> dict[int, bytes | None]:
    async with open_selector(bootstrap) as selector:
        reader = PartitionReader(selector)
        end = await reader.log_end_offset(topic, 0)
        return {r.offset: r.value async for r in reader.read(topic, 0, start=0, end=end)}


def test_sigterm_mid_stream_settles_every_record_handed_over(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    topic = f"sigterm-{uuid.uuid4().hex[:6]}"
    with mock_broker_process() as bootstrap:
        status = _run_child(bootstrap, topic, ledger, "handler")
        log = trio.run(_log, bootstrap, topic)
    sent, acked, failed, other = _ledger(ledger)
    print(
        f"handed over {len(sent)}, acknowledged {len(acked)}, failed {len(failed)}, "
        f"in the log {len(log)}; {other}"
    )
    # The signal took its course once the producer was closed (killed by SIGTERM).
    assert status == -signal.SIGTERM
    assert any(line.startswith("refused ") and "SIGTERM" in line for line in other), other
    unsettled = sent - acked.keys() - failed.keys()
    assert not unsettled, f"{len(unsettled)} records handed over and never settled"
    assert not acked.keys() & failed.keys()
    for i, (partition, offset) in acked.items():
        assert partition == 0
        assert log.get(offset) == b"%d" % i, f"record {i} acknowledged at {offset}, not there"
    values = list(log.values())
    assert len(values) == len(set(values)), "a record is in the log twice"


def test_without_the_handler_sigterm_loses_records_without_a_word(tmp_path: Path) -> None:
    """The control: the default SIGTERM ends the process with records unsettled."""
    ledger = tmp_path / "ledger"
    topic = f"sigterm-{uuid.uuid4().hex[:6]}"
    with mock_broker_process() as bootstrap:
        status = _run_child(bootstrap, topic, ledger, "default")
    sent, acked, failed, _ = _ledger(ledger)
    print(f"handed over {len(sent)}, acknowledged {len(acked)}, failed {len(failed)}")
    assert status == -signal.SIGTERM
    assert sent - acked.keys() - failed.keys()


def test_close_on_sigterm_outside_the_main_thread_is_refused() -> None:
    import threading

    from trio_kafka.errors import ConfigError
    from trio_kafka.sync import Producer

    errors: list[BaseException] = []

    def make() -> None:
        try:
            Producer("127.0.0.1:1", close_on_sigterm=True)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=make)
    thread.start()
    thread.join(30)
    assert len(errors) == 1 and isinstance(errors[0], ConfigError)
    assert "main thread" in str(errors[0])


async def _load_until(
    command: list[str], signal_at: int, *, twice: bool = False
) -> tuple[int, int, str]:
    """Run `trio-kafka load`; SIGTERM it once it reports `signal_at` records loaded
    (`twice`: and again as soon as it says it received the first). Returns (its exit
    status, records it last reported, its stderr)."""
    reported = 0
    output: list[str] = []
    async with trio.open_nursery() as nursery:
        process = await nursery.start(
            lambda task_status: trio.run_process(  # type: ignore[misc]
                command, stderr=subprocess.PIPE, check=False, task_status=task_status
            )
        )
        buffer = b""
        signalled = False
        assert process.stderr is not None
        async for chunk in process.stderr:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                text = line.decode()
                output.append(text)
                if twice and text.startswith("received SIGTERM: no new rows"):
                    process.send_signal(signal.SIGTERM)
                if text.startswith("progress: loaded "):
                    reported = int(text.split()[2])
                    if reported >= signal_at and not signalled:
                        process.send_signal(signal.SIGTERM)
                        signalled = True
        await process.wait()
    return process.returncode, reported, "\n".join(output)


@pytest.mark.parametrize("cas", [True, False], ids=["cas", "transactional"])
async def test_load_sigtermed_midway_exits_143_and_a_rerun_completes_it(
    tmp_path: Path, cas: bool
) -> None:
    from tests.integration.test_cas_sigkill import load_command, write_rows
    from trio_kafka.broker import open_cluster
    from trio_kafka.testing import log_values

    rows = 200_000
    data, expected = write_rows(tmp_path, rows)
    async with open_cluster() as cluster:
        topic = "loaded"
        cluster.create_topic(topic, 1, {"expected.offset.check.enable": "true"} if cas else {})
        command = load_command(data, topic, cluster.bootstrap)
        status, reported, log = await _load_until(command, rows // 4)
        print(log.replace("\n", " | ")[-600:])
        assert status == 143, log
        assert "received SIGTERM" in log and "run the same command again" in log
        stopped = log_values(cluster, topic, 0)
        assert 0 < reported < rows, "the load finished before the signal"
        # Stopped cleanly: what it reported is what the log holds, a prefix of the input
        # (with transactions every chunk committed: no open transaction left).
        assert stopped == expected[: len(stopped)]
        assert len(stopped) == reported
        status, _, log = await _load_until(command, rows + 1)
        assert status == 0, log
        assert f"{rows - reported} records loaded, {reported} already there" in log
        assert log_values(cluster, topic, 0) == expected


@pytest.mark.parametrize("cas", [True, False], ids=["cas", "transactional"])
async def test_load_sigtermed_twice_stops_at_once_and_a_rerun_completes_it(
    tmp_path: Path, cas: bool
) -> None:
    """The second signal abandons the batches in flight, as a crash would: the log may
    hold more than was reported (CAS batches that landed) or an aborted chunk, and the
    rerun still ends with exactly the input."""
    from tests.integration._helpers import consume_all
    from tests.integration.test_cas_sigkill import load_command, write_rows
    from trio_kafka.broker import open_cluster
    from trio_kafka.testing import log_values

    rows = 200_000
    data, expected = write_rows(tmp_path, rows)
    async with open_cluster() as cluster:
        topic = "loaded"
        cluster.create_topic(topic, 1, {"expected.offset.check.enable": "true"} if cas else {})
        command = load_command(data, topic, cluster.bootstrap)
        status, _, log = await _load_until(command, rows // 4, twice=True)
        print(log.replace("\n", " | ")[-600:])
        assert status == 143, log
        assert "received SIGTERM again: stopping now" in log
        assert "stopped at once" in log
        status, _, log = await _load_until(command, rows + 1)
        assert status == 0, log
        if cas:
            assert log_values(cluster, topic, 0) == expected
        else:
            final = await trio.to_thread.run_sync(
                consume_all, cluster.bootstrap, topic, 1, "read_committed"
            )
            assert final == expected


def test_after_the_close_the_signal_goes_to_the_handler_installed_before() -> None:
    """In this process: a handler of the program's own, then ours. On SIGTERM the
    producer is closed with every future settled, then the program's handler runs
    (instead of the default death) and is the handler again."""
    import os

    from trio_kafka.broker import run_in_thread
    from trio_kafka.errors import ProducerClosedError
    from trio_kafka.sync import Producer, install_sigterm_handler

    received: list[int] = []

    def programs_own(signum: int, frame: object) -> None:
        received.append(signum)

    before = signal.signal(signal.SIGTERM, programs_own)
    try:
        with run_in_thread(1) as broker:
            producer = Producer(broker.bootstrap, close_timeout=20)
            futures = [producer.send("t", b"%d" % i) for i in range(2000)]
            install_sigterm_handler(producer)
            os.kill(os.getpid(), signal.SIGTERM)
            deadline = time.monotonic() + 30
            while not received:
                assert time.monotonic() < deadline, "the signal never reached the handler"
                time.sleep(0.01)
            assert received == [signal.SIGTERM]
            assert signal.getsignal(signal.SIGTERM) is programs_own
            assert all(f.done() and f.exception() is None for f in futures)
            with pytest.raises(ProducerClosedError, match="on SIGTERM"):
                producer.send("t", b"late")
    finally:
        signal.signal(signal.SIGTERM, before)
