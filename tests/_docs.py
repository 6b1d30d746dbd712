"""The ```python blocks of a Markdown page, in order: what the README and docs tests run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.M | re.S)


def python_blocks(page: Path) -> list[str]:
    return _BLOCK.findall(page.read_text())


def example_tests(page: str, number: int) -> dict[str, Any]:
    """The names a docs page's python block `number` (from 1) defines: a block written
    as pytest tests, whose test functions a test then calls with its own fixtures."""
    path = Path(__file__).resolve().parent.parent / "docs" / page
    namespace: dict[str, Any] = {"__name__": f"docs_{page}_{number}"}
    exec(
        compile(python_blocks(path)[number - 1], f"docs/{page}, block {number}", "exec"), namespace
    )
    return namespace
