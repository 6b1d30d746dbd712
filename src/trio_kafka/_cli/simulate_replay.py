"""`trio-kafka simulate --seed S --faults IDS --trace FILE` and `--replay FILE`: rerun one
seed (with exactly the given faults, writing its full trace) or the seeds of a JSON report
or a regression file, and say whether each still fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from trio_kafka.sim.minimize import case_faults, parse_fault_ids, resolve_fault_ids
from trio_kafka.sim.runner import run_seed


def run_single(
    console: Any,
    workload: str,
    seed: int,
    profile: str,
    faults: str | None,
    trace_file: Path | None,
) -> None:
    identities = None
    if faults is not None:
        ids = parse_fault_ids(faults)
        full = run_seed(workload, seed, profile=profile).result
        try:
            identities = resolve_fault_ids(ids, full.fired_identities())
        except KeyError as exc:
            raise click.BadParameter(str(exc), param_hint="--faults") from None
    out = run_seed(workload, seed, profile=profile, faults=identities, trace=trace_file is not None)
    r = out.result
    status = "ok" if r.ok else f"FAILED ({r.failure_class})"
    console.print(f"seed {seed} ({workload}, {profile}): {status}")
    console.print(f"  ops: {dict(r.ops)}  virtual {r.virtual_time:.2f} s  wall {r.wall_time:.3f} s")
    console.print(f"  faults: {', '.join(f'{k}={v}' for k, v in r.faults.items() if v) or 'none'}")
    for v in r.violations:
        console.print(f"  {v}", markup=False, highlight=False)
    if trace_file is not None:
        trace_file.write_text(out.trace)
        console.print(
            f"trace ({len(out.trace)} bytes, digest {r.trace_digest}) written to {trace_file}"
        )
    if not r.ok:
        raise SystemExit(1)


def load_cases(path: Path) -> list[dict[str, Any]]:
    """The seeds of a JSON report (`failures`) or of a regression file (one case)."""
    text = path.read_text()
    if path.suffix == ".toml":
        import tomllib

        data: Any = tomllib.loads(text)
    else:
        data = json.loads(text)
    if "failures" in data:
        return [
            {
                "workload": data["workload"],
                "profile": data["profile"],
                "seed": f["seed"],
                "faults": f.get("minimized", {}).get("faults"),
            }
            for f in data["failures"]
        ]
    return [data]


def replay_cases(console: Any, path: Path) -> None:
    bad = 0
    for case in load_cases(path):
        faults = case.get("faults")
        identities = None
        if faults is not None:
            full = run_seed(case["workload"], case["seed"], profile=case.get("profile", "lite"))
            identities = case_faults(
                list(faults), case.get("fault_identities", ()), full.result.fired_identities()
            )
        r = run_seed(
            case["workload"], case["seed"], profile=case.get("profile", "lite"), faults=identities
        ).result
        bad += not r.ok
        console.print(
            f"seed {r.seed} ({r.workload}, {r.profile}, "
            f"{'all faults' if identities is None else f'{len(identities)} fault(s)'}): "
            f"{'ok' if r.ok else 'FAILED ' + str(r.failure_class)}"
        )
        for v in r.violations[:5]:
            console.print(f"  {v}", markup=False, highlight=False)
    if bad:
        raise SystemExit(1)
