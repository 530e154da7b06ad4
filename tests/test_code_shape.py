"""The codebase's house rules, checked: short functions, and no torch in the statistics."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_CODE_LINES = 60


def _docstring_lines(node: ast.AST) -> range:
    body = getattr(node, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            return range(body[0].lineno, body[0].end_lineno + 1)
    return range(0)


def _code_lines(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    doc = _docstring_lines(node)
    counted = 0
    for number in range(node.lineno, node.end_lineno + 1):
        text = lines[number - 1].strip()
        if number in doc or not text or text.startswith("#"):
            continue
        counted += 1
    return counted


def _functions(package: str):
    for path in sorted((ROOT / package).rglob("*.py")):
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path.relative_to(ROOT), node, _code_lines(lines, node)


@pytest.mark.parametrize("package", ["regimes", "collectors"])
def test_no_function_is_longer_than_sixty_code_lines(package):
    long = [
        f"{path}:{node.lineno} {node.name} ({n} lines)"
        for path, node, n in _functions(package)
        if n > MAX_CODE_LINES
    ]
    assert not long, "functions over 60 code lines: " + ", ".join(long)


def test_the_statistics_package_never_imports_torch():
    offenders = []
    for path in sorted((ROOT / "regimes").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n == "torch" or n.startswith(("torch.", "transformers")) for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
