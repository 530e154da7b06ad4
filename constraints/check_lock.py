"""Check that the lock pins every package installed in this environment.

Usage: ``python constraints/check_lock.py constraints/lock.txt`` (exit 1 with the
unpinned or differently installed packages listed).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main(lock: str) -> int:
    """Compare the installed distributions with the pins of ``lock``."""
    pins = {}
    for line in Path(lock).read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split(";")[0].strip().split("==")
            pins[_canonical(name)] = version
    problems = []
    for dist in metadata.distributions():
        name = _canonical(dist.metadata["Name"])
        if name in {"regimes", "pip", "setuptools", "wheel"}:
            continue
        version = dist.version.split("+")[0]
        if name not in pins:
            problems.append(f"{name}=={dist.version} is installed but not in the lock")
        elif pins[name] != version:
            problems.append(f"{name}=={dist.version} is installed, the lock says {pins[name]}")
    for problem in sorted(problems):
        print(problem)
    if problems:
        print(f"{lock} is stale: run `make lock` and commit it")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
