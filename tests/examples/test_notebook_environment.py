"""The environment `make install` builds can open and export the quickstart notebook.

The `notebook` extra (JupyterLab, nbconvert) is part of the development environment, and
`make notebook` opens the quickstart in JupyterLab.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the tomli backport, as pyproject.toml names it
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]


def test_the_notebook_extra_is_installed_by_make_install():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    notebook = extras["optional-dependencies"]["notebook"]
    assert {r.split(">=")[0] for r in notebook} == {"jupyterlab", "nbconvert"}
    makefile = (REPO / "Makefile").read_text()
    (extras_line,) = [line for line in makefile.splitlines() if line.startswith("EXTRAS")]
    assert "notebook" in extras_line.split("=")[1].split(",")


def test_make_notebook_opens_the_quickstart_in_jupyterlab():
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "notebook"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    # under a parent make (CI runs `make test`) the dry run also prints directory lines
    command = "-m jupyter lab examples/quickstart.ipynb"
    assert any(command in line for line in done.stdout.splitlines()), done.stdout
    version = subprocess.run(
        [sys.executable, "-m", "jupyter", "lab", "--version"], capture_output=True, text=True
    )
    assert version.returncode == 0 and version.stdout.strip().startswith("4.")


def test_nbconvert_exports_the_quickstart(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter",
            "nbconvert",
            "--to",
            "html",
            "--output-dir",
            str(tmp_path),
            str(REPO / "examples" / "quickstart.ipynb"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "regimes" in (tmp_path / "quickstart.html").read_text()
