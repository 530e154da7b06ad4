"""mkdocs hooks: pages written from the code's own output, so they cannot fall behind.

- A page holding the line ``<!-- cli-reference -->`` gets, in its place, the output of
  ``regimes --help`` and of ``regimes COMMAND --help`` for every command that the
  top-level help lists.
- A page holding ``<!-- validation-tables -->`` gets the tables of the benchmark results
  that ``bench/`` wrote under ``bench/results/`` (``trust.json``, and beside it the
  saved run of the code before the current model, ``trust-before.json``): no figure on
  it is typed by hand.
- A line ``<!-- bench-output NAME -->`` gets the text that a benchmark printed and that
  was saved as ``bench/results/NAME``, verbatim.
- A line ``<!-- bench-table NAME -->`` gets the figures a benchmark wrote as
  ``bench/results/NAME.json`` (``bench/record.py``: its command, commit and machine,
  then one table row per figure), or, before the benchmark has written that file, a
  line saying which command writes it.

The README is no page of the site: its validation summary, between
``<!-- readme-validation -->`` and ``<!-- /readme-validation -->``, is written by
``python docs/hooks.py --readme`` from the same files (:func:`readme_validation`), and
the tests check that it is what they hold.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

MARKER = "<!-- cli-reference -->"
VALIDATION = "<!-- validation-tables -->"
_RESULTS = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "results"
)
_BENCH_OUTPUT = re.compile(r"^<!-- bench-output ([A-Za-z0-9_.-]+) -->$", re.MULTILINE)
_BENCH_TABLE = re.compile(r"^<!-- bench-table ([A-Za-z0-9_-]+) -->$", re.MULTILINE)
_COMMAND = re.compile(r"^    ([a-z][a-z0-9-]*)\s", re.MULTILINE)
README_BEGIN, README_END = "<!-- readme-validation -->", "<!-- /readme-validation -->"
_README_COLUMNS = (
    ("null", "any anomaly", "smooth curves with an anomaly"),
    ("anomaly", "recall", "recall"),
    ("anomaly", "bounds hold start and end", "bounds hold onset and end"),
    ("null", "spike at width-2 detectable ratio found", "found at its detectable ratio (0.8)"),
)
_COVERAGE_GOAL = 0.93


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


def _load(name: str) -> dict[str, Any] | None:
    path = os.path.join(_RESULTS, name)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        loaded: dict[str, Any] = json.load(handle)
    return loaded


def _cell(row: dict[str, Any] | None) -> str:
    if row is None or row.get("value") is None:
        return "-"
    value = f"{row['value']:.3f}" if isinstance(row["value"], float) else str(row["value"])
    if row.get("low") is not None and row.get("high") is not None:
        value += f" ({row['low']:.3f}-{row['high']:.3f})"
    return value


def _validation() -> str:
    now, before = _needed("trust.json"), _load("trust-before.json")
    old = {(r["family"], r["variant"], r["metric"]): r for r in (before or {}).get("rows", [])}
    meta = now.get("meta", {})
    lines = [
        f"`python bench/trust.py --curves {meta.get('curves')} --seed {meta.get('seed')}` "
        f"(alpha {meta.get('alpha')}, min_ratio {meta.get('min_ratio')}), code at "
        f"{meta.get('commit')}, {meta.get('seconds', 0):.0f} s.",
        "",
        "| family | variant | metric | n | this version (95 % CI) | the rule-based detection |",
        "|---|---|---|---|---|---|",
    ]
    for r in now["rows"]:
        key = (r["family"], r["variant"], r["metric"])
        lines.append(
            f"| {r['family']} | {r['variant']} | {r['metric']} | {r.get('n', '')} "
            f"| {_cell(r)} | {_cell(old.get(key))} |"
        )
    return "\n".join(lines)


def _output(match: re.Match[str]) -> str:
    path = os.path.join(_RESULTS, match.group(1))
    if not os.path.exists(path):
        raise RuntimeError(f"{path} is missing: run the benchmark that writes it")
    with open(path, encoding="utf-8") as handle:
        return "```text\n" + handle.read().rstrip() + "\n```"


def _figure(row: dict[str, Any]) -> str:
    """One figure of a results file as the page prints it: value (interval) unit."""
    value, low, high = row.get("value"), row.get("low"), row.get("high")
    if value is None:
        return "-"
    rate = "hits" in row
    text = f"{value:.3f}" if rate else f"{value:.3g}"
    if low is not None and high is not None:
        text += f" ({low:.3f}-{high:.3f})" if rate else f" ({low:.3g}-{high:.3g})"
    unit = row.get("unit") or ""
    return f"{text} {unit}".rstrip() if unit not in ("", "share") else text


def bench_table(name: str) -> str:
    """Return the page's text for ``bench/results/NAME.json`` (see the module docstring)."""
    script = name.split("-")[0]
    data = _load(f"{name}.json")
    if data is None:
        return f"Not run yet: `python bench/{script}.py` writes `bench/results/{name}.json`."
    meta = data.get("meta", {})
    lines = [
        f"`{meta.get('command')}`, code at {meta.get('commit')}, on {meta.get('cpu_count')} "
        f"CPU(s) ({meta.get('machine')}), {meta.get('seconds', 0):.0f} s. Rates are shares "
        "with their 95 % Clopper-Pearson interval.",
        "",
        "| section | figure | value | n |",
        "|---|---|---|---|",
    ]
    shown = None
    for row in data.get("rows", []):
        section = row.get("section", "")
        n = row.get("n")
        lines.append(
            f"| {section if section != shown else ''} | {row.get('metric', '')} "
            f"| {_figure(row)} | {'' if n is None else n} |"
        )
        shown = section
    return "\n".join(lines)


def _needed(name: str) -> dict[str, Any]:
    """Return ``bench/results/NAME``, or raise naming the benchmark that writes it."""
    data = _load(name)
    if data is None:
        script = name.split(".")[0].split("-")[0]
        raise RuntimeError(f"bench/results/{name} is missing: run python bench/{script}.py")
    return data


def _ratio_coverage(accuracy: dict[str, Any]) -> list[str]:
    """Sentences on the ratio intervals' coverage over every scenario of the accuracy run."""
    rows = [r for r in accuracy["rows"] if r["metric"].startswith("ratio CI covers")]
    short = [r for r in rows if r["value"] < _COVERAGE_GOAL]
    rest = [r["value"] for r in rows if r["value"] >= _COVERAGE_GOAL]
    curves = accuracy.get("meta", {}).get("options", {}).get("curves")
    where = "`bench/accuracy.py`" + (f", {curves} curves a scenario" if curves else "")
    held = f"{min(rest):.3f} to {max(rest):.3f}" if rest else "under the goal"
    text = (
        f"Ratio intervals ({where}) hold the true ratio in {held} of detections in "
        f"{len(rest)} of {len(rows)} scenarios"
    )
    below = "; ".join(f"{r['section']}: {_cell(r)}" for r in short)
    return [text + (f"; under {_COVERAGE_GOAL}: {below}." if short else ".")]


def readme_validation() -> str:
    """Return the README's validation summary, from ``bench/results``.

    Per family of ``bench/trust.py``: smooth curves with an anomaly, recall, bounds that
    hold the true onset and end, and the share of spikes planted at a curve's promised
    detectable ratio that are found (0.8 promised); the ratio intervals' coverage over
    ``bench/accuracy.py``; the speed ratio of ``bench/speed.py``.
    """
    trust, accuracy, speed = _needed("trust.json"), _needed("accuracy.json"), _needed("speed.json")
    rows = {(r["family"], r["variant"], r["metric"]): r for r in trust["rows"]}
    families = list(dict.fromkeys(r["family"] for r in trust["rows"]))
    head = [label for _, _, label in _README_COLUMNS]
    lines = [
        f"| family ({trust['meta']['curves']} curves each) | " + " | ".join(head) + " |",
        "|---" * (len(head) + 1) + "|",
    ]
    for family in families:
        cells = [
            _cell(rows.get((family, variant, metric))) for variant, metric, _ in _README_COLUMNS
        ]
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    figures = {r["metric"]: r["value"] for r in speed["rows"]}
    lines += [
        "",
        *_ratio_coverage(accuracy),
        f"Detection takes {figures['1000000 rows, 1 session x 20 trials']:.1f} s on 1M rows "
        f"(`bench/speed.py`), {figures['extrapolated / detect_regimes']:.1f} times faster than "
        "a per-cell bootstrap and Pelt in the same run.",
    ]
    return "\n".join(lines)


def write_readme(path: str) -> bool:
    """Write :func:`readme_validation` between the README's markers; return whether it changed."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    before, rest = text.split(README_BEGIN + "\n", 1)
    _, after = rest.split(README_END, 1)
    new = before + README_BEGIN + "\n" + readme_validation() + "\n" + README_END + after
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(new)
    return new != text


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each marker line with what it stands for."""
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, _reference())
    if VALIDATION in markdown:
        markdown = markdown.replace(VALIDATION, _validation())
    markdown = _BENCH_TABLE.sub(lambda match: bench_table(match.group(1)), markdown)
    return _BENCH_OUTPUT.sub(_output, markdown)


if __name__ == "__main__":
    if sys.argv[1:] != ["--readme"]:
        raise SystemExit("usage: python docs/hooks.py --readme")
    readme = os.path.join(os.path.dirname(_RESULTS), os.pardir, "README.md")
    print("README.md", "written" if write_readme(os.path.normpath(readme)) else "unchanged")
