"""The benchmarks' output files: each run's figures as JSON under ``bench/results/``.

A benchmark collects its figures in a :class:`Record` as it prints them, and
:meth:`Record.write` saves them as ``bench/results/NAME.json`` (or ``--out``): one
object ``{"meta": {...}, "rows": [...]}``, the format of ``trust.json``, from which
``docs/hooks.py`` writes the validation page, so that no figure there is typed by hand.

Every row has ``section`` (a scenario, a design, a step) and ``metric`` and a ``value``.
A rate also has ``hits``, ``n`` and its 95 % Clopper-Pearson ``low`` and ``high``; a
measured quantity has its ``unit`` and, where the benchmark gives one, ``low`` and
``high`` (an interval or a spread, as the metric's name says). ``meta`` holds the
command line, the commit of the checkout (``+changes`` when ``regimes/`` differs from
it), the machine, the options and the seconds the run took.

Run a benchmark with ``--out PATH`` to write elsewhere (a quick run, a test).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statsmodels.stats.proportion import proportion_confint

RESULTS = Path(__file__).resolve().parent / "results"
"""Where the benchmarks' JSON files go."""

Row = dict[str, Any]


def commit() -> str:
    """Return the checkout's short commit, ``+changes`` when its ``regimes/`` is dirty.

    A copy of the tree without its git folder (a benchmark run on another machine) takes
    the commit from ``REGIMES_BENCH_COMMIT``, which whoever copied the tree sets.
    """
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists() and os.environ.get("REGIMES_BENCH_COMMIT"):
        return os.environ["REGIMES_BENCH_COMMIT"]

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "regimes") else "")


def clopper_pearson(hits: int, n: int) -> tuple[float, float]:
    """Return the 95 % Clopper-Pearson interval of ``hits / n`` (``n`` > 0)."""
    low, high = proportion_confint(hits, n, alpha=0.05, method="beta")
    return float(low), float(high)


@dataclass
class Record:
    """The figures of one benchmark run, collected as they are printed.

    Parameters
    ----------
    name : str
        The file's name without ``.json`` (``accuracy``, ``speed``, ...).
    options : dict
        The run's options (its parsed arguments), kept in ``meta``.
    """

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)

    def rate(self, section: str, metric: str, hits: int, n: int) -> str:
        """Record the rate ``hits / n`` with its interval; return it as text.

        The text reads ``0.050  (5/100; 95% CI 0.016-0.113)``, or ``-  (0/0)`` when
        nothing was counted (then ``value`` is null).
        """
        row: Row = dict(section=section, metric=metric, value=None, low=None, high=None)
        row.update(hits=int(hits), n=int(n))
        self.rows.append(row)
        if not n:
            return "-  (0/0)"
        row["low"], row["high"] = clopper_pearson(int(hits), int(n))
        row["value"] = hits / n
        return f"{hits / n:.3f}  ({hits}/{n}; 95% CI {row['low']:.3f}-{row['high']:.3f})"

    def value(
        self,
        section: str,
        metric: str,
        value: float | None,
        *,
        unit: str = "",
        low: float | None = None,
        high: float | None = None,
        n: int | None = None,
    ) -> float | None:
        """Record a measured quantity (and its interval or spread); return ``value``."""
        row: Row = dict(section=section, metric=metric, value=_number(value), unit=unit)
        row.update(low=_number(low), high=_number(high), n=n)
        self.rows.append(row)
        return value

    def section(self, name: str) -> Section:
        """Return a writer of one section's printed lines, each figure recorded."""
        return Section(self, name)

    def meta(self) -> dict[str, Any]:
        """Return the provenance of the run: command, commit, machine, options, seconds."""
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        return dict(
            command="python " + " ".join(["bench/" + Path(sys.argv[0]).name, *sys.argv[1:]]),
            commit=commit(),
            machine=platform.platform(),
            cpu=platform.processor() or platform.machine(),
            cpu_count=os.cpu_count(),
            load_average=None if load is None else round(load, 2),
            python=platform.python_version(),
            options={k: _plain(v) for k, v in self.options.items()},
            seconds=round(time.perf_counter() - self.started, 1),
        )

    def write(self, path: Path | None = None, *, partial: bool = False) -> Path | None:
        """Write ``{"meta", "rows"}`` to ``path`` (default ``bench/results/NAME.json``).

        The file is replaced atomically (a temporary file, then a rename). A ``partial``
        run (some sections left out) is written only to a ``path`` given, so that it
        never replaces the full figures the docs are written from.
        """
        if partial and path is None:
            print("a partial run: not written (pass --out PATH to keep its figures)")
            return None
        target = Path(path) if path is not None else RESULTS / f"{self.name}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(dict(meta=self.meta(), rows=self.rows), indent=1, allow_nan=False)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text + "\n")
        tmp.replace(target)
        print(f"written to {target}")
        return target


@dataclass(frozen=True)
class Section:
    """One section of a benchmark's output: lines ``  metric: figure``, each recorded."""

    record: Record
    name: str

    def rate(self, metric: str, hits: int, n: int) -> str:
        """Record a rate and return its printed line."""
        return f"  {metric}: {self.record.rate(self.name, metric, hits, n)}"

    def value(self, metric: str, value: float | None, text: str, **details: Any) -> str:
        """Record a quantity (see :meth:`Record.value`) and return ``  metric: text``."""
        self.record.value(self.name, metric, value, **details)
        return f"  {metric}: {text}"


def _number(value: float | None) -> float | None:
    """Return a float for JSON: ``None`` for a missing or non-finite value."""
    if value is None:
        return None
    value = float(value)
    return value if value == value and abs(value) != float("inf") else None


def _plain(value: Any) -> Any:
    """Return an option's value as JSON holds it (paths and other objects as text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)
