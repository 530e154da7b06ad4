"""The project's version: the installed distribution's, else the source tree's.

A run records the version that measured it (``meta.json``) and the report prints the
one that analysed it. Installed (``pip install``, editable or not), the distribution's
metadata says it. Run from a source tree that was never installed (a checkout on
``PYTHONPATH``, a copy on a measurement machine), there is no metadata, and the version
is read from the tree's ``pyproject.toml`` instead of being recorded as a placeholder.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = ["UNKNOWN", "project_version"]

UNKNOWN = "0+unknown"
"""The version when neither the metadata nor a ``pyproject.toml`` says (PEP 440 local)."""

_PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def project_version(pyproject: Path = _PYPROJECT) -> str:
    """Return the version of ``regimes`` that is running.

    Parameters
    ----------
    pyproject : pathlib.Path, default the source tree's ``pyproject.toml``
        Read when the distribution is not installed.

    Returns
    -------
    str
        The installed distribution's version; else the ``[project]`` version of
        ``pyproject`` when it names ``regimes``; else :data:`UNKNOWN`.

    Examples
    --------
    >>> project_version() != UNKNOWN  # installed, or run from the repository
    True
    """
    try:
        return version("regimes")
    except PackageNotFoundError:
        pass
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return UNKNOWN
    if project.get("name") != "regimes" or not isinstance(project.get("version"), str):
        return UNKNOWN  # another project's file, or a dynamic version
    return str(project["version"])
