"""examples/quickstart.py runs as a user would run it, and says what it found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quickstart_runs_and_writes_its_charts(tmp_path):
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "quickstart.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "latency at budgets 512..624 is 10.8x its trend" in done.stdout
    assert "appeared" in done.stdout
    for name in ("cuda", "published", "compare", "report"):
        page = (tmp_path / f"quickstart-{name}.html").read_text(encoding="utf-8")
        assert "<script src" not in page  # offline: the libraries are inline
