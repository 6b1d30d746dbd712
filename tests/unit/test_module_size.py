"""Modules under ~500 lines, each with one job (issue 14), where that is done already:
the simulator (`sim/`) and the command line (`_cli/`). A module that grows past the limit
is a sign to split it by job (see how `sim/network.py`, `sim/runner.py` and
`_cli/simulate.py` were split), not to raise the limit."""

from __future__ import annotations

from pathlib import Path

import trio_kafka

LIMIT = 500
#: Packages held to the limit (more join as issue 14 reaches them).
PACKAGES = ("sim", "_cli")


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_simulator_or_cli_module_is_over_the_limit() -> None:
    root = Path(trio_kafka.__file__).parent
    modules = sorted(p for package in PACKAGES for p in (root / package).rglob("*.py"))
    assert len(modules) > 20, f"found only {len(modules)} modules under {root}: wrong place?"
    too_long = {str(p.relative_to(root)): n for p in modules if (n := _lines(p)) > LIMIT}
    assert not too_long, f"modules over {LIMIT} lines (split them by job): {too_long}"
