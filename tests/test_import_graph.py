"""No import cycles among GraniKV's modules: a static walk of every import statement.

Every ``import`` / ``from ... import`` in granikv_engine, granikv_platform and
granikv_agents counts, wherever it sits (module level, inside a function, under
``TYPE_CHECKING``): a cycle hidden behind a lazy import is still a cycle between the ideas
of two modules. ``from pkg import name`` points at ``pkg.name`` when that is a module of
ours, else at ``pkg`` itself. Importing a submodule does not count as importing its
parent package (Python runs the parent's ``__init__`` first, but that is not a
dependency one module chose). Nothing is imported, so the walk needs no vLLM or Ray.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOTS = {  # package -> the folder that holds it
    "granikv_engine": REPO,
    "granikv_platform": REPO / "platform",
    "granikv_agents": REPO / "agents",
}

Graph = dict[str, set[str]]


def module_files() -> dict[str, Path]:
    """Every module of the three packages, by dotted name (a package by its __init__)."""
    found: dict[str, Path] = {}
    for package, root in ROOTS.items():
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imported_names(module: str, path: Path, modules: set[str]) -> set[str]:
    """Dotted names that ``module`` imports, relative imports resolved; ``from pkg import
    x`` names ``pkg.x`` when that is one of ``modules``, else ``pkg``."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                drop = node.level - 1 if is_package else node.level
                anchor = anchor[: len(anchor) - drop]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                names.add(sub if sub in modules else base)
    return names


def import_graph(files: dict[str, Path]) -> Graph:
    """module -> the modules of ours it imports (a name counts as its nearest module)."""
    graph: Graph = {}
    for module, path in files.items():
        targets: set[str] = set()
        for name in imported_names(module, path, set(files)):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_walk_sees_every_package_and_its_imports() -> None:
    files = module_files()
    graph = import_graph(files)
    assert {m.split(".")[0] for m in files} == set(ROOTS)
    assert "granikv_engine.hot_pool" in graph["granikv_engine.prefix_registry"]
    assert "granikv_platform.routes.openai" in graph["granikv_platform.routes.teams"]
    assert "granikv_platform.builder" in graph["granikv_platform.cli"]  # inside a function
    assert "granikv_platform.ingress_api" in graph["granikv_platform.deps"]


def test_imported_names_resolves_relative_and_from_imports(tmp_path: Path) -> None:
    path = tmp_path / "mod.py"
    path.write_text("from . import sibling\nfrom .sub import name\nimport os.path\n"
                    "def f():\n    from pkg import thing\n")
    modules = {"pkg", "pkg.mod", "pkg.sibling", "pkg.sub"}
    assert imported_names("pkg.mod", path, modules) == {
        "pkg.sibling", "pkg.sub", "os.path", "pkg"}


def test_cycles_finds_a_cycle_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def package_graph(graph: Graph) -> Graph:
    """granikv_engine / granikv_platform / granikv_agents -> the others it imports."""
    out: Graph = {package: set() for package in ROOTS}
    for module, targets in graph.items():
        top = module.split(".")[0]
        out[top] |= {t.split(".")[0] for t in targets} - {top}
    return out


def test_no_import_cycles_between_modules() -> None:
    found = cycles(import_graph(module_files()))
    assert found == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_packages_depend_one_way() -> None:
    """The engine needs neither service layer; the agents build on the platform."""
    packages = package_graph(import_graph(module_files()))
    assert packages["granikv_engine"] == set()
    assert "granikv_agents" not in packages["granikv_platform"]
    assert cycles(packages) == []

