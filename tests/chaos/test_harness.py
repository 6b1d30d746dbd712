"""The chaos harness's own checks, each with a positive and a negative control, and its
raw log reader against the mock broker's ground truth."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

from tests.chaos._harness import (
    fenced_without_transactions,
    fetch_snapshot,
    offsets_known,
    replay_command,
)
from trio_kafka.broker import open_cluster
from trio_kafka.client import open_producer
from trio_kafka.sim.checker import snapshot_cluster
from trio_kafka.sim.history import Fail, History, Ok, Produce, TxnBegin


def _history(*outcomes: tuple[str, object]) -> History:
    history = History()
    for n, (writer, outcome) in enumerate(outcomes):
        op = history.invoke(Produce(writer, "t", 0, f"{writer}-{n}".encode()))
        history.complete(op, outcome)  # type: ignore[arg-type]
    return history


def test_an_idempotent_producer_dying_fenced_is_reported() -> None:
    history = _history(("w0", Ok(0, 0)), ("w0", Fail("ProducerFencedError")))
    (violation,) = fenced_without_transactions(history)
    assert "died fenced" in violation.render() and "w0" in violation.render()


def test_a_fenced_transactional_writer_is_not_reported() -> None:
    history = _history(("w0", Fail("ProducerFencedError")))
    history.complete(history.invoke(TxnBegin("w0", "w0-t0")), Ok())
    assert fenced_without_transactions(history) == ()
    assert fenced_without_transactions(_history(("w0", Fail("DeliveryTimeoutError")))) == ()


def test_an_acknowledgement_without_offset_is_reported() -> None:
    assert offsets_known(_history(("w0", Ok(0, 3)))) == ()
    (violation,) = offsets_known(_history(("w0", Ok(0, None))))
    assert "without an offset" in violation.render()


async def test_the_raw_log_reader_agrees_with_the_mock_brokers_ground_truth() -> None:
    async with open_cluster(1, topics={"t": 3}) as cluster:
        async with open_producer(cluster.bootstrap, transactional_id="x") as producer:
            await producer.init_transactions()
            for commit in (True, False):
                producer.begin_transaction()
                for n in range(30):
                    await producer.send("t", b"%d-%d" % (commit, n), partition=n % 3)
                await producer.flush()
                await (producer.commit_transaction() if commit else producer.abort_transaction())
        fetched = await fetch_snapshot(cluster.bootstrap, {"t": 3})
        truth = snapshot_cluster(cluster, topics=["t"])
        # The same batches (headers, records, markers) and ends; a Fetch cannot tell the
        # last stable offset of a finished run, so the reader leaves it unknown.
        assert [(p.batches, p.log_end_offset) for p in fetched.partitions] == [
            (p.batches, p.log_end_offset) for p in truth.partitions
        ]
        assert sum(b.is_control for p in fetched.partitions for b in p.batches) == 6


@pytest.mark.parametrize("broker", ["mock"])
def test_a_runs_replay_command_selects_exactly_the_test_that_ran(broker: str) -> None:
    """A chaos run's report ends with the command that runs it again: this test's node
    id (a `-k` on the workload's name selected nothing for "cas-txn" and
    "idempotent-restart", and a long run's seed in the quick test)."""
    command = replay_command("cas-txn", broker, 104)
    assert command.endswith(" --chaos-seed 104") and "--chaos-long" not in command
    args = shlex.split(command)[1:]
    assert args[0].endswith(
        "test_harness.py::test_a_runs_replay_command_selects_exactly_the_test_that_ran[mock]"
    )
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert listed.stdout.split() == ["tests/chaos/test_harness.py:", "1"], listed.stdout


def test_outside_pytest_the_replay_selects_by_the_workloads_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    assert replay_command("cas-txn", "tansu", 7) == (
        "pytest tests/chaos -k 'cas and txn and tansu' --chaos-seed 7"
    )
