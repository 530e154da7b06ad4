"""The fixed-width text summary of a comparison."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import polars as pl

__all__ = ["ratio_words", "summary_text"]

_LABEL = 34

_SHORT = {
    "torch_version": "torch",
    "transformers_version": "transformers",
    "os_version": "OS",
    "python_version": "Python",
}


def ratio_words(ratio: float, low: float, high: float) -> str:
    """pyperf-style ``1.15x slower [1.10, 1.21]`` (or faster: ``1/ratio``)."""
    if ratio >= 1:
        return f"{ratio:.3g}x slower [{low:.3g}, {high:.3g}]"
    return f"{1 / ratio:.3g}x faster [{1 / high:.3g}, {1 / low:.3g}]"


def _labeller(result: Any) -> Any:
    keys = pl.concat(
        [t.select(result.group_columns) for t in (result.shift, result.unmatched) if t.height]
        or [pl.DataFrame(schema={c: pl.String for c in result.group_columns})],
        how="vertical_relaxed",
    )
    varying = [c for c in result.group_columns if keys.get_column(c).n_unique() > 1]
    shown = varying or [c for c in ("model",) if c in result.group_columns]

    def label(row: dict[str, Any]) -> str:
        return ", ".join(f"{c}={row[c]}" for c in shown) or "all rows"

    return label


def _header(result: Any, width: int) -> list[str]:
    env = {r["key"]: r for r in result.environment.iter_rows(named=True)}
    p = result.params
    differ = [
        f"{_SHORT.get(k, k)} {r['base']} -> {r['new']}"
        for k, r in env.items()
        if k != "run_id" and not r["same"]
    ]
    same = [
        f"{_SHORT.get(k, k)} {r['base']}"
        for k, r in env.items()
        if k != "run_id" and r["same"] and r["base"]
    ]
    n_tests = sum(
        t.get_column(c).is_not_null().sum()
        for t, cs in (
            (result.changes, ("q_value", "boundary_q", "presence_q")),
            (result.shift, ("q_value",)),
        )
        for c in cs
    )
    tested = result.budgets.filter(pl.col("p_value").is_not_null())
    n_families = tested.select(result.group_columns).n_unique() if tested.height else 0
    unmatched = result.unmatched.get_column("run").to_list()
    lines = ["=" * width, "Run comparison".center(width), "=" * width]
    rows = [
        ("Base:", f"{p.get('base')} (run {env['run_id']['base']})"),
        ("New:", f"{p.get('new')} (run {env['run_id']['new']})"),
        ("Environment:", "; ".join(differ) if differ else "no recorded difference"),
        ("", f"same: {', '.join(same)}" if same else ""),
        ("Quantity:", f"{result.y} over {result.x}"),
        ("Matched on:", ", ".join(result.group_columns) or "nothing (one curve a run)"),
        (
            "Curves:",
            f"{result.shift.height} matched, {unmatched.count('base')} in the base run only,"
            f" {unmatched.count('new')} in the new run only",
        ),
        (
            "Tests:",
            f"Benjamini-Hochberg over {n_tests + n_families} ({n_families} for the "
            f"budgets of as many curves), alpha={p.get('alpha')}; "
            f"min_ratio={p.get('min_ratio')}; level={p.get('level')}",
        ),
    ]
    out = []
    for name, text in rows:
        wrapped = textwrap.wrap(text, width - 15) or [""]
        out += [f"{name if k == 0 else '':<15}{part}".rstrip() for k, part in enumerate(wrapped)]
    return lines + [line for line in out if line]


def _shift_lines(result: Any, label: Any) -> list[str]:
    lines = ["Shift (new / base, over the budgets outside every regime of either run)"]
    budgets = result.budgets
    if result.shift.height == 0:
        return [*lines, "  no curve measured by both runs"]
    for row in result.shift.iter_rows(named=True):
        head = f"  {label(row)[: _LABEL - 1]:<{_LABEL}}"
        if row["shift"] is None:
            lines.append(f"{head}not estimated: {row['note']}")
            continue
        if row["q_value"] is None:
            words = ratio_words(row["shift"], row["shift"], row["shift"]).split(" [")[0]
            lines.append(f"{head}{words}, not tested  ({row['n_budgets']} budgets)")
        else:
            verdict = "" if row["change"] in ("slower", "faster") else "  not significant"
            lines.append(
                f"{head}{ratio_words(row['shift'], row['shift_low'], row['shift_high'])}"
                f"  q={row['q_value']:.2g}{verdict}  ({row['n_budgets']} budgets)"
            )
        keys = {c: row[c] for c in result.group_columns}
        mine = budgets.filter(
            pl.all_horizontal([pl.col(c).eq_missing(pl.lit(v)) for c, v in keys.items()])
            if keys
            else pl.lit(True)
        ).filter(pl.col("differs").fill_null(False))
        for b in mine.iter_rows(named=True):
            ci = "" if b["ratio_low"] is None else f" [{b['ratio_low']:.3g}, {b['ratio_high']:.3g}]"
            lines.append(
                f"      departs from it at {result.x} {b[result.x]}: x{b['ratio']:.3g}{ci}, "
                f"x{b['vs_shift']:.3g} the shift (q={b['q_value']:.2g})"
            )
        if row["note"]:
            lines += _note(row["note"])
    return lines


def _regime_lines(result: Any, label: Any) -> list[str]:
    lines = ["Regimes (ratio over trend in each run; ratio of ratios new / base)"]
    if result.changes.height == 0:
        found = "none in either run" if result.shift.height else "no curve measured by both runs"
        return [*lines, f"  {found}"]
    lines.append(
        f"  {'group':<{_LABEL}}{'interval':>12}  {'status':<13}{'base':>8}{'new':>8}"
        f"{'new/base [CI]':>26}{'q':>9}"
    )
    for row in result.changes.iter_rows(named=True):
        where = f"{row['start']}..{row['end']}"
        if row["ratio_of_ratios"] is None:
            numbers = f"{'':>8}{'':>8}{'':>26}{'':>9}"
        else:
            ci = f"x{row['ratio_of_ratios']:.3g} [{row['ratio_low']:.3g}, {row['ratio_high']:.3g}]"
            numbers = (
                f"{'x' + format(row['ratio_base'], '.3g'):>8}"
                f"{'x' + format(row['ratio_new'], '.3g'):>8}{ci:>26}{row['q_value']:>9.2g}"
            )
        lines.append(
            f"  {label(row)[: _LABEL - 1]:<{_LABEL}}{where:>12}  {row['status']:<13}{numbers}"
        )
        lines += _detail(row, result.x)
    return lines


def _note(text: str, width: int = 96) -> list[str]:
    return textwrap.wrap(
        text, width, initial_indent="      note: ", subsequent_indent="            "
    )


def _detail(row: dict[str, Any], x: str) -> list[str]:
    out = []
    if row["status"] == "changed":
        out.append(
            f"      boundaries moved: {row['start_base']}..{row['end_base']} -> "
            f"{row['start_new']}..{row['end_new']} ({x} {row['start_shift']:+}, "
            f"{row['end_shift']:+}; q={row['boundary_q']:.2g})"
        )
    elif row["found_in"] == "both" and row["start_shift"] not in (0, None):
        out.append(
            f"      bounds {row['start_base']}..{row['end_base']} -> "
            f"{row['start_new']}..{row['end_new']}: no significant move"
        )
    if row["status"] in ("vanished", "appeared") and row["power"] is not None:
        out.append(f"      power of the run lacking it there: {row['power']:.2f}")
    if row["note"]:
        out += _note(row["note"])
    return out


def summary_text(result: Any, width: int) -> str:
    """Write the summary: header, shifts, regimes, curves in one run only, untested."""
    label = _labeller(result)
    rule = "-" * width
    lines = _header(result, width)
    lines += [rule, *_shift_lines(result, label), rule, *_regime_lines(result, label)]
    tail: Sequence[dict[str, Any]] = result.unmatched.to_dicts()
    if tail:
        lines += [rule, "Curves in one run only"]
        lines += [f"  {label(r)}: {r['run']} run ({r['n_budgets']} budgets)" for r in tail]
    other = result.untested.filter(~pl.col("reason").str.contains("run only"))
    if other.height:
        lines += [rule, "Not testable"]
        lines += [f"  {label(r)}: {r['reason']}" for r in other.iter_rows(named=True)]
    lines.append("=" * width)
    return "\n".join(lines)
