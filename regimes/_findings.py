"""The findings of a run in plain sentences, with their numbers: text, never a drawing.

``regimes analyze`` prints them, the HTML report and the notebook view show them, and
each result's ``_headlines`` reads them from here, so no text needs the charts package.

A finding names its group (when there are several), the quantity, the interval, the
ratio over the smooth trend with its CI, the q value, and what happens after the
interval: ``latency at budgets 512..624 is 10.8x its trend (95% CI 10.0-11.6),
q = 4e-24, and recovers at 640``. The explanations add one sentence per anomaly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from regimes._labels import (
    GROUP_FIELD,
    group_labels,
    level_text,
    optional_frame,
    quantity,
    report_axes,
    sig3,
)

_PLURAL = {"budget": "budgets", "total_tokens": "total lengths"}

SENSITIVITY_WIDTH = 2
"""The spike width, in grid budgets, whose detectable ratio the sentences quote."""

_LISTED = 10
"""Most curves of one status given a sentence each; more share one sentence."""


def labelled(
    frame: pl.DataFrame | None, group_columns: Sequence[str], labels: pl.DataFrame
) -> pl.DataFrame:
    """``frame`` with the chart's group label of each row (labels from the full curve)."""
    if frame is None or frame.height == 0:
        return pl.DataFrame(
            {GROUP_FIELD: [], "ratio": []},
            schema={GROUP_FIELD: pl.String, "ratio": pl.Float64},
        )
    keys = [c for c in group_columns if c in frame.columns]
    if not keys:
        return frame.with_columns(pl.lit("all").alias(GROUP_FIELD))
    return frame.join(labels.select([*keys, GROUP_FIELD]), on=keys, how="left", nulls_equal=True)


def span(row: dict[str, Any], x: str, *, plural: bool = True) -> str:
    """``budgets 512..624`` or ``budget 512``."""
    if row["start"] == row["end"]:
        return f"{x.replace('_', ' ')} {row['start']}"
    word = _PLURAL.get(x, x) if plural else x
    return f"{word} {row['start']}..{row['end']}"


def _bounds(row: dict[str, Any], x: str) -> str:
    """`` (onset within 496..528, end within 608..640)``: the boundaries' bootstrap bounds.

    Only a boundary whose bounds span more than its own budget is named; nothing when
    both are sharp or the row carries no bounds.
    """
    word = _PLURAL.get(x, x)
    parts = []
    for name, low, high in (("onset", "start_low", "start_high"), ("end", "end_low", "end_high")):
        if row.get(low) is not None and row.get(high) is not None and row[low] != row[high]:
            parts.append(f"{name} within {word} {row[low]}..{row[high]}")
    return f" ({', '.join(parts)})" if parts else ""


def _ci(
    row: dict[str, Any], low: str = "ratio_low", high: str = "ratio_high", joiner: str = "-"
) -> str:
    """``4.00-4.69``: an interval's ends to three digits, as the tables print them."""
    return f"{sig3(row[low])}{joiner}{sig3(row[high])}"


def _q(row: dict[str, Any]) -> str:
    q = row.get("q_value")
    if q is None:
        return ""
    # A q value that underflowed to 0 is smaller than any double can say.
    return ", q < 1e-300" if q == 0 else f", q = {q:.1g}"


def _after(curve: pl.DataFrame, group_columns: Sequence[str], x: str) -> Callable[..., str]:
    """Say what follows an interval: where it recovers, or that it stays up."""

    def describe(row: dict[str, Any]) -> str:
        mine = curve.filter(
            pl.all_horizontal([pl.col(c).eq_missing(row[c]) for c in group_columns if c in row])
        )
        later = mine.filter(pl.col(x) > row["end"])[x]
        if row.get("recovered") is False:
            return ", and stays there to the end of the grid"
        if later.len() and row.get("recovered"):
            return f", and recovers at {later.min()!s}"
        return ""

    return describe


def anomaly_findings(regimes: Any) -> list[str]:
    """One sentence per anomaly of a detection result (none: one sentence saying so)."""
    x, y, group_columns = report_axes(regimes)
    curve = regimes.curve
    labels = group_labels(curve, group_columns)[0]
    several = labels.height > 1
    level = level_text(regimes)
    after = _after(curve, group_columns, x)
    found = labelled(optional_frame(regimes, "anomalies"), group_columns, labels)
    lines = [
        (f"{row[GROUP_FIELD]}: " if several else "")
        + f"{quantity(y)} at {span(row, x)}{_bounds(row, x)} is {sig3(row['ratio'])}x "
        f"its trend ({level} CI {_ci(row)}){_q(row)}{after(row)}"
        for row in found.iter_rows(named=True)
    ]
    # a negative result is worded per curve by its sensitivity (sensitivity_findings)
    if lines or optional_frame(regimes, "sensitivity") is not None:
        return lines
    params = getattr(regimes, "params", None) or {}
    return [
        f"{quantity(y).capitalize()} follows its smooth trend in every group "
        f"({labels.height}): no interval of {_PLURAL.get(x, x)} leaves it by "
        f"x{params.get('min_ratio', '?')} or more at a false discovery rate of "
        f"{params.get('alpha', '?')}."
    ]


def sensitivity_findings(regimes: Any, meta: dict[str, Any] | None = None) -> list[str]:
    """Say what each curve's detection could have found, and how quiet its machine was.

    The one wording of a detection's sensitivity, shared by ``regimes analyze``, the
    report and the notebook view. A curve without an anomaly reads ``no anomaly; spikes
    of 1.4x or more over 2 budgets would have been found``; an inconclusive curve (its
    detectable ratio over :data:`SENSITIVITY_WIDTH` budgets above the detection's limit)
    reads ``inconclusive: only spikes of 4.2x or more over 2 budgets could have been
    found``; a curve with an anomaly says it only where it is inconclusive (``beside its
    anomaly, only spikes of ...``). Ratios are rounded up to two digits, so the
    sentence never promises more than the detection can. Then one line per hygiene
    warning the run recorded when it was collected (``meta.json``; see
    :func:`hygiene_warnings`).

    Parameters
    ----------
    regimes : RegimeResult
        The result of :func:`regimes.detect_regimes` (its ``sensitivity`` table).
    meta : dict, optional
        The run's metadata (:attr:`regimes.Run.meta`), for its hygiene warnings.

    Returns
    -------
    list of str
        One sentence per curve (one per status past :data:`_LISTED` curves), then the
        warnings; empty for a result without a sensitivity table and a quiet machine.
    """
    x, _, group_columns = report_axes(regimes)
    lines = _sensitivity_lines(regimes, x, group_columns)
    warnings = hygiene_warnings(meta or {})
    if warnings:
        lines.append(
            "measured on a machine that was not quiet, which widens what a negative result "
            "could miss: " + "; ".join(warnings)
        )
    return lines


def _sensitivity_lines(regimes: Any, x: str, group_columns: list[str]) -> list[str]:
    table = optional_frame(regimes, "sensitivity")
    if table is None or "width" not in table.columns:
        return []
    labels = group_labels(regimes.curve, group_columns)[0]
    several = labels.height > 1
    rows = labelled(table.filter(pl.col("width") == SENSITIVITY_WIDTH), group_columns, labels)
    anomalies = optional_frame(regimes, "anomalies")
    keys = [c for c in group_columns if c in rows.columns]
    if anomalies is not None and keys:
        found = anomalies.select(keys).unique()
        rows = rows.join(found.with_columns(pl.lit(True).alias("_found")), on=keys, how="left")
    else:
        rows = rows.with_columns(pl.lit(anomalies is not None).alias("_found"))
    rows = rows.with_columns(pl.col("_found").fill_null(False))
    inconclusive = pl.col("status") == "inconclusive"
    word = _PLURAL.get(x, f"{x} values")
    lines = []
    for frame, template in (
        (
            rows.filter(~inconclusive & ~pl.col("_found")),
            "no anomaly; spikes of {r} over {w} {word} would have been found",
        ),
        (
            rows.filter(inconclusive & ~pl.col("_found")),
            "inconclusive: only spikes of {r} over {w} {word} could have been found",
        ),
        (
            rows.filter(inconclusive & pl.col("_found")),
            "beside its anomaly, only spikes of {r} over {w} {word} could have been found",
        ),
    ):
        ratios = frame.get_column("detectable_ratio").to_list()
        if frame.height > _LISTED:
            low, high = _ratio_text(min(ratios)), _ratio_text(max(ratios))
            text = template.format(r=f"{low}-{high}x or more", w=SENSITIVITY_WIDTH, word=word)
            lines.append(f"{frame.height} curves: {text}")
            continue
        for row in frame.iter_rows(named=True):
            text = template.format(
                r=_at_least(row["detectable_ratio"]), w=SENSITIVITY_WIDTH, word=word
            )
            lines.append((f"{row[GROUP_FIELD]}: " if several else "") + text)
    return lines


def _at_least(ratio: float | None) -> str:
    """``4.1x or more``; ``over 10x`` past the simulated ladder's top."""
    text = _ratio_text(ratio)
    return f"{text}x" if text.startswith("over") else f"{text}x or more"


def _ratio_text(ratio: float | None) -> str:
    """Round a detectable ratio up to two significant digits: 1.326 reads ``1.4``."""
    if ratio is None or math.isnan(ratio):
        return "any"
    if math.isinf(ratio):  # no height up to the simulated ladder's top was found often enough
        return "over 10"
    digits = 1 - math.floor(math.log10(abs(ratio)))
    scaled = math.ceil(round(ratio * 10**digits, 9)) / 10**digits
    return f"{scaled:.{max(digits, 0)}f}"


def hygiene_warnings(meta: dict[str, Any]) -> list[str]:
    """Return the collection-time hygiene warnings a run's ``meta.json`` holds.

    A local sweep keeps them under ``hygiene.warnings``; a fleet sweep keeps each host's
    under ``fleet.hosts.<host>.hygiene.warnings``, named here by their host.

    Parameters
    ----------
    meta : dict
        The run's metadata.

    Returns
    -------
    list of str
        Every warning, in the order stored (empty when the machine was quiet or the run
        predates the checks).

    Examples
    --------
    >>> hygiene_warnings({"hygiene": {"warnings": ["load average 6.0 on 4 CPUs"]}})
    ['load average 6.0 on 4 CPUs']
    >>> hygiene_warnings({"fleet": {"hosts": {"m1": {"hygiene": {"warnings": ["on battery"]}}}}})
    ['host m1: on battery']
    """
    found = [str(w) for w in _stored_warnings(meta)]
    hosts = (meta.get("fleet") or {}).get("hosts") or {}
    if isinstance(hosts, dict):
        for name, host in hosts.items():
            found += [f"host {name}: {w}" for w in _stored_warnings(host)]
    return found


def _stored_warnings(record: Any) -> list[Any]:
    hygiene = record.get("hygiene") if isinstance(record, dict) else None
    warnings = hygiene.get("warnings") if isinstance(hygiene, dict) else None
    return list(warnings) if isinstance(warnings, list) else []


def collapse_findings(speedup: Any, x: str) -> list[str]:
    """One sentence per significant collapse of the KV-cache speedup."""
    collapses = optional_frame(speedup, "collapses")
    if collapses is None:
        return []
    speed = speedup.speedup
    keys = [c for c in getattr(speedup, "group_columns", []) if c in collapses.columns]
    labels = group_labels(speed, keys)[0]
    several = labels.height > 1
    level = level_text(speedup)
    return [
        (f"{row[GROUP_FIELD]}: " if several else "")
        + f"the KV-cache speedup at {span(row, x)} is {sig3(row['ratio'])}x its trend "
        f"({level} CI {_ci(row)}){_q(row)}"
        for row in labelled(collapses, keys, labels).iter_rows(named=True)
    ]


def _where(row: dict[str, Any], group_columns: Sequence[str], x: str = "budget") -> str:
    """``mps · cache on at budgets 512..624``: the group by its chart label when known."""
    keys = row.get(GROUP_FIELD) or " · ".join(
        str(row[c]) for c in group_columns if row.get(c) is not None
    )
    return f"{keys + ' ' if keys else ''}at {span(row, x)}"


def _phase_sentence(row: dict[str, Any], group_columns: Sequence[str]) -> str:
    excess = (
        f"decode {row['decode_excess_s']:+.3g} s and prefill {row['prefill_excess_s']:+.3g} s "
        f"per trial over trend"
    )
    if row.get("decode_share") is None:
        return f"{_where(row, group_columns)}: {excess}; {row.get('decode_share_note')}."
    share = _share(row["decode_share"], row["decode_share_low"], row["decode_share_high"])
    return f"{_where(row, group_columns)}: decode carries {share}: {excess}."


def _share(share: float, low: float, high: float) -> str:
    """``97% of the excess (CI 95-99%)``, with a decimal where whole percents hide the CI."""
    digits = 1 if round(100 * low) == round(100 * high) else 0
    return (
        f"{100 * share:.{digits}f}% of the excess "
        f"(CI {100 * low:.{digits}f}-{100 * high:.{digits}f}%)"
    )


def _backend_sentence(row: dict[str, Any], group_columns: Sequence[str]) -> str:
    where = f"{_where(row, group_columns)} against {row['other_backend']}"
    if row.get("note") is not None:
        return f"{where}: not compared ({row['note']})."
    verdict = "specific to its backend" if row.get("specific") else "not shown to be specific"
    return (
        f"{where}: x{row['ratio']:.3g} over trend on its backend, "
        f"x{row['other_ratio']:.3g} ({_ci(row, 'other_low', 'other_high')}) on "
        f"{row['other_backend']}; ratio of ratios x{row['ratio_of_ratios']:.3g}{_q(row)}: "
        f"{verdict}."
    )


def _memory_sentence(row: dict[str, Any], group_columns: Sequence[str]) -> str:
    return (
        f"{_where(row, group_columns)}: x{row['ratio']:.3g} over trend, "
        f"x{row['adjusted_ratio']:.3g} ({_ci(row, 'adjusted_low', 'adjusted_high')}) with "
        f"memory held fixed{_q(row)}: {row['verdict']}."
    )


def _alignment_sentence(row: dict[str, Any], group_columns: Sequence[str]) -> str:
    keys = " · ".join(str(row[c]) for c in group_columns if row.get(c) is not None)
    return (
        f"{keys + ': ' if keys else ''}the {row['boundary']} follows {row['follows']} "
        f"(spread across prompts: {row['budget_spread']} in budget, "
        f"{row['total_spread']} in total tokens)."
    )


def _operator_sentence(row: dict[str, Any], group_columns: Sequence[str]) -> str:
    share = (
        f"carries {_share(row['share'], row['share_low'], row['share_high'])}, "
        if row.get("share") is not None
        else ""
    )
    return (
        f"{_where(row, group_columns)}: {row['operator']} {share}x{row['ratio']:.3g} "
        f"({_ci(row)}) its own trend{_q(row)}."
    )


_EXPLAINED: tuple[tuple[str, Callable[[dict[str, Any], Sequence[str]], str]], ...] = (
    ("phases", _phase_sentence),
    ("comparisons", _backend_sentence),
    ("effects", _memory_sentence),
    ("boundaries", _alignment_sentence),
    ("operators", _operator_sentence),
)


def explanation_findings(result: Any, labels: pl.DataFrame | None = None) -> list[str]:
    """One sentence per row of an explanation's main table.

    ``labels`` (from :func:`group_labels` of the detection) names each group as the
    charts do; without them, as the table's own groups label it (``cache on``, where the
    table holds ``use_cache=True``).
    """
    group_columns: list[str] = list(
        getattr(result, "group_columns", None) or getattr(result, "case_columns", None) or ()
    )
    for table, sentence in _EXPLAINED:
        frame = optional_frame(result, table)
        if isinstance(getattr(result, table, None), pl.DataFrame):
            keys = [c for c in group_columns if frame is not None and c in frame.columns]
            if labels is None and frame is not None and frame.height and keys:
                # named as its own chart names them ("cache on", not "True")
                labels = group_labels(frame, keys)[0]
            if frame is not None and labels is not None and table != "boundaries":
                frame = labelled(frame, group_columns, labels)
            if frame is not None and table == "operators":
                frame = frame.filter(pl.col("flagged"))  # the operators that carry it
            rows = [] if frame is None else list(frame.iter_rows(named=True))
            return [sentence(row, group_columns) for row in rows]
    return []


def comparison_findings(comparison: Any) -> list[str]:
    """One sentence per regime's status between two runs, and per significant shift."""
    keys = list(comparison.group_columns)
    labels = group_labels(comparison.shift.select(keys), keys)[0] if keys else None
    several = labels is not None and labels.height > 1
    x = comparison.x

    def named(frame: pl.DataFrame) -> pl.DataFrame:
        if labels is None:
            return frame.with_columns(pl.lit("all").alias(GROUP_FIELD))
        return labelled(frame, keys, labels)

    lines = [
        (f"{row[GROUP_FIELD]}: " if several else "")
        + f"the regime at {span(row, x)} {row['status']} in the new run"
        + (
            f": new over base x{sig3(row['ratio_of_ratios'])} "
            f"({level_text(comparison)} CI {_ci(row)}){_q(row)}"
            if row.get("ratio_of_ratios") is not None
            else ""
        )
        for row in named(comparison.changes).iter_rows(named=True)
    ]
    for row in named(comparison.shift).iter_rows(named=True):
        if row.get("change") in ("slower", "faster"):
            lines.append(
                (f"{row[GROUP_FIELD]}: " if several else "")
                + f"outside its regimes the new run is x{sig3(row['shift'])} the base "
                f"({row['change']}; CI {_ci(row, 'shift_low', 'shift_high')}){_q(row)}"
            )
    return lines


def headlines(regimes: Any, speedup: Any = None, meta: dict[str, Any] | None = None) -> list[str]:
    """One terse line per anomaly of ``regimes`` and per collapse of ``speedup``.

    Then what the curves without an anomaly, and the inconclusive ones, could have
    found, and the run's collection-time hygiene warnings
    (:func:`regimes.viz.sensitivity_findings`).

    Parameters
    ----------
    regimes : RegimeResult
        The result of :func:`regimes.detect_regimes`.
    speedup : SpeedupResult, optional
        The result of :func:`regimes.cache_speedup`.
    meta : dict, optional
        The run's metadata (``meta.json``), for its hygiene warnings.

    Returns
    -------
    list of str
        Groups named by the labels the charts use; each line gives the interval, the
        ratio over the smooth trend with its CI, the q value and whether it recovers.
        One line saying so when nothing was found and the result carries no
        sensitivity.

    See Also
    --------
    RunReport.findings : the same findings as sentences, with where each recovers.
    """
    x, y, group_columns = report_axes(regimes)
    labels = group_labels(regimes.curve, group_columns)[0]
    level = level_text(regimes)
    lines = [
        f"{row[GROUP_FIELD]}: {y} at {x} {_dash_span(row)} is {sig3(row['ratio'])}x its smooth "
        f"trend ({level} CI {_ci(row, joiner=' to ')})"
        + (f", q = {row['q_value']:.2g}" if row.get("q_value") is not None else "")
        + _recovery(row)
        for row in labelled(regimes.anomalies, group_columns, labels).iter_rows(named=True)
    ]
    collapses = getattr(speedup, "collapses", None)
    if isinstance(collapses, pl.DataFrame) and collapses.height:
        keys = [c for c in group_columns if c in collapses.columns and c != "use_cache"]
        speed_labels = group_labels(speedup.speedup, keys)[0]
        lines += [
            f"{row[GROUP_FIELD]}: the KV-cache speedup at {x} {_dash_span(row)} is "
            f"{sig3(row['ratio'])}x its trend ({level_text(speedup)} CI {_ci(row, joiner=' to ')})"
            for row in labelled(collapses, keys, speed_labels).iter_rows(named=True)
        ]
    lines += sensitivity_findings(regimes, meta)
    return lines or [f"no anomaly: {y} follows its smooth trend in every group"]


def _dash_span(row: dict[str, Any]) -> str:
    return str(row["start"]) if row["start"] == row["end"] else f"{row['start']}–{row['end']}"


def _recovery(row: dict[str, Any]) -> str:
    recovered = row.get("recovered")
    if recovered is None:
        return ""
    return ", recovers after it" if recovered else ", stays up (a step)"


def refinement_findings(result: Any) -> list[str]:
    """One sentence per refined boundary: its bracket, where it started, its cost."""
    lines = []
    label_columns = result.params.get("label_columns", [])
    for row in result.boundaries.iter_rows(named=True):
        who = " · ".join(str(row[c]) for c in label_columns if row.get(c) is not None)
        what = "KV-cache speedup" if row["source"] == "speedup" else "latency"
        where = (
            f"lies between budgets {row['low']} and {row['high']}"
            if row["resolved"]
            else f"is still open between budgets {row['low']} and {row['high']} ({row['status']})"
        )
        lines.append(
            f"{who + ': ' if who else ''}the {what} {row['kind']} {where}, refined from the "
            f"grid's {row['grid_low']}–{row['grid_high']} with {row['probes']} probe(s), "
            f"{row['generations']} generation(s)."
        )
    return lines


def result_summary(result: Any) -> str:
    """Return ``result.summary()`` as text (a polars table printed in full)."""
    summary = result.summary() if hasattr(result, "summary") else ""
    if isinstance(summary, pl.DataFrame):
        with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=160):
            return str(summary)
    return str(summary)
