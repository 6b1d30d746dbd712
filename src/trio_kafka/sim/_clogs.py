"""Links and clogs of a simulated network: CLOG episodes, offered by a timer.

Theory of operation: see `network.py`. A link is a server address in one direction
(`_streams.Link`), shared by every connection to that address. A clogged link delivers
nothing and holds up handshakes; its chunks keep their delivery times, so after the
unclog everything due arrives at once, in order (the pipes it held are re-armed through
`arm`, the network's `Delivery.arm`). During the fault phase a timer offers an episode
every ~`clog_interval` seconds (episode k at a time fixed by k alone); an episode clogs a
random subset of links one by one, holds, then unclogs them in another random order.
Timers, not tasks: whether a clog can fire changes no task's schedule, so a replay
restricted to the faults that fired schedules its tasks like the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import trio

from trio_kafka.sim._streams import C2S, S2C, Address, Connection, Link, Pipe
from trio_kafka.sim._timers import VirtualTimers
from trio_kafka.sim.faults import FaultDecider, FaultKind, Profile
from trio_kafka.sim.rand import Draws


class Clogs:
    """The links of one network, their clogs, and the CLOG episodes."""

    def __init__(
        self,
        draws: Draws,
        profile: Profile,
        decider: FaultDecider,
        *,
        arm: Callable[[Connection, Pipe, float], None],
        note: Callable[[str], None],
        server_addresses: Callable[[], list[Address]],
    ) -> None:
        self.draws = draws
        self.profile = profile
        self.decider = decider
        #: Re-arms a pipe's delivery timer (`Delivery.arm`).
        self._arm = arm
        #: The network's trace (`SimNetwork._note`).
        self._note = note
        #: The addresses served now (an episode picks among their links).
        self._server_addresses = server_addresses
        #: Links by (host, port, direction), made on first use.
        self._links: dict[tuple[str, int, str], Link] = {}
        #: The run's virtual-time timers (`bind`).
        self._timers: VirtualTimers | None = None
        self._now: Callable[[], float] = trio.current_time

    def bind(self, timers: VirtualTimers) -> None:
        """Run on `timers` (the run's, once `open_sim_network` has them)."""
        self._timers = timers
        self._now = timers.clock.current_time

    def link(self, address: Address, direction: str) -> Link:
        key = (address[0], address[1], direction)
        link = self._links.get(key)
        if link is None:
            link = self._links[key] = Link(address, direction)
        return link

    def clog(self, host: str, port: int, direction: str | None = None) -> None:
        """Pause delivery on the link(s) to (host, port); nests with other clogs."""
        for d in (C2S, S2C) if direction is None else (direction,):
            self.link((host, port), d).clogs += 1
            self._note(f"clog {host}:{port} {d}")

    def unclog(self, host: str, port: int, direction: str | None = None) -> None:
        for d in (C2S, S2C) if direction is None else (direction,):
            link = self.link((host, port), d)
            link.clogs = max(0, link.clogs - 1)
            self._note(f"unclog {host}:{port} {d}")
            if not link.clogs:
                link.lot.unpark_all()
                # Its pipes deliver what came due meanwhile (from the timers, as a chunk
                # arriving on time would: after this task's step, not inside it).
                held, link.held = link.held, {}
                for conn, pipe in held.values():
                    self._arm(conn, pipe, self._now())

    # -- clog swizzling -----------------------------------------------------------------

    def start(self) -> None:
        """Offer episodes from now until the end of the plan's fault phase."""
        self._run_timed(self._swizzler())

    def _swizzler(self) -> Iterator[float]:
        """Offer a clog episode at fixed times; each episode's identity is its number."""
        start = self._now()
        episode = 0
        offset = 0.0
        while True:
            offset += 2 * self.profile.clog_interval * self.draws.uniform("clog.gap", episode)
            yield start + offset
            now = self._now()
            if now >= self.decider.plan.fault_phase_end:
                return
            if self.decider.fires(FaultKind.CLOG, "swizzle", episode, now=now):
                self._run_timed(self._swizzle_episode(episode))
            episode += 1

    def _swizzle_episode(self, episode: int) -> Iterator[float]:
        rng = self.draws.rng("clog.episode", episode)
        links = [(h, p, d) for (h, p) in self._server_addresses() for d in (C2S, S2C)]
        if not links:
            return
        chosen = rng.sample(links, rng.randint(1, len(links)))
        low, high = self.profile.clog_duration
        stagger = 0.1 * high
        self._note(f"swizzle #{episode}: {len(chosen)} links")
        for host, port, direction in chosen:
            self.clog(host, port, direction)
            yield self._now() + stagger * rng.random()
        yield self._now() + low + (high - low) * rng.random()
        rng.shuffle(chosen)
        for host, port, direction in chosen:
            self.unclog(host, port, direction)
            yield self._now() + stagger * rng.random()

    def _run_timed(self, steps: Iterator[float]) -> None:
        """Run `steps` on the timers: each value it yields is the virtual time at which
        it goes on (a task's `sleep_until`, without a task)."""
        when = next(steps, None)
        if when is not None:
            self._timers_().call_at(when, self._run_timed, steps)

    def _timers_(self) -> VirtualTimers:
        assert self._timers is not None, "use `async with open_sim_network(...)`"
        return self._timers
