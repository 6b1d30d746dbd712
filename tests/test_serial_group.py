"""The serial group of `make test` (tests/conftest.py) names places that exist: a renamed
folder or file would otherwise leave its real-time tests to run beside the others."""

from __future__ import annotations

from tests.conftest import REPO, SERIAL_PATHS


def test_every_serial_path_names_test_files() -> None:
    files = [p.relative_to(REPO).as_posix() for p in (REPO / "tests").rglob("test_*.py")]
    for part in SERIAL_PATHS:
        matched = [f for f in files if part in f]
        assert matched, f"no test file matches the serial path {part!r}"
