"""Seeds that find a bug not fixed yet: strict xfails, so fixing it turns them red and
they move to simulations/regressions/.

One open (session 7): idempotent standard seed 10816290. (The one before, transactional
seed 1100, is simulations/regressions/transactional-lite-1100.toml.) Add one as::

    @pytest.mark.xfail(strict=True, reason="open bug, see the test's docstring")
    def test_<workload>_seed_<S>_<what>() -> None:
        \"\"\"What the seed shows, the minimized faults, the replay command.\"\"\"
        result = run_seed("<workload>", S, profile="lite").result
        assert result.ok, result.violations
"""

from __future__ import annotations

import pytest

from trio_kafka.sim.runner import run_seed


@pytest.mark.xfail(strict=True, reason="open bug, see the test's docstring")
def test_idempotent_standard_seed_10816290_duplicates_a_record() -> None:
    """Found by session 7's sweep (idempotent standard 10,800,000-10,831,711 at 74141bf,
    1 failing seed of 31,712; reproduces on main 517495c): value 'w1-10' is twice in
    partition 1 (offsets 10 and 12), an idempotent producer's duplicate. Minimized
    118 -> 12 faults: a black hole after apply on p0's connection to broker 1, two
    clogs, a leader change of partition 2, and BUGGIFY's forced epoch bumps (2), a
    forced batch split and tiny request timeouts (5): a forced epoch bump with a
    request that may still land, as in `new-producer-id-on-bump`'s shape. In the replay's
    trace, w1-10's request was in flight on the connection the tiny timeout closed, but
    not in the attempt whose batches the forced bump reported Ambiguous: it landed under
    the old epoch and its batch was resent under the new one (session 7's note). Replay:
    trio-kafka simulate --profile standard --workload idempotent --seed 10816290
    --faults blackhole-after-apply.136b19ce,buggify.95722473,buggify.76540fd6,buggify.26e1d347,clog.d91fd22a,clog.7beb2d57,buggify.74a09047,leader-change.f6560ffd,buggify.06e8f516,buggify.d4a07793,buggify.a8d44d6e,buggify.d07bba2e
    """
    result = run_seed("idempotent", 10816290, profile="standard").result
    assert result.ok, result.violations
