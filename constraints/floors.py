"""Write the pip constraints that install the analysis package at its floors.

Usage: ``python constraints/floors.py pyproject.toml constraints/lock.txt > floors.txt``

Every ``name>=version`` in ``[project].dependencies`` becomes ``name==version`` (with its
environment marker), so that ``pip install -c floors.txt .`` proves the floors honest.
The test tools (the ``test`` extra) are taken at their locked versions: their floors are
not the package's promise.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9._-]+)(\[[^\]]*\])?\s*([^;]*?)\s*(;.*)?$")


def _name(requirement: str) -> str:
    match = _REQUIREMENT.match(requirement)
    if match is None:
        raise SystemExit(f"cannot read requirement {requirement!r}")
    return match.group(1).lower().replace("_", "-")


def floor_pins(dependencies: list[str]) -> list[str]:
    """Turn each ``name>=version`` requirement into ``name==version``."""
    pins = []
    for requirement in dependencies:
        match = _REQUIREMENT.match(requirement)
        assert match is not None
        name, spec, marker = match.group(1), match.group(3), match.group(4) or ""
        floor = re.search(r">=\s*([^,\s]+)", spec)
        if floor is None:
            raise SystemExit(f"{requirement!r} has no '>=' floor: every dependency needs one")
        pins.append(f"{name}=={floor.group(1)}{marker}")
    return pins


def locked_pins(lock: Path, names: set[str]) -> list[str]:
    """Return the lines of ``lock`` that pin one of ``names``."""
    pins = []
    for line in lock.read_text().splitlines():
        if "==" in line and not line.startswith("#") and _name(line.split("==")[0]) in names:
            pins.append(line.strip())
    return pins


def main(pyproject: str, lock: str) -> None:
    """Print the floors of the dependencies and the locked test tools."""
    project = tomllib.loads(Path(pyproject).read_text())["project"]
    test_tools = {_name(r) for r in project["optional-dependencies"]["test"]}
    lines = floor_pins(project["dependencies"]) + locked_pins(Path(lock), test_tools)
    print("\n".join(lines))


if __name__ == "__main__":
    main(*sys.argv[1:])
