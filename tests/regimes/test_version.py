"""The version a run records: the installed metadata's, else the source tree's."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError
from pathlib import Path

import regimes
from regimes import _version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
DECLARED = tomllib.loads(PYPROJECT.read_text())["project"]["version"]


def _not_installed(monkeypatch):
    def missing(name):
        raise PackageNotFoundError(name)

    monkeypatch.setattr(_version, "version", missing)


def test_the_package_reports_the_declared_version():
    assert regimes.__version__ == DECLARED


def test_a_source_tree_never_installed_reads_its_pyproject(monkeypatch):
    _not_installed(monkeypatch)
    # the tree's own file, named: an installed copy (the floors' venv) sits beside none
    assert _version.project_version(PYPROJECT) == DECLARED


def test_without_metadata_or_a_regimes_pyproject_the_version_says_unknown(monkeypatch, tmp_path):
    _not_installed(monkeypatch)
    assert _version.project_version(tmp_path / "absent.toml") == _version.UNKNOWN
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "other"\nversion = "9.9"\n')
    assert _version.project_version(other) == _version.UNKNOWN
