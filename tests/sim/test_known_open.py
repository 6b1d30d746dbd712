"""Seeds that find a bug not fixed yet: strict xfails, so fixing it turns them red and
they move to simulations/regressions/."""

from __future__ import annotations

import pytest

from trio_kafka.sim.runner import run_seed


@pytest.mark.xfail(strict=True, reason="open liveness bug, see the test's docstring")
def test_transactional_seed_1100_settles() -> None:
    """A transactional producer whose first connects fail (one refused, one hanging
    until the 10 s setup timeout), then meets broker 0 down (crash at 9 s) and a clog,
    opens a connection to broker 1 at 10.4 s, exchanges ApiVersions, and then never
    sends another request: init_transactions() is still waiting when the 60 s budget
    runs out. Minimized faults: connect-failure.8da906f5, connect-failure.bc1fc21d,
    broker-crash.0ba54075, clog.d91fd22a (trio-kafka simulate --workload transactional
    --seed 1100 --faults ...)."""
    result = run_seed("transactional", 1100, profile="lite").result
    assert result.ok, result.violations
