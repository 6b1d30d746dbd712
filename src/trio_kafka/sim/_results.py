"""What one seed's run comes to: its failure classes, summary and canonical trace.

The runner (`runner.py`) executes a seed and leaves an `Outcome` (the history, the
cluster, the fault log, the final reads, its own findings); `finish` turns that into the
run's `RunOutput`: the checker's verdict on the history and the brokers' logs, the
runner's extra checks (read_uncommitted returns exactly the log's data records; a history
with no operation, or records no operation wrote, cannot pass), the picklable
`SeedResult` summary, and the canonical trace with its digest (the determinism check
compares them byte for byte; the network section only when the run was traced).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import attrs

from trio_kafka.broker import Cluster
from trio_kafka.sim.checker import CheckResult, check
from trio_kafka.sim.faults import FaultIdentity, FaultKind, FaultLog, Profile
from trio_kafka.sim.history import CasAppend, History, Produce, Status
from trio_kafka.sim.snapshot import LogSnapshot, snapshot_cluster
from trio_kafka.sim.workloads import Workload

# Extra failure classes besides the checker's `ViolationKind` values.
EXCEPTION = "exception"
READ_MISMATCH = "read-mismatch"
#: The workload recorded no operation: nothing was checked, so the seed cannot pass.
NO_OPERATIONS = "no-operations"
#: A declared topic holds records although no operation of the history wrote to it.
UNEXPLAINED_RECORDS = "unexplained-records"


@attrs.frozen(slots=True)
class SeedResult:
    """What one seed did, in plain values (picklable, JSON-able)."""

    workload: str
    seed: int
    profile: str
    #: Rendered violations, in the checker's order, then the runner's own.
    violations: tuple[str, ...]
    #: The class of each violation (a `ViolationKind` value, "exception", ...).
    classes: tuple[str, ...]
    #: The class a minimizer keeps failing (None: the seed passed).
    failure_class: str | None
    #: Faults fired per kind (kind value -> count; every kind listed).
    faults: Mapping[str, int]
    #: BUGGIFY sites that fired at least once.
    buggify_sites: tuple[str, ...]
    #: Operations per final status ("ok", "fail", "info", "pending").
    ops: Mapping[str, int]
    virtual_time: float
    wall_time: float
    trace_digest: str
    #: Every distinct fault identity fired, as canonical JSON (for minimizing).
    fired: tuple[str, ...]
    #: The replay's fault restriction (None: the seed's swarm plan).
    restricted: bool = False

    @property
    def ok(self) -> bool:
        return self.failure_class is None

    def fired_identities(self) -> tuple[FaultIdentity, ...]:
        return tuple(FaultIdentity.from_json(f) for f in self.fired)

    def for_sweep(self) -> SeedResult:
        """This result as a sweep's worker sends it back: a passing seed without `fired`
        (only a failing seed's faults are minimized or replayed; they are most of a
        result's size: ~2 KB of a lite seed's ~3 KB, tens of KB of a standard cas-txn
        seed's, pickled to the parent, or collected to Spark's driver, for nothing)."""
        return self if not self.ok or not self.fired else attrs.evolve(self, fired=())

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "seed": self.seed,
            "profile": self.profile,
            "violations": list(self.violations),
            "classes": list(self.classes),
            "failure_class": self.failure_class,
            "faults": dict(self.faults),
            "buggify_sites": list(self.buggify_sites),
            "ops": dict(self.ops),
            "virtual_time": self.virtual_time,
            "wall_time": self.wall_time,
            "trace_digest": self.trace_digest,
            "restricted": self.restricted,
        }


@attrs.frozen(slots=True)
class RunOutput:
    """A run in full (in process only)."""

    result: SeedResult
    history: History
    check: CheckResult | None
    fault_log: FaultLog
    #: The canonical trace (history, faults, network when traced, reads, check).
    trace: str


@attrs.define(eq=False)
class Outcome:
    """What the async part of a run leaves for the synchronous part."""

    history: History = attrs.field(factory=History)
    cluster: Cluster | None = None
    log: FaultLog | None = None
    network_trace: str = ""
    committed: dict[tuple[str, int], list[tuple[int, bytes | None]]] = attrs.field(factory=dict)
    uncommitted: dict[tuple[str, int], list[tuple[int, bytes | None]]] = attrs.field(factory=dict)
    extra: list[tuple[str, str]] = attrs.field(factory=list)
    virtual_time: float = 0.0


def finish(
    spec: Workload,
    seed: int,
    profile: Profile,
    restricted: bool,
    out: Outcome,
    wall: float,
    trace: bool,
) -> RunOutput:
    assert out.cluster is not None and out.log is not None
    snapshot = snapshot_cluster(out.cluster)
    result: CheckResult | None = None
    violations: list[tuple[str, str]] = []
    try:
        result = check(out.history, snapshot, committed_reads=out.committed or None)
        violations += [(v.kind.value, v.render()) for v in result.violations]
    except ValueError as exc:
        violations.append((EXCEPTION, f"check refused the history: {exc}"))
    if out.uncommitted:
        mismatch = _uncommitted_mismatch(snapshot, out.uncommitted)
        if mismatch:
            violations.append((READ_MISMATCH, mismatch))
    violations += out.extra
    violations += _unchecked(spec, out.history, snapshot)
    failure_class = _failure_class(result, [k for k, _ in violations])
    counts = out.log.count_by_kind()
    fired = out.log.identities()
    sites = tuple(sorted({i.site for i in fired if i.kind is FaultKind.BUGGIFY}))
    ops = dict.fromkeys((s.value for s in Status), 0)
    for op in out.history:
        ops[op.status.value] += 1
    text = _trace_text(out, snapshot, [r for _, r in violations], network=trace)
    # Without the network section: a traced and an untraced run of a seed share it.
    digest = hashlib.blake2b(
        _trace_text(out, snapshot, [r for _, r in violations], network=False).encode()
        if trace
        else text.encode(),
        digest_size=16,
    ).hexdigest()
    summary = SeedResult(
        workload=spec.name,
        seed=seed,
        profile=profile.name,
        violations=tuple(r for _, r in violations),
        classes=tuple(k for k, _ in violations),
        failure_class=failure_class,
        faults={k.value: n for k, n in counts.items()},
        buggify_sites=sites,
        ops=ops,
        virtual_time=out.virtual_time,
        wall_time=wall,
        trace_digest=digest,
        fired=tuple(i.to_json() for i in fired),
        restricted=restricted,
    )
    return RunOutput(summary, out.history, result, out.log, text)


def _unchecked(spec: Workload, history: History, snapshot: LogSnapshot) -> list[tuple[str, str]]:
    """What the checker cannot see: a history without operations (a workload that never
    sent, or sent without recording: every seed would pass), and records in a declared
    topic that no operation wrote to (the checker's I1 covers the topics ops name)."""
    if len(history) == 0:
        return [
            (
                NO_OPERATIONS,
                f"workload {spec.name!r} recorded no operation, so nothing was checked: "
                "record each send with ctx.track_send (or ctx.history.invoke/complete), "
                "and keep sending until ctx.fault_phase_end on trio's clock "
                "(trio.current_time(), not ctx.wall_clock())",
            )
        ]
    written = {o.op.topic for o in history if isinstance(o.op, Produce | CasAppend)}
    out = []
    for part in snapshot.partitions:
        if part.topic not in spec.topics or part.topic in written:
            continue
        records = sum(b.record_count for b in part.batches if not b.is_control)
        if records:
            out.append(
                (
                    UNEXPLAINED_RECORDS,
                    f"{part.topic}-{part.partition} holds {records} record(s) but no "
                    "operation of the history wrote to this topic: record every send",
                )
            )
    return out


def _failure_class(result: CheckResult | None, kinds: list[str]) -> str | None:
    if result is not None and result.failure_class is not None:
        return result.failure_class.value
    return kinds[0] if kinds else None


def _uncommitted_mismatch(
    snapshot: LogSnapshot, reads: Mapping[tuple[str, int], list[tuple[int, bytes | None]]]
) -> str | None:
    for part in snapshot.partitions:
        tp = (part.topic, part.partition)
        if tp not in reads:
            continue
        expected = [
            (r.offset, r.value) for b in part.batches if not b.is_control for r in b.records
        ]
        if reads[tp] != expected:
            return (
                f"read_uncommitted of {tp[0]}-{tp[1]} returned {len(reads[tp])} records, "
                f"the log holds {len(expected)} data records"
            )
    return None


def _trace_text(
    out: Outcome, snapshot: LogSnapshot, violations: list[str], *, network: bool
) -> str:
    """The run's canonical trace: what two runs of one seed must agree on, byte for byte.
    The network section is there only when the run was traced (it is long)."""
    assert out.log is not None
    parts = ["# history\n", out.history.trace(), "# faults\n"]
    parts += [line + "\n" for line in out.log.lines()]
    if network:
        parts += ["# network\n", out.network_trace]
    parts.append("# log\n")
    for part in snapshot.partitions:
        batches = [
            [b.base_offset, b.producer_id, b.producer_epoch, b.base_sequence, b.record_count]
            for b in part.batches
        ]
        parts.append(json.dumps([part.topic, part.partition, part.log_end_offset, batches]) + "\n")
    parts.append("# reads\n")
    for label, reads in (("committed", out.committed), ("uncommitted", out.uncommitted)):
        for (topic, p), records in sorted(reads.items()):
            values = [[o, None if v is None else v.decode("latin-1")] for o, v in records]
            parts.append(json.dumps([label, topic, p, values]) + "\n")
    parts.append("# check\n")
    parts += [v + "\n" for v in violations]
    parts.append(f"# end {out.virtual_time!r}\n")
    return "".join(parts)
