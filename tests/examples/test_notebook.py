"""examples/quickstart.ipynb runs from top to bottom, and is committed with its outputs.

The notebook is executed by nbclient in a kernel of this test's own Python: the test
writes a kernel spec (``python -m ipykernel_launcher``) into a temporary Jupyter path,
so it needs no kernel installed anywhere. The committed copy keeps its outputs, so that
it reads on GitHub: every code cell has them, and every chart has a PNG copy next to
its Vega-Lite spec. To refresh them after a change, run this file:

    python tests/examples/test_notebook.py
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "examples" / "quickstart.ipynb"
KERNEL = "regimes-quickstart"
VEGALITE = "application/vnd.vegalite.v6+json"


def _kernel_spec(home: Path) -> None:
    """A kernel spec running ``python -m ipykernel_launcher`` with this Python."""
    folder = home / "kernels" / KERNEL
    folder.mkdir(parents=True, exist_ok=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "regimes (tests)",
        "language": "python",
        "env": {"PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    }
    (folder / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")


@contextlib.contextmanager
def _jupyter_home(home: Path) -> Iterator[None]:
    """Jupyter's paths (kernel specs, connection files, IPython's profile) under ``home``."""
    names = ("JUPYTER_PATH", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR")
    saved = {name: os.environ.get(name) for name in names}
    os.environ.update({name: str(home) for name in names})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def execute(home: Path) -> Any:
    """The notebook, executed from the repository root in a fresh kernel."""
    _kernel_spec(home)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook, kernel_name=KERNEL, timeout=180, resources={"metadata": {"path": str(REPO)}}
    )
    with _jupyter_home(home):
        client.execute()
    return notebook


def _text(cell: Any) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream":
            parts.append(output.get("text", ""))
        parts.append(str(output.get("data", {}).get("text/plain", "")))
    return "".join(parts)


def _charts(cells: list[Any]) -> list[dict[str, Any]]:
    return [
        output["data"]
        for cell in cells
        for output in cell.get("outputs", [])
        if VEGALITE in output.get("data", {})
    ]


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return execute(tmp_path_factory.mktemp("jupyter"))


def test_notebook_runs_and_finds_the_published_spike(executed):
    code = [c for c in executed.cells if c.cell_type == "code"]
    text = "".join(_text(c) for c in code)
    assert "512" in text and "624" in text and "appeared" in text
    findings = _text(code[-1])
    assert findings.startswith("latency at budgets 512..624 is 10.")
    assert "recovers at 640" in findings
    charts = _charts(code)
    assert len(charts) == 6  # detection x2, speedup x2, backends, runs
    for data in charts:
        assert data["image/png"] and data[VEGALITE]["description"]


def test_committed_notebook_reads_without_running(executed):
    committed = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in committed.cells if c.cell_type == "code"]
    fresh = [c for c in executed.cells if c.cell_type == "code"]
    shown = [bool(c.get("outputs")) for c in code]
    assert shown == [bool(c.get("outputs")) for c in fresh], "run this file to refresh outputs"
    assert sum(shown) >= len(code) - 1  # only the setup cell is silent
    assert len(_charts(code)) == len(_charts(fresh))
    assert _text(code[-1]) == _text(fresh[-1]), "the findings changed: refresh the outputs"


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as home:
        nbformat.write(execute(Path(home)), NOTEBOOK)
    print(f"wrote {NOTEBOOK}")
