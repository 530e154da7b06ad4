"""The codebase's house rules, checked.

Short functions and files; no torch in the statistics; every layer imports only the
layers below it: no import cycle among the modules of ``regimes`` and ``collectors``,
and the statistics never import the measurement package, except where the command line
wires the two together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("regimes", "collectors")
MAX_CODE_LINES = 60
MAX_FILE_LINES = 600


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


@pytest.mark.parametrize("package", PACKAGES)
def test_no_file_is_longer_than_six_hundred_lines(package):
    long = [
        f"{path.relative_to(ROOT)} ({n} lines)"
        for path in sorted((ROOT / package).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_FILE_LINES
    ]
    assert not long, f"files over {MAX_FILE_LINES} lines: " + ", ".join(long)


# --- the import graph -------------------------------------------------------------------
#
# Every import counts, at module level or inside a function: a lazy import still ties
# the two modules together. Imports under ``if TYPE_CHECKING:`` do not: they never run,
# and type checkers resolve cycles among annotations. ``from package import name``
# depends on the submodule ``package.name`` when there is one, else on the package;
# the parent packages that Python initialises on the way are not counted (every module
# would then depend on its package's ``__init__``).


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _imported_names(node: ast.AST, package: str):
    """Yield ``(line, inside a function, dotted name)`` of every import that runs."""

    def walk(parent: ast.AST, in_function: bool):
        for child in ast.iter_child_nodes(parent):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    yield from walk(other, in_function)
                continue
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                yield from ((child.lineno, in_function, a.name) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, *([child.module] if child.module else [])])
                for alias in child.names:
                    yield child.lineno, in_function, f"{base}.{alias.name}"
            yield from walk(child, inner)

    yield from walk(node, False)


def _import_graph() -> dict[str, dict[str, tuple[int, bool]]]:
    """Each module's imports of the two packages' modules: ``{target: (line, lazy)}``."""
    modules = _modules()
    graph: dict[str, dict[str, tuple[int, bool]]] = {name: {} for name in modules}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        for line, lazy, dotted in _imported_names(ast.parse(path.read_text()), package):
            target = dotted
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].setdefault(target, (line, lazy))
    return graph


def _cycles(graph: dict[str, dict[str, tuple[int, bool]]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while (member := stack.pop()) != node:
                component.append(member)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_the_modules_of_either_package():
    graph = _import_graph()
    described = []
    for component in _cycles(graph):
        edges = [
            f"{a}:{graph[a][b][0]} -> {b}" for a in component for b in graph[a] if b in component
        ]
        described.append("; ".join(edges))
    assert not described, "import cycles: " + " | ".join(described)


def test_the_statistics_never_import_the_collectors():
    graph, modules = _import_graph(), _modules()
    offenders = []
    for name, targets in graph.items():
        if not name.startswith("regimes"):
            continue
        path = modules[name][0].relative_to(ROOT).as_posix()
        for target, (line, _) in targets.items():
            if target.split(".")[0] == "collectors":
                offenders.append(f"{path}:{line} imports {target}")
    assert not offenders, offenders


def test_the_import_graph_sees_lazy_imports_and_cycles():
    """The checks above would pass vacuously on a graph that missed function imports."""
    graph = _import_graph()
    assert graph["collectors.refine_command"]["collectors.refine"][1]  # inside a method
    assert _cycles({"a": {"b": (1, False)}, "b": {"a": (1, True)}, "c": {}}) == [["a", "b"]]
