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


ANALYSES = frozenset(
    {
        "analyze",
        "detect_regimes",
        "cache_speedup",
        "compare_runs",
        "refine_boundaries",
        "attribute_phases",
        "compare_backends",
        "memory_confound",
        "align_boundaries",
        "history_effect",
    }
)
"""The functions that analyse a run: the charts draw their results and never call them."""

ANALYSIS_MODULES = ("regimes.detect", "regimes.speedup", "regimes.compare", "regimes.refine")
ANALYSIS_PACKAGES = ("regimes.explain", "regimes._compare", "regimes._refine")


def _analysis_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """Each import of an analysis (function or module) and each use of an analysis's name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported = {alias.name for alias in node.names}
            module = node.module
            if module in ANALYSIS_MODULES or module.startswith(ANALYSIS_PACKAGES):
                found.append((node.lineno, f"from {module} import {', '.join(sorted(imported))}"))
            elif imported & ANALYSES:
                found.append((node.lineno, f"imports {sorted(imported & ANALYSES)}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ANALYSIS_MODULES or alias.name.startswith(ANALYSIS_PACKAGES):
                    found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.Name) and node.id in ANALYSES:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in ANALYSES:
            found.append((node.lineno, node.attr))
    return found


def test_the_charts_never_run_an_analysis():
    """Nothing under regimes/viz imports or calls an analysis; it draws their results."""
    offenders = [
        f"{path.relative_to(ROOT)}:{line} {what}"
        for path in sorted((ROOT / "regimes" / "viz").rglob("*.py"))
        for line, what in _analysis_uses(ast.parse(path.read_text()))
    ]
    assert not offenders, offenders
