"""Every ```python block of the README runs as shown (each in a fresh namespace)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._docs import python_blocks

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = python_blocks(README)


def test_the_readme_has_its_three_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_example_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    code = compile(BLOCKS[index], f"README.md, python block {index + 1}", "exec")
    exec(code, {"__name__": "__main__"})
    assert capsys.readouterr().out.strip(), "each example prints what it did"


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_example_runs_under_asyncio(
    index: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same example as an asyncio program: `asyncio.run(main())` for `trio.run(main)`.
    The mock broker is trio's, so under asyncio `open_cluster` runs it in a trio thread
    (tests/integration/_backends.py); the client code of the example is unchanged."""
    source = BLOCKS[index]
    assert "trio.run(main)" in source, "each example ends with trio.run(main)"
    source = source.replace("import trio\n", "import asyncio\n").replace(
        "trio.run(main)", "asyncio.run(main())"
    )
    source = source.replace(
        "from trio_kafka.broker import open_cluster",
        "from tests.integration._backends import mock_cluster as open_cluster",
    )
    assert "trio." not in source
    code = compile(source, f"README.md, python block {index + 1} (asyncio)", "exec")
    exec(code, {"__name__": "__main__"})
    assert capsys.readouterr().out.strip(), "each example prints what it did"
