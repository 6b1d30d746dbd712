"""docs/asyncio.md's examples run as shown (each in a fresh namespace), except the
FastAPI one (FastAPI is not a dependency: its plain-asyncio twin right below it runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._docs import python_blocks

PAGE = Path(__file__).resolve().parent.parent / "docs" / "asyncio.md"
BLOCKS = python_blocks(PAGE)
RUNNABLE = [block for block in BLOCKS if "fastapi" not in block]


def test_the_page_has_its_examples() -> None:
    assert len(BLOCKS) == 3
    assert len(RUNNABLE) == 2
    assert all("asyncio.run(" in block for block in RUNNABLE)


@pytest.mark.parametrize("index", range(len(RUNNABLE)))
def test_an_asyncio_page_example_runs(index: int, capsys: pytest.CaptureFixture[str]) -> None:
    code = compile(RUNNABLE[index], f"docs/asyncio.md, runnable block {index + 1}", "exec")
    exec(code, {"__name__": "__main__"})
    assert capsys.readouterr().out.strip(), "each example prints what it did"
