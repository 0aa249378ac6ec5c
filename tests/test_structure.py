"""The package's shape: no import cycles, and no long module without a reason in its docstring."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import grimp

PACKAGE = Path(__file__).resolve().parent.parent / "kilter"
MAX_LINES = 500
LONG_REASON = re.compile(r"\blines\b.*\bbecause\b", re.DOTALL)


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one module, on an explicit stack.

    A module naming itself is not counted: grimp cannot see compiled
    extensions, so ``from kilter._native import gang`` in ``_native``'s own
    ``__init__`` reads as the package importing itself.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle_and_nothing_else() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e", "f"}, "f": {"g"}, "g": {"f"}}
    assert sorted(strongly_connected(edges)) == [["a", "b", "c"], ["f", "g"]]


def test_no_module_of_kilter_takes_part_in_an_import_cycle() -> None:
    # grimp counts every import statement, those under TYPE_CHECKING too: a type-only cycle is still a cycle.
    graph = grimp.build_graph("kilter", include_external_packages=False)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert strongly_connected(edges) == []


def docstring(path: Path) -> str:
    text = path.read_text()
    if path.suffix == ".py":
        return ast.get_docstring(ast.parse(text)) or ""
    match = re.search(r'^"""(.*?)"""', text, re.DOTALL | re.MULTILINE)  # a .pyx: its first string
    return match.group(1) if match else ""


def test_a_module_over_500_lines_says_in_its_docstring_why() -> None:
    long = {}
    for path in sorted([*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.pyx")]):
        lines = path.read_text().count("\n")
        if lines > MAX_LINES and not LONG_REASON.search(docstring(path)):
            long[str(path.relative_to(PACKAGE.parent))] = lines
    assert long == {}
