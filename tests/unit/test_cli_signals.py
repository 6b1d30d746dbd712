"""`stop_on_signals`, the signal handling of every trio-kafka command: the first signal
asks the command to stop, a second one or the grace period cancels its block, and the
block's own errors come out as raised. The signals are sent to this process itself."""

from __future__ import annotations

import os
import signal

import pytest
import trio

from trio_kafka._cli._signals import stop_on_signals
from trio_kafka.errors import KafkaError


async def test_the_first_signal_asks_the_block_to_stop_and_lets_it_finish() -> None:
    finished = False
    async with stop_on_signals(30.0, doing="finishing") as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        with trio.fail_after(5):
            await stop.requested.wait()
        await trio.sleep(0.05)  # the work in flight goes on
        finished = True
    assert finished and not stop.forced
    assert (stop.name, stop.exit_code) == ("SIGTERM", 143)


async def test_a_second_signal_cancels_the_block() -> None:
    with trio.fail_after(5):
        async with stop_on_signals(30.0) as stop:
            os.kill(os.getpid(), signal.SIGINT)
            await stop.requested.wait()
            os.kill(os.getpid(), signal.SIGINT)
            await trio.sleep_forever()
    assert stop.forced
    assert stop.exit_code == 130


async def test_the_grace_period_cancels_the_block() -> None:
    with trio.fail_after(5):
        async with stop_on_signals(0.1) as stop:
            os.kill(os.getpid(), signal.SIGTERM)
            await trio.sleep_forever()
    assert stop.forced


async def test_without_a_signal_nothing_is_asked() -> None:
    async with stop_on_signals(0.1) as stop:
        await trio.sleep(0.2)
    assert stop.signum is None and not stop.forced and stop.exit_code == 0


async def test_the_blocks_error_comes_out_as_raised() -> None:
    with pytest.raises(KafkaError, match="broken"):
        async with stop_on_signals():
            raise KafkaError("broken")
