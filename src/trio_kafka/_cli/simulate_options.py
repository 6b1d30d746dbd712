"""What `trio-kafka simulate` makes of its options: the default number of jobs, a time
budget, and the user's own workloads (`--import MODULE`, `--workload MODULE:FUNCTION`);
and the quiet client logs every simulate process (the hunt's workers too) runs with."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import click

from trio_kafka.sim.workloads import WORKLOADS


def default_jobs() -> int:
    """The cores this process may run on (what `--jobs` defaults to)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class SeedOrNext(click.ParamType):  # type: ignore[type-arg]
    """`--seed`: a seed number, or `next` (the seed after the last one `--ledger`
    recorded for the workload and profile). (ParamType is generic from click 8.2 on.)"""

    name = "SEED|next"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int) or value == "next":
            return value
        try:
            seed = int(value)
        except ValueError:
            self.fail(f"expected a seed number or 'next', got {value!r}", param, ctx)
        if seed < 0:
            self.fail(f"a seed is not negative, got {seed}", param, ctx)
        return seed


def parse_duration(text: str) -> float:
    """ "90", "90s", "15m", "2h", "1h30m" as seconds; anything else is refused."""
    import re

    value = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        seconds = float(value)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([hms])", value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise ValueError(f"expected a duration such as 90s, 15m or 1h30m, got {text!r}")
        seconds = sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"a budget must be positive, got {text!r}")
    return seconds


def _cwd_on_path() -> None:
    """The current directory on the import path, as `python -m` has it: `--import
    my_module` run from the project that holds my_module.py finds it (the console
    script's path has only its own directory)."""
    import os
    import sys

    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def import_workloads(modules: Sequence[str]) -> None:
    """Import the modules whose `@register` calls add workloads (also in each worker)."""
    import importlib

    if modules:
        _cwd_on_path()
    for module in modules:
        importlib.import_module(module)


def resolve_workload(spec: str, imports: Sequence[str]) -> str:
    """A registered name, or "module:function" (imported; the function must be
    registered with `@register`): the name the runner looks up."""
    module, sep, attr = spec.partition(":")
    if not sep:
        return spec
    import importlib

    _cwd_on_path()
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:
        raise click.BadParameter(
            f"cannot import {module!r} for {spec!r}: {exc}", param_hint="--workload"
        ) from None
    fn = getattr(loaded, attr, None)
    if fn is None:
        raise click.BadParameter(f"{module} has no {attr!r}", param_hint="--workload")
    for name, registered in WORKLOADS.items():
        if registered.run is fn or registered is fn:
            return name
    raise click.BadParameter(
        f"{spec} is not a registered workload: decorate it with "
        "@register(NAME, topics={...}) from trio_kafka.sim.workloads",
        param_hint="--workload",
    )


__all__ = ["default_jobs", "import_workloads", "parse_duration", "resolve_workload"]


def quiet_client_logs() -> Callable[[], None]:
    """Keep the client's own log lines off the console: a fenced producer's "producer
    fenced" warning is what a fencing fault is for, and the report (the
    checker's verdict) says what went wrong. Called in this process (undone when the
    command ends, by the returned function) and in each worker (`initializer=`); a
    `trio_kafka` logger someone configured keeps its handlers. Above CRITICAL, a log
    call returns before it builds its record (fenced cas-txn writers log hundreds a
    seed)."""
    import logging

    client = logging.getLogger("trio_kafka")
    if client.handlers:
        return lambda: None
    handler, propagate, level = logging.NullHandler(), client.propagate, client.level
    client.addHandler(handler)
    client.propagate = False
    client.setLevel(logging.CRITICAL + 1)

    def restore() -> None:
        client.removeHandler(handler)
        client.propagate = propagate
        client.setLevel(level)

    return restore
