"""The summary of a comparison, built with :class:`regimes._summary.Summary`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import polars as pl

from regimes._labels import label_columns, text_label
from regimes._summary import Column, Summary

__all__ = ["comparison_summary", "ratio_words"]

Label = Callable[[dict[str, Any]], str]

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


def _labeller(result: Any) -> Label:
    keys = pl.concat(
        [t.select(result.group_columns) for t in (result.shift, result.unmatched) if t.height]
        or [pl.DataFrame(schema={c: pl.String for c in result.group_columns})],
        how="vertical_relaxed",
    )
    shown = label_columns(keys, result.group_columns)

    def label(row: dict[str, Any]) -> str:
        return text_label(row, shown)

    return label


def _header(result: Any) -> list[tuple[str, str]]:
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
    return [
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


def _shift_lines(result: Any, label: Label, out: Summary) -> None:
    out.add_heading(
        "Shift (new / base, over the budgets outside every regime of either run)", below=None
    )
    if result.shift.height == 0:
        out.add_lines(["  no curve measured by both runs"])
        return
    for row in result.shift.iter_rows(named=True):
        head = f"  {label(row)[: _LABEL - 1]:<{_LABEL}}"
        if row["shift"] is None:
            out.add_lines([f"{head}not estimated: {row['note']}"])
            continue
        if row["q_value"] is None:
            words = ratio_words(row["shift"], row["shift"], row["shift"]).split(" [")[0]
            lines = [f"{head}{words}, not tested  ({row['n_budgets']} budgets)"]
        else:
            verdict = "" if row["change"] in ("slower", "faster") else "  not significant"
            lines = [
                f"{head}{ratio_words(row['shift'], row['shift_low'], row['shift_high'])}"
                f"  q={row['q_value']:.2g}{verdict}  ({row['n_budgets']} budgets)"
            ]
        out.add_lines(lines + _departures(result, row))
        if row["note"]:
            out.add_wrapped(row["note"], indent=_NOTE, subsequent=" " * len(_NOTE))


def _departures(result: Any, row: dict[str, Any]) -> list[str]:
    """Return a line per budget whose ratio departs significantly from the curve's shift."""
    keys = {c: row[c] for c in result.group_columns}
    mine = result.budgets.filter(
        pl.all_horizontal([pl.col(c).eq_missing(pl.lit(v)) for c, v in keys.items()])
        if keys
        else pl.lit(True)
    ).filter(pl.col("differs").fill_null(False))
    lines = []
    for b in mine.iter_rows(named=True):
        ci = "" if b["ratio_low"] is None else f" [{b['ratio_low']:.3g}, {b['ratio_high']:.3g}]"
        lines.append(
            f"      departs from it at {result.x} {b[result.x]}: x{b['ratio']:.3g}{ci}, "
            f"x{b['vs_shift']:.3g} the shift (q={b['q_value']:.2g})"
        )
    return lines


_NOTE = "      note: "
"""What leads a note under a row of the comparison's summary."""


def _tested(text: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
    """Return ``text`` as a cell left blank for a regime without a ratio of ratios."""
    return lambda row: "" if row["ratio_of_ratios"] is None else text(row)


def _regime_columns(label: Label) -> list[Column]:
    def ratio_ci(row: dict[str, Any]) -> str:
        return f"x{row['ratio_of_ratios']:.3g} [{row['ratio_low']:.3g}, {row['ratio_high']:.3g}]"

    return [
        Column("group", label, width=_LABEL, align="<", clip=_LABEL - 1),
        Column("interval", lambda row: f"{row['start']}..{row['end']}", width=12),
        Column("status", lambda row: str(row["status"]), width=13, align="<", gap=2),
        Column("base", _tested(lambda row: "x" + format(row["ratio_base"], ".3g")), width=8),
        Column("new", _tested(lambda row: "x" + format(row["ratio_new"], ".3g")), width=8),
        Column("new/base [CI]", _tested(ratio_ci), width=26),
        Column("q", _tested(lambda row: format(row["q_value"], ".2g")), width=9),
    ]


def _regime_lines(result: Any, label: Label, out: Summary) -> None:
    out.add_heading(
        "Regimes (ratio over trend in each run; ratio of ratios new / base)", below=None
    )
    found = "none in either run" if result.shift.height else "no curve measured by both runs"
    out.add_table(
        result.changes.iter_rows(named=True),
        _regime_columns(label),
        empty=found,
        indent="  ",
        details=lambda row: _detail(row, result.x, out),
    )


def _detail(row: dict[str, Any], x: str, out: Summary) -> list[str]:
    lines = []
    if row["status"] == "changed":
        lines.append(
            f"      boundaries moved: {row['start_base']}..{row['end_base']} -> "
            f"{row['start_new']}..{row['end_new']} ({x} {row['start_shift']:+}, "
            f"{row['end_shift']:+}; q={row['boundary_q']:.2g})"
        )
    elif row["found_in"] == "both" and row["start_shift"] not in (0, None):
        lines.append(
            f"      bounds {row['start_base']}..{row['end_base']} -> "
            f"{row['start_new']}..{row['end_new']}: no significant move"
        )
    if row["status"] in ("vanished", "appeared") and row["power"] is not None:
        lines.append(f"      power of the run lacking it there: {row['power']:.2f}")
    if row["note"]:
        lines += out.wrap(row["note"], indent=_NOTE, subsequent=" " * len(_NOTE))
    return lines


def comparison_summary(result: Any) -> Summary:
    """Build the summary: header, shifts, regimes, curves in one run only, untested."""
    label = _labeller(result)
    out = Summary().add_title("Run comparison").add_pairs(_header(result), columns=1)
    _shift_lines(result, label, out)
    _regime_lines(result, label, out)
    tail = result.unmatched.to_dicts()
    if tail:
        out.add_heading("Curves in one run only", below=None)
        out.add_rows(tail, lambda r: f"{label(r)}: {r['run']} run ({r['n_budgets']} budgets)")
    other = result.untested.filter(~pl.col("reason").str.contains("run only"))
    if other.height:
        out.add_heading("Not testable", below=None)
        out.add_untested(other, head=None, label=label)
    return out.add_rule("=")
