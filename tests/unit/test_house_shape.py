"""The house stays readable: no module of streams/, topology/ or bench/ over 600 lines,
no function over 100 (ruff's C901/PLR0912/PLR0915 bound complexity, not length)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100


def _sources() -> list[Path]:
    return sorted(p for d in ("streams", "topology", "bench") for p in (ROOT / d).rglob("*.py"))


def long_functions(tree: ast.AST) -> list[tuple[str, int]]:
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_the_check_sees_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert long_functions(ast.parse(f"def f():\n{body}\n")) == [("f", MAX_FUNCTION_LINES + 1)]


def test_no_module_over_600_lines() -> None:
    sources = _sources()
    assert len(sources) > 100  # it found the code
    too_long = {
        str(p.relative_to(ROOT)): n
        for p in sources
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert too_long == {}


def test_no_function_over_100_lines() -> None:
    found = {
        str(p.relative_to(ROOT)): long
        for p in _sources()
        if (long := long_functions(ast.parse(p.read_text(encoding="utf-8"))))
    }
    assert found == {}
