"""mkdocs hook: write the command-line reference from the ``regimes`` command's own help.

A page holding the line ``<!-- cli-reference -->`` gets, in its place, the output of
``regimes --help`` and of ``regimes COMMAND --help`` for every command that the top-level
help lists, so the page cannot fall behind the code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

MARKER = "<!-- cli-reference -->"
_COMMAND = re.compile(r"^    ([a-z][a-z0-9-]*)\s", re.MULTILINE)


def _help(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "88"}
    done = subprocess.run(
        [sys.executable, "-m", "regimes", *args, "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return done.stdout.rstrip()


def _reference() -> str:
    top = _help()
    commands = _COMMAND.findall(top.split("COMMAND", 2)[-1].split("options:")[0])
    if not commands:
        raise RuntimeError("no commands found in `regimes --help`")
    parts = ["## regimes", "", "```text", top, "```"]
    for command in commands:
        parts += ["", f"## regimes {command}", "", "```text", _help(command), "```"]
    return "\n".join(parts)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the marker line with the generated reference."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, _reference())
