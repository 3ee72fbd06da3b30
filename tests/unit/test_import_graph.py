"""No import cycles among Seine's own modules, lazy imports (inside functions) and
TYPE_CHECKING ones included: a module that needs another's name at run time imports
it, and the graph stays a DAG a reader can follow from topology/ down."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("streams", "topology", "bench")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            for target in targets:
                owner = _owner(target, modules)
                if owner is not None and owner != name and not name.startswith(owner + "."):
                    graph[name].add(owner)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
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
    return found


def test_the_detector_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 50  # it found the code
    assert cycles(graph) == []


#: What each package may import, as its `__init__` says: the Seine packages it may
#: reach (besides itself) and the libraries it must not. Lazy imports count.
KAFKA_AND_FAUST = {"faust", "mode", "aiokafka", "confluent_kafka"}
RULES: dict[str, tuple[set[str], set[str]]] = {
    "streams.core": (set(), KAFKA_AND_FAUST | {"aiohttp", "rocksdict"}),
    "streams.codec": ({"streams.core"}, KAFKA_AND_FAUST | {"aiohttp", "rocksdict"}),
    "streams.store": ({"streams.core"}, KAFKA_AND_FAUST | {"aiohttp"}),
    "streams.fetch": ({"streams.core"}, KAFKA_AND_FAUST | {"rocksdict"}),
    "streams.tables": ({"streams.core", "streams.store"}, {"aiohttp", "confluent_kafka"}),
    "streams.web": (
        {"topology", "streams.settings", "streams.core", "streams.kafka", "streams.index"},
        set(),
    ),
    "streams.index": ({"streams.core"}, KAFKA_AND_FAUST | {"aiohttp", "rocksdict"}),
    "streams.demo": (set(), KAFKA_AND_FAUST | {"rocksdict"}),
}


def imported_names(path: Path) -> set[str]:
    """Every absolute module name `path` imports, at the top or lazily."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def rule_breaks(package: str, allowed: set[str], forbidden: set[str]) -> list[str]:
    breaks = []
    for name, path in _modules().items():
        if name != package and not name.startswith(package + "."):
            continue
        for target in sorted(imported_names(path)):
            top = target.partition(".")[0]
            ours = top in ("streams", "topology")
            reachable = any(
                target == ok or target.startswith(ok + ".") for ok in {package, *allowed}
            )
            if top in forbidden or (ours and not reachable):
                breaks.append(f"{name} imports {target}")
    return breaks


def test_the_rule_check_sees_a_break() -> None:
    assert rule_breaks("streams.codec", set(), set())  # codec.seeds imports core
    assert rule_breaks("streams.fetch", {"streams.core"}, {"aiohttp"})


@pytest.mark.parametrize("package", sorted(RULES))
def test_each_package_imports_what_its_init_allows(package: str) -> None:
    allowed, forbidden = RULES[package]
    assert rule_breaks(package, allowed, forbidden) == []
