"""How every `trio-kafka` command ends on SIGINT and SIGTERM (docs/shutdown.md).

The first signal asks the command to stop taking new work and finish what is in flight
(`Stop.requested`); the command says what it is doing. A second signal, or `grace`
seconds without finishing, cancels the block at once (`Stop.forced`): what was in flight
then ends as a crash would leave it (a load stays resumable: its checkpoints are in the
log with its rows). The exit status is the shell's convention for a death by that
signal, 128 + its number (130 for SIGINT, 143 for SIGTERM), for a command whose job the
signal cut short; a command that only ever ends by a signal (broker, proxy) exits 0
when it stopped cleanly.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
from collections.abc import AsyncIterator

import anyio
import attrs
import click

from trio_kafka.net import only_error

SIGNALS = (signal.SIGINT, signal.SIGTERM)
# (anyio's receiver is trio's under trio, and works under asyncio too: `demo --backend`.)


@attrs.define(eq=False)
class Stop:
    """What the signals asked for (set by `stop_on_signals`' watcher, read by the command)."""

    # The first signal received (None: none yet).
    signum: int | None = None
    # True once the second signal or the grace period cancelled the block.
    forced: bool = False
    # Set with the first signal.
    requested: anyio.Event = attrs.field(factory=anyio.Event)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "no signal"

    @property
    def exit_code(self) -> int:
        """128 + the signal's number (130 SIGINT, 143 SIGTERM); 0 without a signal."""
        return 128 + self.signum if self.signum is not None else 0


@contextlib.asynccontextmanager
async def stop_on_signals(grace: float = math.inf, *, doing: str = "") -> AsyncIterator[Stop]:
    """Receive SIGINT and SIGTERM for the block (instead of KeyboardInterrupt and death).
    The first sets `Stop.requested` and prints `doing` (what the command does now);
    a second one, or `grace` seconds later, cancels the block."""
    stop = Stop()
    if threading.current_thread() is not threading.main_thread():
        # Signals reach only the main thread (a command invoked from another thread,
        # as a library call): nothing to receive, the process's own handlers stay.
        yield stop
        return
    # The body's own exception comes out as raised, not in the watcher's nursery's group
    # (the commands' `except KafkaError`, click's ClickException).
    body_error: BaseException | None = None
    with anyio.open_signal_receiver(*SIGNALS) as signals, anyio.CancelScope() as block:
        try:
            async with anyio.create_task_group() as nursery:
                nursery.start_soon(_watch, signals, stop, block, grace, doing)
                try:
                    yield stop
                except BaseException as exc:
                    body_error = exc
                    raise
                finally:
                    nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            if body_error is not None and only_error(group, body_error):
                raise body_error from None
            raise


async def _watch(
    signals: AsyncIterator[int], stop: Stop, block: anyio.CancelScope, grace: float, doing: str
) -> None:
    async for signum in signals:
        stop.signum = signum
        stop.requested.set()
        break
    else:  # pragma: no cover - the receiver never ends by itself
        return
    if grace <= 0:
        click.echo(f"received {stop.name}: {doing or 'stopping'}", err=True)
    else:
        bound = "" if math.isinf(grace) else f" (at most {grace:g} s)"
        click.echo(
            f"received {stop.name}: {doing or 'stopping'}{bound}; send it again to stop at once",
            err=True,
        )
    with anyio.move_on_after(grace) as waited:
        async for signum in signals:
            click.echo(f"received {signal.Signals(signum).name} again: stopping now", err=True)
            break
    if waited.cancelled_caught and grace > 0:
        click.echo(f"not finished within {grace:g} s: stopping now", err=True)
    stop.forced = True
    block.cancel()


__all__ = ["SIGNALS", "Stop", "stop_on_signals"]
