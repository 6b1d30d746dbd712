"""`trio-kafka proxy`: a fault-injecting TCP proxy in front of a broker (see
trio_kafka.testing.FaultProxy and docs/fault-proxy.md)."""

from __future__ import annotations

import click


def host_port(value: str, hint: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        # port 0 is allowed where it means "a free one" (--listen); HOST:PORT otherwise
        raise click.BadParameter(f"expected HOST:PORT, got {value!r}", param_hint=hint)
    return host, int(port)


def _span(value: str, hint: str) -> tuple[float, float]:
    low, sep, high = value.partition(":")
    try:
        span = (float(low), float(high if sep else low))
    except ValueError:
        raise click.BadParameter(
            f"expected LOW:HIGH seconds, got {value!r}", param_hint=hint
        ) from None
    if not 0 <= span[0] <= span[1]:
        raise click.BadParameter(f"expected 0 <= LOW <= HIGH, got {value!r}", param_hint=hint)
    return span


@click.command()
@click.option("--upstream", required=True, metavar="HOST:PORT", help="The broker to forward to.")
@click.option(
    "--listen",
    default="127.0.0.1:0",
    show_default=True,
    metavar="HOST:PORT",
    help="Where clients connect (port 0: a free one, printed).",
)
@click.option("--seed", default=0, show_default=True, help="Seed of jitter, fragments, schedule.")
@click.option(
    "--faults",
    default="",
    metavar="KINDS",
    help="Run a random schedule of these kinds (comma-separated, or 'all'): "
    "cut-fin, cut-rst, cut-mid-frame, blackhole, delay, late-delivery, fragment, partition.",
)
@click.option(
    "--quiet",
    "quiet_span",
    default="0.3:1.5",
    show_default=True,
    metavar="LOW:HIGH",
    help="Quiet seconds before each scheduled fault.",
)
@click.option(
    "--fault-time",
    default="0.2:2.0",
    show_default=True,
    metavar="LOW:HIGH",
    help="Seconds each scheduled fault lasts before the heal.",
)
@click.option(
    "--duration",
    type=float,
    default=None,
    help="Stop the schedule (healed) after this many seconds; default: never.",
)
@click.option(
    "--delay",
    type=float,
    default=0.0,
    show_default=True,
    help="A fixed delay (seconds) on every chunk, both ways.",
)
@click.option(
    "--jitter",
    type=float,
    default=0.0,
    show_default=True,
    help="Uniform extra delay up to this (seconds).",
)
@click.option("--fragment", type=int, default=None, help="Write chunks in pieces of 1..N bytes.")
def proxy(
    upstream: str,
    listen: str,
    seed: int,
    faults: str,
    quiet_span: str,
    fault_time: str,
    duration: float | None,
    delay: float,
    jitter: float,
    fragment: int | None,
) -> None:
    """Forward TCP connections to a broker, injecting network faults.

    The broker must advertise the proxy's address (Tansu: --advertised-listener-url;
    `trio-kafka broker --advertised-listener`). Every fault is printed as it fires.
    """
    import math
    import signal

    import trio

    from trio_kafka.testing import FaultProxy, ScheduleConfig, parse_kinds, run_schedule

    up = host_port(upstream, "--upstream")
    host, port = host_port(listen, "--listen")
    kinds = None
    if faults:
        try:
            kinds = parse_kinds(faults)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--faults") from None
    if delay < 0 or jitter < 0 or not math.isfinite(delay + jitter):
        raise click.BadParameter("--delay and --jitter must be >= 0", param_hint="--delay")
    if fragment is not None and fragment < 1:
        raise click.BadParameter(f"expected N >= 1, got {fragment}", param_hint="--fragment")
    if duration is not None and duration <= 0:
        raise click.BadParameter(f"expected > 0, got {duration}", param_hint="--duration")
    config = ScheduleConfig(
        kinds=kinds or (),
        quiet=_span(quiet_span, "--quiet"),
        fault=_span(fault_time, "--fault-time"),
    )

    async def static_faults(p: FaultProxy) -> None:
        if delay or jitter:
            p.delay(delay, jitter=jitter)
        if fragment is not None:
            p.fragment(fragment)

    async def echo_events(p: FaultProxy) -> None:
        shown, start = 0, trio.current_time()
        while True:
            for event in p.events[shown:]:
                # Seconds since the proxy started (trio's clock has an arbitrary origin).
                click.echo(f"{event.time - start:8.3f} {event.kind} {event.detail}".rstrip())
            shown = len(p.events)
            await trio.sleep(0.1)

    async def run() -> None:
        p = FaultProxy(up, host=host, listen_port=port, seed=seed)
        async with trio.open_nursery() as nursery:
            await nursery.start(p.serve)
            click.echo(f"trio-kafka proxy: {p.address} -> {up[0]}:{up[1]} (seed {seed})", err=True)
            await static_faults(p)
            nursery.start_soon(echo_events, p)
            if kinds:

                async def schedule() -> None:
                    await run_schedule(
                        p, seed, duration=math.inf if duration is None else duration, config=config
                    )
                    if duration is not None:
                        click.echo(f"schedule done: {p.counts}", err=True)

                nursery.start_soon(schedule)
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for signum in signals:
                    # Its normal end: exit 0 (docs/shutdown.md).
                    click.echo(
                        f"received {signal.Signals(signum).name}: the proxy stopped; "
                        f"faults {p.counts}",
                        err=True,
                    )
                    nursery.cancel_scope.cancel()
                    return

    trio.run(run)
