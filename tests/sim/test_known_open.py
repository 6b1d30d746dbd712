"""Seeds that find a bug not fixed yet: strict xfails, so fixing it turns them red and
they move to simulations/regressions/.

None open (session 8). The last, idempotent standard seed 10816290 (a BUGGIFY batch split
that miscounted the requests in flight), is simulations/regressions/idempotent-standard-
10816290.toml. Add one as::

    @pytest.mark.xfail(strict=True, reason="open bug, see the test's docstring")
    def test_<workload>_seed_<S>_<what>() -> None:
        \"\"\"What the seed shows, the minimized faults, the replay command.\"\"\"
        result = run_seed("<workload>", S, profile="lite").result
        assert result.ok, result.violations
"""
