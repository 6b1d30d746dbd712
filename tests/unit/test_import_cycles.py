"""No import cycle between the modules of trio_kafka, except the ones listed here.

The graph is grimp's (import-linter's): every import, at module level, inside a function
or under TYPE_CHECKING, since each ties the two modules together just the same. A cycle
is a strongly connected component of more than one module. The allow-list holds the
cycles that remain; it may only shrink: a listed cycle that is gone fails too, so the
list is kept exact.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

#: The cycles that remain, each as the set of its modules (without "trio_kafka.").
ALLOWED: set[frozenset[str]] = set()


def test_the_sans_io_core_has_no_cycle_at_all() -> None:
    core = ("errors", "protocol", "records", "producer")
    inside = [c for c in import_cycles("trio_kafka") if any(m.split(".")[0] in core for m in c)]
    assert not inside, f"import cycle(s) in the sans-IO core: {_show(set(inside))}"


def import_cycles(package: str) -> set[frozenset[str]]:
    """The strongly connected components (Tarjan's algorithm, iterative) of more than
    one module in the import graph of `package`, names relative to it."""
    graph = grimp.build_graph(package)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            children = edges.get(node, [])
            if i < len(children):
                work.append((node, i + 1))
                child = children[i]
                if child not in index:
                    work.append((child, 0))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(m.removeprefix(package + ".") for m in component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def _show(cycles: set[frozenset[str]]) -> str:
    return "; ".join(" <-> ".join(sorted(c)) for c in sorted(cycles, key=sorted))


def test_no_import_cycle_outside_the_allow_list() -> None:
    cycles = import_cycles("trio_kafka")
    new = cycles - ALLOWED
    assert not new, f"import cycle(s) between modules: {_show(new)}"


def test_the_allow_list_names_only_cycles_that_exist() -> None:
    gone = ALLOWED - import_cycles("trio_kafka")
    assert not gone, f"no longer cycles, remove them from ALLOWED: {_show(gone)}"


def test_the_cycle_finder_finds_a_cycle_and_only_the_cycle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "cyclic"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from cyclic import b\n")
    (package / "b.py").write_text("def f():\n    from cyclic import c\n")
    (package / "c.py").write_text("import cyclic.a\n")
    (package / "d.py").write_text("import cyclic.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclic") == {frozenset({"a", "b", "c"})}
