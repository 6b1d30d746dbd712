"""The fault model of the simulator: kinds, per-seed plans, decisions, the log, BUGGIFY.

Theory of operation. A simulated run asks, at every place a fault could happen, "does
fault K fire here?" The place is a *site* (a short name: "client-write", "produce") and a
*key* (a tuple of ints and strings that says what the decision is about: a connection's
per-address serial, a direction, a write number, a partition, an attempt). The triple
(kind, site, key) is the fault's *identity*; it is stable across replays of a seed and
does not depend on the order in which tasks ask, because the answer is a hash of (seed,
kind, site, key) (see `rand.py`). So:

- `FaultPlan.swarm(draws, profile)` gives each seed its own rate per kind, with some kinds
  off entirely (TigerBeetle's swarm testing: a seed that never resets connections
  explores deeper states than one where every fault is a little likely);
- `FaultDecider.fires(kind, site, *key, now=)` answers from the plan and the draws and
  appends every fault that fired to a `FaultLog` with its identity and virtual time;
- a minimizer replays the seed with `plan.restricted_to(identities)`: then a fault fires
  exactly when its identity is in the set (rates and draws no longer matter), and the
  faults that stay in the set still fire at the same places because nothing else moved;
- no fault fires at or after `plan.fault_phase_end`: the run then heals, and whatever the
  run checks for liveness (every record settled) must happen before the budget runs out.

BUGGIFY (FoundationDB): a named site in client code asks `buggify(site)`; per run each site
is activated with p=0.25 and an active site then fires on 25% of its calls. The n-th call
of a site is its key, so the decision is still content-addressed. Site names live in a
registry so that coverage (seeds in which each site fired) names those that never fire.

Kinds 1-8 act on the network (`sim/network.py`); 9-13 on brokers (their fault hooks ask
the same decider); 14 is BUGGIFY in the client.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Callable, Iterable, Mapping

import attrs

from trio_kafka.sim.rand import Draws

#: A fault key: stable, repr-able values only (never objects, ids or floats from clocks).
FaultKey = tuple[str | int, ...]


class FaultKind(enum.Enum):
    """The fault kinds of DESIGN.md ("The simulator"), in its order."""

    #: A delivery delay drawn from a heavy tail, per chunk of a link.
    LATENCY = "latency"
    #: A write delivered in several small pieces at random cut points, per write.
    FRAGMENTATION = "fragmentation"
    #: The connection resets when a client write would reach the server: never applied.
    RESET_BEFORE_APPLY = "reset-before-apply"
    #: The server's response is lost in a reset: the request was applied.
    RESET_AFTER_APPLY = "reset-after-apply"
    #: The server's response never arrives and nothing errors until the client gives up.
    BLACKHOLE_AFTER_APPLY = "blackhole-after-apply"
    #: The client sees a reset, but its request reaches the server much later.
    ZOMBIE_REQUEST = "zombie-request"
    #: Swizzle-clog: links to servers stop delivering for a while, then resume.
    CLOG = "clog"
    #: A connect attempt is refused (OSError) or hangs until the caller's timeout.
    CONNECT_FAILURE = "connect-failure"
    #: A broker crashes and restarts, optionally losing producer state.
    BROKER_CRASH = "broker-crash"
    #: A partition's leader moves; the client's metadata is stale.
    LEADER_CHANGE = "leader-change"
    #: The transaction coordinator moves or is loading.
    COORDINATOR_MOVE = "coordinator-move"
    #: The broker answers with an injected error code.
    INJECTED_ERROR = "injected-error"
    #: Another producer with the same transactional id starts (fencing).
    COMPETING_INSTANCE = "competing-instance"
    #: A client-side BUGGIFY site fires.
    BUGGIFY = "buggify"

    @property
    def is_network(self) -> bool:
        """True for the kinds `sim/network.py` applies itself."""
        return self in NETWORK_KINDS


NETWORK_KINDS = frozenset(
    {
        FaultKind.LATENCY,
        FaultKind.FRAGMENTATION,
        FaultKind.RESET_BEFORE_APPLY,
        FaultKind.RESET_AFTER_APPLY,
        FaultKind.BLACKHOLE_AFTER_APPLY,
        FaultKind.ZOMBIE_REQUEST,
        FaultKind.CLOG,
        FaultKind.CONNECT_FAILURE,
    }
)

#: The error codes fault kind INJECTED_ERROR chooses from (names of `errors.ErrorCode`).
#: NOT_ENOUGH_REPLICAS_AFTER_APPEND means the data *was* written.
INJECTABLE_ERRORS = (
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH",
    "UNKNOWN_PRODUCER_ID",
)


@attrs.frozen(slots=True, order=True)
class FaultIdentity:
    """What a fault is about, stable across replays: (kind, site, key)."""

    kind: FaultKind = attrs.field(order=lambda k: k.value)
    site: str
    key: FaultKey

    def __str__(self) -> str:
        return f"{self.kind.value}@{self.site}{list(self.key)}"

    def to_json(self) -> str:
        return json.dumps([self.kind.value, self.site, list(self.key)])

    @classmethod
    def from_json(cls, text: str) -> FaultIdentity:
        kind, site, key = json.loads(text)
        return cls(FaultKind(kind), site, tuple(key))


# ---------------------------------------------------------------------------------------
# Profiles: data, not code.


@attrs.frozen(slots=True)
class LatencyModel:
    """One-way delivery delay of a chunk: `minimum + jitter * u`, and when fault LATENCY
    fires, a Pareto spike `tail_scale * (u**(-1/tail_alpha) - 1)` capped at `tail_max`."""

    minimum: float = 0.0005
    jitter: float = 0.002
    tail_scale: float = 0.05
    tail_alpha: float = 1.2
    tail_max: float = 5.0

    def base(self, u: float) -> float:
        return self.minimum + self.jitter * u

    def spike(self, u: float) -> float:
        # u in [0, 1): 1 - u in (0, 1], so the power is finite.
        pareto: float = (1.0 - u) ** (-1.0 / self.tail_alpha) - 1.0
        return min(self.tail_max, self.tail_scale * pareto)


@attrs.frozen(slots=True)
class Profile:
    """Everything a run's faults and network depend on, besides the seed."""

    name: str
    #: Upper bound of each kind's per-seed rate (the probability per opportunity).
    max_rates: Mapping[FaultKind, float] = attrs.field(hash=False)
    #: Probability that a seed turns a kind off entirely (swarm testing).
    kind_off_probability: float = 0.3
    #: Virtual seconds during which faults fire; after that the run heals.
    fault_phase: float = 30.0
    #: Virtual seconds a whole run may take; running out is a liveness failure.
    budget: float = 120.0
    latency: LatencyModel = LatencyModel()
    #: Bytes per chunk when a write is not fragmented (a TCP segment, coarsely).
    segment_size: int = 16384
    #: Link bandwidth (bytes per virtual second): spaces a write's chunks in time.
    bandwidth: float = 100e6
    #: Bytes a writer may have in flight or unread at the peer before send_all blocks.
    window: int = 1 << 20
    #: Most pieces a fragmented write is cut into.
    max_fragments: int = 8
    #: Mean virtual seconds between swizzle-clog opportunities.
    clog_interval: float = 2.0
    #: How long a clogged link stays clogged (seconds, uniform in the range).
    clog_duration: tuple[float, float] = (0.1, 3.0)
    #: How much later a zombie request reaches the server (seconds, uniform in the range).
    zombie_delay: tuple[float, float] = (1.0, 10.0)
    #: Probability that a connect failure hangs rather than being refused.
    connect_hang_probability: float = 0.5
    #: After a client closes a black-holed connection, when the server side sees a reset.
    blackhole_server_reset: float = 30.0
    buggify_activation: float = 0.25
    buggify_fire: float = 0.25


_BASE_RATES: dict[FaultKind, float] = {
    FaultKind.LATENCY: 0.05,
    FaultKind.FRAGMENTATION: 0.5,
    FaultKind.RESET_BEFORE_APPLY: 0.02,
    FaultKind.RESET_AFTER_APPLY: 0.02,
    FaultKind.BLACKHOLE_AFTER_APPLY: 0.01,
    FaultKind.ZOMBIE_REQUEST: 0.01,
    FaultKind.CLOG: 0.3,
    FaultKind.CONNECT_FAILURE: 0.2,
    FaultKind.BROKER_CRASH: 0.02,
    FaultKind.LEADER_CHANGE: 0.05,
    FaultKind.COORDINATOR_MOVE: 0.05,
    FaultKind.INJECTED_ERROR: 0.03,
    FaultKind.COMPETING_INSTANCE: 0.1,
    # On or off per seed; the FoundationDB constants (activation, fire) do the rest.
    FaultKind.BUGGIFY: 1.0,
}

#: Small, fast runs: a short fault phase and coarse segments.
LITE = Profile(
    name="lite",
    max_rates=_BASE_RATES,
    fault_phase=10.0,
    budget=60.0,
    segment_size=65536,
    clog_duration=(0.05, 1.0),
    zombie_delay=(0.5, 5.0),
)

#: Full runs: idempotent, transactional and CAS workloads with every fault kind.
STANDARD = Profile(
    name="standard",
    max_rates=_BASE_RATES,
    fault_phase=60.0,
    budget=300.0,
    segment_size=4096,
)

PROFILES: dict[str, Profile] = {p.name: p for p in (LITE, STANDARD)}


# ---------------------------------------------------------------------------------------
# Plans, decisions and the log.


@attrs.frozen(slots=True)
class FaultPlan:
    """Which faults may fire in a run: a rate per kind, the fault phase's end, and
    optionally the exact set of identities allowed to fire (a minimizer's replay)."""

    rates: Mapping[FaultKind, float] = attrs.field(hash=False)
    fault_phase_end: float
    profile: Profile
    #: None: fire by rate. A set: fire exactly the identities in it.
    allowed: frozenset[FaultIdentity] | None = None

    @classmethod
    def swarm(cls, draws: Draws, profile: Profile, *, start: float = 0.0) -> FaultPlan:
        """This seed's own rates: each kind off with `kind_off_probability`, else a rate
        uniform in [0, max_rate). BUGGIFY is on or off, its rates are FoundationDB's."""
        rates: dict[FaultKind, float] = {}
        for kind in FaultKind:
            top = profile.max_rates.get(kind, 0.0)
            if top <= 0.0 or draws.chance(profile.kind_off_probability, "swarm.off", kind.value):
                rates[kind] = 0.0
            elif kind is FaultKind.BUGGIFY:
                rates[kind] = 1.0
            else:
                rates[kind] = top * draws.uniform("swarm.rate", kind.value)
        return cls(rates=rates, fault_phase_end=start + profile.fault_phase, profile=profile)

    @classmethod
    def quiet(cls, profile: Profile) -> FaultPlan:
        """No faults at all (base latency and segmenting still apply)."""
        return cls(rates=dict.fromkeys(FaultKind, 0.0), fault_phase_end=0.0, profile=profile)

    @classmethod
    def fixed(
        cls,
        rates: Mapping[FaultKind, float],
        profile: Profile,
        *,
        fault_phase_end: float = math.inf,
    ) -> FaultPlan:
        """Given rates (kinds not named are off): for tests and hand-written scenarios."""
        return cls(
            rates={k: rates.get(k, 0.0) for k in FaultKind},
            fault_phase_end=fault_phase_end,
            profile=profile,
        )

    def restricted_to(self, identities: Iterable[FaultIdentity]) -> FaultPlan:
        """The same plan where a fault fires if and only if its identity is given."""
        return attrs.evolve(self, allowed=frozenset(identities))

    def may_fire(self, kind: FaultKind) -> bool:
        """Whether any fault of this kind can fire in this plan (lets callers skip work)."""
        if self.allowed is not None:
            return any(i.kind is kind for i in self.allowed)
        return self.rates.get(kind, 0.0) > 0.0

    def describe(self) -> str:
        on = [f"{k.value}={self.rates[k]:.4f}" for k in FaultKind if self.rates.get(k, 0.0) > 0]
        mode = "all by rate" if self.allowed is None else f"{len(self.allowed)} identities"
        return f"profile={self.profile.name} phase_end={self.fault_phase_end} {mode}: " + (
            " ".join(on) or "no faults"
        )


@attrs.frozen(slots=True)
class FiredFault:
    time: float
    identity: FaultIdentity


@attrs.define(eq=False)
class FaultLog:
    """Every fault that fired in a run, in firing order, with its virtual time."""

    #: Appended by `FaultDecider.fires`; never reordered.
    entries: list[FiredFault] = attrs.field(factory=list)

    def record(self, time: float, identity: FaultIdentity) -> None:
        self.entries.append(FiredFault(time, identity))

    def identities(self) -> tuple[FaultIdentity, ...]:
        """Distinct identities in first-fired order (what a minimizer works over)."""
        return tuple(dict.fromkeys(e.identity for e in self.entries))

    def count_by_kind(self) -> dict[FaultKind, int]:
        counts = dict.fromkeys(FaultKind, 0)
        for e in self.entries:
            counts[e.identity.kind] += 1
        return counts

    def lines(self) -> list[str]:
        return [f"{e.time!r} {e.identity}" for e in self.entries]

    def __len__(self) -> int:
        return len(self.entries)


@attrs.define(eq=False)
class FaultDecider:
    """Answers "does fault K fire at (site, key)?" for one run, and logs what fired."""

    plan: FaultPlan
    draws: Draws
    log: FaultLog = attrs.field(factory=FaultLog)
    #: The plan's rates by kind value, and the plan they were read from (`fires` is hot:
    #: a string key hashes in C, a `FaultKind` in Python).
    _rates: dict[str, float] = attrs.field(init=False, factory=dict)
    _rates_of: FaultPlan | None = attrs.field(init=False, default=None)

    def fires(
        self,
        kind: FaultKind,
        site: str,
        *key: str | int,
        now: float,
        probability: float | None = None,
        key_repr: str | None = None,
    ) -> bool:
        """Whether this fault fires. `probability` replaces the plan's rate for this
        decision (still only if the kind is on in the plan). `key_repr`: `repr(key)`,
        when the caller has it (hot callers keep the text of a key's head)."""
        plan = self.plan
        if now >= plan.fault_phase_end:
            return False
        if plan.allowed is not None:
            identity = FaultIdentity(kind, site, key)
            if identity not in plan.allowed:
                return False
        else:
            # Hot (every chunk and write asks): no identity unless the fault fires.
            if self._rates_of is not plan:
                self._rates = {k.value: r for k, r in plan.rates.items()}
                self._rates_of = plan
            value = kind._value_
            rate = self._rates.get(value, 0.0)
            if rate <= 0.0:
                return False
            p = rate if probability is None else probability
            if key_repr is None:
                if not self.draws.chance(p, f"fault.{value}.{site}", *key):
                    return False
            elif not self.draws.chance_keyed(p, f"fault.{value}.{site}", key_repr):
                return False
            identity = FaultIdentity(kind, site, key)
        self.log.record(now, identity)
        return True

    def param(self, kind: FaultKind, name: str, site: str, *key: str | int) -> float:
        """A uniform [0, 1) parameter of a fault (its duration, its error code...), drawn
        from its identity so it is the same whenever that fault fires."""
        return self.draws.uniform(f"param.{kind.value}.{name}.{site}", *key)


# ---------------------------------------------------------------------------------------
# BUGGIFY


@attrs.define(eq=False)
class BuggifyRegistry:
    """The known BUGGIFY site names (insertion order is report order)."""

    #: name -> what the site does when it fires.
    sites: dict[str, str] = attrs.field(factory=dict)

    def register(self, name: str, description: str) -> str:
        existing = self.sites.get(name)
        if existing is not None and existing != description:
            raise ValueError(f"BUGGIFY site {name!r} registered twice with different meanings")
        self.sites[name] = description
        return name

    def names(self) -> list[str]:
        return list(self.sites)

    def __contains__(self, name: object) -> bool:
        return name in self.sites


#: The project's BUGGIFY sites. Client code cannot import the simulator (layers), so it
#: uses these names as strings through an injected `(site) -> bool` hook; whoever adds a
#: site registers it here (or on a registry of its own passed to `Buggify`).
BUGGIFY_SITES = BuggifyRegistry()
BUGGIFY_SITES.register("client.tiny_request_timeout", "a request timeout becomes tiny")
BUGGIFY_SITES.register("client.forced_metadata_refresh", "refresh metadata before a send")
BUGGIFY_SITES.register("client.forced_batch_split", "send a request's batches as a request each")
BUGGIFY_SITES.register(
    "client.forced_epoch_bump", "bump the epoch after a request that may still land"
)


@attrs.define(eq=False)
class Buggify:
    """`buggify(site) -> bool` for one run: each site active with p=activation (drawn
    once, kept), an active one fires on a `fire` fraction of calls (FoundationDB: 25%, 25%)."""

    decider: FaultDecider
    #: The virtual time of a call (trio.current_time in a run; a constant in pure tests).
    now: Callable[[], float]
    registry: BuggifyRegistry = BUGGIFY_SITES
    #: Calls so far per site: the n-th call is the key of its decision.
    calls: dict[str, int] = attrs.field(factory=dict)
    _active: dict[str, bool] = attrs.field(init=False, factory=dict)

    def active(self, site: str) -> bool:
        active = self._active.get(site)
        if active is None:
            rate = self.decider.plan.profile.buggify_activation
            active = self._active[site] = self.decider.draws.chance(rate, "buggify.active", site)
        return active

    def __call__(self, site: str) -> bool:
        if site not in self.registry:
            raise KeyError(f"unknown BUGGIFY site {site!r}: register it in the BuggifyRegistry")
        n = self.calls.get(site, 0)
        self.calls[site] = n + 1
        plan = self.decider.plan
        if plan.allowed is None and not self.active(site):
            return False
        return self.decider.fires(
            FaultKind.BUGGIFY,
            site,
            n,
            now=self.now(),
            probability=plan.profile.buggify_fire,
        )


#: The share of seeds in which every fault kind must fire (issue 15's "every fault kind
#: fired in at least 1% of seeds"): a kind that fires more rarely is barely tested.
MIN_FAULT_SHARE = 0.01


def rare_kinds(seeds_fired: Mapping[str, int], seeds: int) -> list[str]:
    """The fault kinds (by value) that fired in fewer than `MIN_FAULT_SHARE` of `seeds`
    seeds, given in how many seeds each fired; a kind missing from the map never fired."""
    return [
        kind.value for kind in FaultKind if seeds_fired.get(kind.value, 0) < MIN_FAULT_SHARE * seeds
    ]


@attrs.define(eq=False)
class Coverage:
    """Across seeds: in how many seeds each fault kind and each BUGGIFY site fired."""

    registry: BuggifyRegistry = BUGGIFY_SITES
    seeds: int = 0
    #: kind -> number of seeds in which it fired at least once.
    kinds: dict[FaultKind, int] = attrs.field(factory=lambda: dict.fromkeys(FaultKind, 0))
    #: BUGGIFY site -> number of seeds in which it fired at least once.
    sites: dict[str, int] = attrs.field(factory=dict)

    def add_run(self, log: FaultLog) -> None:
        self.seeds += 1
        fired = log.identities()
        for kind in dict.fromkeys(i.kind for i in fired):
            self.kinds[kind] += 1
        for site in dict.fromkeys(i.site for i in fired if i.kind is FaultKind.BUGGIFY):
            self.sites[site] = self.sites.get(site, 0) + 1

    def site_report(self) -> dict[str, int]:
        """Every registered site (zero if it never fired), then unregistered ones."""
        report = dict.fromkeys(self.registry.names(), 0)
        report.update(self.sites)
        return report

    def never_fired(self) -> list[str]:
        return [k.value for k, n in self.kinds.items() if n == 0] + [
            s for s, n in self.site_report().items() if n == 0
        ]
