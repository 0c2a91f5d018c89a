"""The import layers of DESIGN §5, read from the source with ``ast``.

- ``zarrfs.core`` and ``zarrfs.views`` never import pyfuse3, trio, ``zarrfs.fuse`` or
  ``zarrfs.cli`` (anywhere in a module, type-checking blocks included);
- codecs and stores do not import each other;
- no import cycles between zarrfs modules. Every import statement counts, at module level or
  inside a function (a function-level import does not make a cycle go away, it only hides it),
  except those under ``if TYPE_CHECKING:``, which never run;
- no module longer than ``MAX_LINES`` (a module a newcomer can read whole; split one that
  grows past it along a seam its docstring can name).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "zarrfs"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
MAX_LINES = 500


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, skip_type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, optionally leaving out ``if TYPE_CHECKING:`` bodies."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        if skip_type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """Absolute names a statement imports (``from pkg import mod`` names ``pkg.mod``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in MODULES else base)
    return out


def _edges(skip_type_checking: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        deps = graph.setdefault(module, set())
        for node in _imports(tree, skip_type_checking):
            for name in _targets(module, node):
                deps.add(name)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_graph_sees_the_package() -> None:
    graph = _edges(skip_type_checking=True)
    assert "zarrfs.core.array" in graph
    assert "zarrfs.core.errors" in graph["zarrfs.core.array"]
    # a function-level import is an edge too
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


@pytest.mark.parametrize("layer", ["zarrfs.core", "zarrfs.views"])
def test_core_and_views_never_import_the_front_end(layer: str) -> None:
    banned = ("pyfuse3", "trio", "zarrfs.fuse", "zarrfs.cli")
    bad = sorted(
        f"{module} imports {name}"
        for module, deps in _edges(skip_type_checking=False).items()
        if _in(module, layer)
        for name in deps
        if any(_in(name, b) for b in banned)
    )
    assert bad == []


@pytest.mark.parametrize(
    "layer, other",
    [("zarrfs.core.codecs", "zarrfs.core.stores"), ("zarrfs.core.stores", "zarrfs.core.codecs")],
)
def test_codecs_and_stores_do_not_import_each_other(layer: str, other: str) -> None:
    bad = sorted(
        f"{module} imports {name}"
        for module, deps in _edges(skip_type_checking=False).items()
        if _in(module, layer)
        for name in deps
        if _in(name, other)
    )
    assert bad == []


def test_no_import_cycles() -> None:
    assert _cycles(_edges(skip_type_checking=True)) == []


def _line_counts() -> dict[str, int]:
    return {
        name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()
    }


def test_no_module_is_longer_than_the_limit() -> None:
    counts = _line_counts()
    assert counts["zarrfs.core.array"] > 10  # the counts are of the real sources
    assert {name: n for name, n in counts.items() if n > MAX_LINES} == {}
