"""The engine's modules import one another in layers, never in a circle.

A circle (a imports b, b imports a, at the top or inside a function) forces imports into functions to
dodge the half-initialised module, and means neither side can be read or tested without the other. The
graph is read from the source with `ast`, every import counted wherever it is written, so an import
moved into a function to hide a circle is still seen.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import autokernel.engine

ENGINE = Path(autokernel.engine.__file__).parent
PACKAGE = "autokernel.engine"
# Circles that exist today and are not fixed yet: {frozenset of module names}. Empty: add one only with a
# comment saying why it stays, and take it out when it is broken.
KNOWN_CIRCLES: set[frozenset[str]] = set()


def _modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file of every module under `root` (a package `__init__.py` is named by its folder)."""
    found = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join([package, *parts])] = path
    return found


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom, modules: dict[str, Path]) -> set[str]:
    """The modules of `modules` that one import statement in module `name` loads (`from x import y` loads
    x, or x.y when y is a module)."""
    if isinstance(node, ast.Import):
        wanted = [a.name for a in node.names]
    else:
        if node.level:
            base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            where = ".".join(base + ([node.module] if node.module else []))
        else:
            where = node.module or ""
        wanted = [f"{where}.{a.name}" if f"{where}.{a.name}" in modules else where for a in node.names]
    found = set()
    for target in wanted:
        while target and target not in modules:  # `import a.b.c` loads a.b.c; a name inside it means the module
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, anywhere in its source."""
    modules = _modules(root, package)
    graph = {}
    for name, path in modules.items():
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name] |= _targets(name, path, node, modules)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of `graph` outside KNOWN_CIRCLES, each as [a, b, ..., a] (a imports b ...): `graphlib`
    finds one, its imports are taken out, and the search goes on until none is left."""
    graph = {k: set(v) for k, v in graph.items()}
    found = []
    while True:
        try:
            graphlib.TopologicalSorter(graph).prepare()
            return found
        except graphlib.CycleError as e:
            cycle = e.args[1][::-1]  # [a, b, ..., a]: graphlib lists each module before its importer
            if frozenset(cycle) not in KNOWN_CIRCLES:
                found.append(cycle)
            for importer, imported in zip(cycle, cycle[1:]):
                graph[importer].discard(imported)


def test_the_engine_has_no_import_circle():
    graph = import_graph(ENGINE, PACKAGE)
    assert f"{PACKAGE}.integrate" in graph and f"{PACKAGE}.agents.llm" in graph  # the whole engine was read
    found = circles(graph)
    assert not found, "engine modules import each other in a circle (" + "; ".join(
        " -> ".join(m.removeprefix(PACKAGE + ".") for m in c) for c in found) + ")"


def test_a_circle_hidden_inside_a_function_is_found(tmp_path):
    """The check itself: a circle closed by an import inside a function, through `from . import`, an
    absolute `import` and a subpackage's `from ..`, is reported; the same modules without it are not."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("import pkg.sub.c\n")
    (pkg / "sub" / "c.py").write_text("def f():\n    from ..a import name\n    return name\n")
    graph = import_graph(pkg, "pkg")
    assert graph["pkg.a"] == {"pkg.b"} and graph["pkg.b"] == {"pkg.sub.c"} and graph["pkg.sub.c"] == {"pkg.a"}
    assert [sorted(c) for c in circles(graph)] == [sorted(["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"])]
    (pkg / "sub" / "c.py").write_text("def f():\n    return 1\n")
    assert circles(import_graph(pkg, "pkg")) == []
