"""The codebase's house rules, checked.

Short functions and files; no torch in the statistics; every layer imports only the
layers below it: no import cycle among the modules of ``regimes`` and ``collectors``,
and the statistics never import the measurement package, except where the command line
wires the two together; the charts run no analysis. Every result's text comes from one
summary builder, every group label from one labeller, every old name through one
deprecation helper; the README's Layout names every module, and every module path the
README and the docs mention exists. (That ``regimes report --baseline`` detects each run
once is counted in tests/regimes/test_analysis.py.)
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
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


# --- one summary builder, one labeller, renames through deprecation ----------------------

SUMMARY_BUILDER = Path("regimes/_summary.py")
LABELS = Path("regimes/_labels.py")


def _regimes_trees():
    for path in sorted((ROOT / "regimes").rglob("*.py")):
        yield path.relative_to(ROOT), ast.parse(path.read_text())


def _body(node: ast.FunctionDef) -> list[ast.stmt]:
    """A function's statements without its docstring."""
    return node.body[1:] if _docstring_lines(node) else node.body


def test_every_summary_is_built_by_the_summary_builder():
    """``summary()`` is ``self._summary().as_text()`` wherever it is defined, the notebook
    view is the base class's, and only regimes/_summary.py lays text out in fixed width
    (rules of ``=`` or ``-``, centred titles, wrapped paragraphs)."""
    offenders = []
    for path, tree in _regimes_trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "summary":
                body = [ast.unparse(statement) for statement in _body(node)]
                if body != ["return self._summary().as_text()"]:
                    offenders.append(f"{path}:{node.lineno} summary() builds its own text")
            if isinstance(node, ast.FunctionDef) and node.name == "_repr_html_":
                if path != Path("regimes/_result.py"):
                    offenders.append(f"{path}:{node.lineno} its own _repr_html_")
            if path == SUMMARY_BUILDER or path.parts[1] == "viz":
                continue  # the charts wrap their descriptions; the builder does the rest
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Mult)
                and any(
                    isinstance(side, ast.Constant) and side.value in ("=", "-")
                    for side in (node.left, node.right)
                )
            ):
                offenders.append(f"{path}:{node.lineno} draws a rule")
            if isinstance(node, ast.Attribute) and node.attr == "center":
                offenders.append(f"{path}:{node.lineno} centres a title")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if "textwrap" in names or getattr(node, "module", None) == "textwrap":
                    offenders.append(f"{path}:{node.lineno} wraps text itself")
    assert not offenders, offenders


def _varying_columns(node: ast.AST) -> bool:
    """``[c for c in columns if <frame>.get_column(c).n_unique() > 1]`` (or ``frame[c]``)."""
    if not isinstance(node, ast.ListComp) or len(node.generators) != 1:
        return False
    target = node.generators[0].target
    for condition in node.generators[0].ifs:
        if not (isinstance(condition, ast.Compare) and isinstance(condition.left, ast.Call)):
            continue
        call = condition.left.func
        uses_target = any(
            isinstance(n, ast.Name) and isinstance(target, ast.Name) and n.id == target.id
            for n in ast.walk(condition.left)
        )
        if isinstance(call, ast.Attribute) and call.attr == "n_unique" and uses_target:
            return True
    return False


def test_groups_are_labelled_in_one_place():
    """Which group columns vary (else the model), and the text ``c=v, ...`` of a label,
    are written once, in regimes/_labels.py; the rule that picks the group columns of a
    trial table is written once, in regimes/data/_prepare.py."""
    offenders = []
    for path, tree in _regimes_trees():
        for node in ast.walk(tree):
            if path != LABELS and _varying_columns(node):
                offenders.append(f"{path}:{node.lineno} finds the varying columns itself")
            if path != LABELS and isinstance(node, ast.Constant) and node.value == "all rows":
                offenders.append(f"{path}:{node.lineno} writes a group label itself")
        for node in tree.body:  # module functions (a result's property reads its own)
            if (
                isinstance(node, ast.FunctionDef)
                and node.name.strip("_") == "group_columns"
                and path != Path("regimes/data/_prepare.py")
            ):
                offenders.append(f"{path}:{node.lineno} chooses group columns itself")
    assert not offenders, offenders


def test_the_labeller_check_sees_the_pattern_it_forbids():
    tree = ast.parse("[c for c in columns if frame.get_column(c).n_unique() > 1]")
    assert _varying_columns(tree.body[0].value)
    assert not _varying_columns(ast.parse("[c for c in columns if c]").body[0].value)


def _module_aliases(tree: ast.Module) -> list[tuple[int, str, str]]:
    """Public names a module binds to a class or function it defines or imports."""
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))} | {
        (a.asname or a.name).split(".")[0]
        for n in tree.body
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    found = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name)):
            continue
        for target in node.targets:
            name = getattr(target, "id", "")
            public = name and not name.startswith("_") and not name.isupper()
            if public and node.value.id in defined:
                found.append((node.lineno, name, node.value.id))
    return found


def test_old_names_go_through_deprecation():
    """No module keeps an old name as a silent alias (``Old = New``): it answers it in
    ``__getattr__`` through ``regimes._deprecation.renamed``, which warns with the
    release that removes it."""
    offenders = [
        f"{path}:{line} {old} = {new}"
        for path, tree in _regimes_trees()
        for line, old, new in _module_aliases(tree)
    ]
    assert not offenders, offenders
    assert _module_aliases(ast.parse("class New: ...\nOld = New\n_private = New")) == [
        (2, "Old", "New")
    ]


def _layout() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme.split("## Layout", 1)[1].split("```")[1]


@pytest.mark.parametrize("package", PACKAGES)
def test_the_readme_layout_names_every_public_module_and_private_package(package):
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", _layout()))
    unnamed = [
        path.name
        for path in sorted((ROOT / package).iterdir())
        if (path.suffix == ".py" and not path.name.startswith("_"))
        or (path.is_dir() and (path / "__init__.py").exists())
        if (path.stem if path.suffix == ".py" else path.name) not in words
    ]
    assert not unnamed, f"README's Layout does not name {package}/{unnamed}"


def _mentioned_names() -> set[tuple[str, str]]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    dotted = r"\b((?:regimes|collectors)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)"
    return {(name, page.name) for page in pages for name in re.findall(dotted, page.read_text())}


def test_every_module_and_name_the_readme_and_docs_mention_exists():
    has_torch = importlib.util.find_spec("torch") is not None
    missing = []
    for name, page in sorted(_mentioned_names()):
        if name.startswith("collectors") and not has_torch:
            continue  # the collectors import torch; the analysis-only environments lack it
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                found: object = importlib.import_module(".".join(parts[:i]))
                break
            except ModuleNotFoundError:
                continue
        for attribute in parts[i:]:
            found = getattr(found, attribute, None)
        if found is None:
            missing.append(f"{page}: {name}")
    assert not missing, missing
    assert len(_mentioned_names()) >= 20
