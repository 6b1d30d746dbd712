"""`trio-kafka simulate --seed S --faults IDS --trace FILE` and `--replay FILE`: rerun one
seed (with exactly the given faults, writing its full trace) or the seeds of a JSON report
or a regression file, and say whether each still fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from trio_kafka.sim.minimize import (
    case_faults,
    format_rates,
    parse_fault_ids,
    parse_rates,
    resolve_fault_ids,
)
from trio_kafka.sim.mutants import planted
from trio_kafka.sim.runner import run_seed
from trio_kafka.sim.workloads import WORKLOADS


def run_single(
    console: Any,
    workload: str,
    seed: int,
    profile: str,
    faults: str | None,
    trace_file: Path | None,
    rates_text: str | None = None,
    mutant: str | None = None,
) -> None:
    rates = None
    if rates_text is not None:
        try:
            rates = parse_rates(rates_text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--rates") from None
    try:
        rules = planted(mutant)
    except KeyError as exc:
        raise click.BadParameter(str(exc.args[0]), param_hint="--mutant") from None
    identities = None
    if faults is not None:
        ids = parse_fault_ids(faults)
        full = run_seed(workload, seed, profile=profile, rates=rates, rules=rules).result
        try:
            identities = resolve_fault_ids(ids, full.fired_identities())
        except KeyError as exc:
            raise click.BadParameter(str(exc), param_hint="--faults") from None
    out = run_seed(
        workload,
        seed,
        profile=profile,
        faults=identities,
        rates=rates,
        trace=trace_file is not None,
        rules=rules,
    )
    r = out.result
    status = "ok" if r.ok else f"FAILED ({r.failure_class})"
    plan = "" if rates is None else f", rates {format_rates(rates)}"
    named = "" if mutant is None else f", planted bug {mutant}"
    console.print(f"seed {seed} ({workload}, {profile}{plan}{named}): {status}")
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
    """The seeds of a JSON report (`failures`), a `--search` report (its shrunk plan) or
    a regression file (one case). Anything else is refused naming the file."""
    import tomllib

    what = "is not a JSON report of trio-kafka simulate or a regression file (.toml)"
    try:
        text = path.read_text()
        data: Any = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError, TOMLDecodeError
        raise click.BadParameter(f"{path} {what}: {exc}", param_hint="--replay") from None
    cases = _cases(data)
    for case in cases:
        missing = [key for key in ("workload", "seed") if key not in case]
        if missing:
            raise click.BadParameter(
                f"{path} {what}: no {' or '.join(missing)} in it", param_hint="--replay"
            )
    for name in dict.fromkeys(str(case["workload"]) for case in cases):
        if name not in WORKLOADS:
            # A workload of the user's own: registered only once its module is imported.
            raise click.UsageError(
                f"{path} is a run of workload {name!r}, which is not registered "
                f"(known: {', '.join(WORKLOADS)}): a workload of your own is registered "
                "when its module is imported; give that module with --import MODULE, as "
                f"the run did: trio-kafka simulate --replay {path} --import MODULE"
            )
    return cases


def _cases(data: Any) -> list[dict[str, Any]]:
    if not isinstance(data, dict):
        return [{}]
    if "shrunk" in data:  # a --search report: the shrunk plan with its minimized faults
        minimized = data.get("minimized", {})
        return [
            {
                "workload": data["workload"],
                "profile": data["profile"],
                "seed": data["shrunk"]["seed"],
                "rates": data["shrunk"]["rates"],
                "faults": minimized.get("faults") if minimized.get("replays") else None,
                "mutant": data.get("mutant"),
            }
        ]
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
        profile = case.get("profile", "lite")
        rates = case.get("rates")
        if rates is not None:  # a drawn plan's rates, by kind name
            rates = parse_rates(",".join(f"{k}={v!r}" for k, v in rates.items()))
        rules = planted(case.get("mutant"))
        if faults is not None:
            full = run_seed(
                case["workload"], case["seed"], profile=profile, rates=rates, rules=rules
            )
            identities = case_faults(
                list(faults), case.get("fault_identities", ()), full.result.fired_identities()
            )
        r = run_seed(
            case["workload"],
            case["seed"],
            profile=profile,
            faults=identities,
            rates=rates,
            rules=rules,
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
