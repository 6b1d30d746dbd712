"""The ```python blocks of a Markdown page, in order: what the README and docs tests run."""

from __future__ import annotations

import re
from pathlib import Path

_BLOCK = re.compile(r"^```python\n(.*?)^```", flags=re.M | re.S)


def python_blocks(page: Path) -> list[str]:
    return _BLOCK.findall(page.read_text())
