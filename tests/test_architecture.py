"""The tree is the architecture (README, "Architecture"): `app/`'s root holds only the
composition root and the entry points, the graph of its top-level packages has no cycle, and
the SDK (`sdk/shellgate/`) imports nothing of the server."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "app"
SDK = REPO / "sdk"
ROOT_MODULES_MAX = 8


def _imported_modules(path: Path) -> set[str]:
    """Every absolute module a file imports, wherever the import stands (a function-local or
    TYPE_CHECKING import is a dependency too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "app":
                found.update(f"app.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return found


def package_graph() -> dict[str, set[str]]:
    """Top-level package of `app/` → the top-level packages it imports from. Root modules
    (the composition root and the entry points) are not nodes: they may import anything."""
    packages = {p.name for p in APP.iterdir() if (p / "__init__.py").is_file()}
    graph: dict[str, set[str]] = defaultdict(set)
    for path in APP.rglob("*.py"):
        parts = path.relative_to(APP).parts
        if len(parts) == 1:
            continue
        source = parts[0]
        for module in _imported_modules(path):
            names = module.split(".")
            if names[0] == "app" and len(names) > 1 and names[1] in packages - {source}:
                graph[source].add(names[1])
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    on_path: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str] | None:
        on_path.append(node)
        for target in sorted(graph.get(node, ())):
            if target in on_path:
                return [*on_path[on_path.index(target) :], target]
            if target not in done and (cycle := visit(target)):
                return cycle
        on_path.pop()
        done.add(node)
        return None

    for node in sorted(graph):
        if node not in done and (cycle := visit(node)):
            return cycle
    return None


def test_app_root_holds_only_the_composition_root_and_entry_points() -> None:
    modules = sorted(p.name for p in APP.glob("*.py"))
    assert len(modules) <= ROOT_MODULES_MAX, modules


def test_the_graph_of_app_packages_has_no_cycle() -> None:
    graph = package_graph()
    assert "executions" in graph["api"]  # the graph is read, not empty
    assert find_cycle(graph) is None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


def test_the_sdk_imports_nothing_of_the_server() -> None:
    modules = {
        str(path.relative_to(SDK)): _imported_modules(path)
        for path in (SDK / "shellgate").rglob("*.py")
    }
    assert "httpx" in modules["shellgate/async_client.py"]  # the imports are read
    server = {
        path: sorted(m for m in found if m == "app" or m.startswith("app."))
        for path, found in modules.items()
    }
    assert {path: found for path, found in server.items() if found} == {}
