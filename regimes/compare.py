"""``compare_runs``: which regimes appeared, vanished or changed between two runs.

The question after "is there a spike?" is "did the upgrade fix it?". Two runs of the same
sweep (before and after a torch or OS upgrade, on two machines, on two days) are each
detected as usual (:func:`regimes.detect_regimes`), their curves matched on the case
columns, and every regime of either run tested on both runs
(:mod:`regimes._compare.anomalies`); along each matched curve the new run's latency over
the base's is reported per budget and as one uniform shift, with an interval that
carries the process-to-process variation of both runs (:mod:`regimes._compare.shift`).
One false discovery rate control covers every test of the call (:func:`_adjust`). Each
of those modules states its statistics in full.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import polars as pl

from regimes._compare.anomalies import anomaly_rows
from regimes._compare.shift import budget_rows, difference, shift_row
from regimes._compare.sides import (
    Key,
    Side,
    build_side,
    detection_fits,
    match_columns,
    read_source,
)
from regimes._compare.statuses import STATUSES
from regimes._compare.tables import build_tables
from regimes._compare.text import comparison_summary
from regimes._result import AnalysisResult, native_library
from regimes._stats.multitest import benjamini_hochberg
from regimes._summary import Summary
from regimes.detect import RegimeResult
from regimes.errors import RegimesInputError
from regimes.options import check_options

__all__ = ["POWER", "STATUSES", "ComparisonResult", "compare_runs"]

POWER = 0.8
"""Power the other run must have had at an interval before a regime found in one run
only is called ``vanished`` (or ``appeared``) rather than ``inconclusive``."""

_P_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "changes": (("p_value", "q_value"), ("boundary_p", "boundary_q"), ("presence_p", "presence_q")),
    "shift": (("p_value", "q_value"),),
    "families": (("p_value", "q_value"),),
}
"""The p-values of a call's Benjamini-Hochberg family, by table, with the column its
q-value goes to (``families``: one Simes p-value per curve's budgets)."""


@dataclass(frozen=True, repr=False)
class ComparisonResult(AnalysisResult):
    """Result of :func:`compare_runs`.

    Attributes
    ----------
    changes : polars.DataFrame
        One row per regime of either run (a regime found in both, overlapping, is one
        row): the group columns; ``start``, ``end`` (the interval tested on both runs:
        the regime's, or the union of a pair's); ``status`` (one of :data:`STATUSES`);
        ``found_in`` (``base``, ``new`` or ``both``); ``start_base``, ``end_base``,
        ``start_new``, ``end_new`` (each run's detected bounds) and ``start_shift``,
        ``end_shift`` (new minus base); ``ratio_base``, ``ratio_new`` (level over flank
        trend in each run), ``ratio_of_ratios`` with ``ratio_low``, ``ratio_high``,
        ``p_value``, ``q_value``; ``boundary_p``, ``boundary_q`` (did the boundaries
        move); ``presence_p``, ``presence_q`` (is the regime there in the run that did
        not report it); ``power`` (could that run have reported it); ``note``.
    shift : polars.DataFrame
        One row per matched curve: ``n_budgets`` (budgets normal in both runs),
        ``shift`` (new / base) with ``shift_low``, ``shift_high``, ``df``, ``p_value``,
        ``q_value``, ``change`` (``slower``, ``faster`` or ``no significant change``)
        and ``note``.
    budgets : polars.DataFrame
        Per matched curve and budget both runs measured: ``level_base``,
        ``level_new`` (seconds), ``ratio`` with ``ratio_low``, ``ratio_high``,
        ``vs_shift`` (ratio over the curve's shift), ``p_value``, ``q_value``,
        ``differs`` (from the shift, ``q < alpha``) and ``in_anomaly``.
    unmatched : polars.DataFrame
        Curves measured by one run only: the group columns, ``run`` and ``n_budgets``.
    environment : polars.DataFrame
        ``key``, ``base``, ``new``, ``same``: run ids, device, versions, host.
    base_report, new_report : RegimeResult
        Each run's detection.
    group_columns : tuple of str
        The columns curves were matched on.
    x, y : str
        The axes.
    params : dict
        The call's arguments.
    untested : polars.DataFrame
        Curves that could not be compared, or whose regimes could not be tested, with
        the reason.
    """

    changes: pl.DataFrame
    shift: pl.DataFrame
    budgets: pl.DataFrame
    unmatched: pl.DataFrame
    environment: pl.DataFrame
    base_report: RegimeResult
    new_report: RegimeResult
    group_columns: tuple[str, ...]
    x: str
    y: str
    params: dict[str, Any]
    untested: pl.DataFrame

    _tables: ClassVar[tuple[str, ...]] = ("changes", "shift", "budgets", "unmatched", "environment")
    _title: ClassVar[str] = "Run comparison"

    def _headlines(self) -> list[str]:
        """Return one sentence per regime's status and per significant shift."""
        from regimes._findings import comparison_findings

        return comparison_findings(self)

    def _summary(self) -> Summary:
        """Return the environment, the shifts, the regimes and the curves of one run only."""
        return comparison_summary(self)

    def __str__(self) -> str:
        return self.summary()


def compare_runs(
    base: Any,
    new: Any,
    *,
    by: str | Sequence[str] | None = None,
    x: str = "budget",
    y: str = "latency_s",
    alpha: float = 0.05,
    min_ratio: float = 1.25,
    n_boot: int = 200,
    seed: int = 0,
    level: float = 0.95,
    detection: RegimeResult | None = None,
) -> ComparisonResult:
    """Compare two runs of a sweep: regimes that appeared, vanished or changed, and shifts.

    Each run is detected on its own (:func:`regimes.detect_regimes` with the same
    arguments), and its curves matched with the other's on the case columns. For each
    matched curve:

    * every regime (anomaly) of either run gets a status. A regime found in both runs
      (overlapping intervals) ``persists``, with the ratio of its ratios over trend,
      new over base, its interval and q-value; it is ``changed`` when a test on the
      budgets only one run's interval covers finds its boundaries moved (by
      ``start_shift``, ``end_shift``). A regime found in one run only is tested on the
      other: it ``persists`` when the other run's level there is significantly over its
      trend by at least ``min_ratio`` (that run's scan missed it); it ``vanished`` (or
      ``appeared``) when its ratio over trend is significantly smaller in the run that
      lacks it *and* that run had power of at least :data:`POWER` to report it, given
      its own noise at that interval; otherwise it is ``inconclusive``;
    * the new run's latency over the base's: per common budget with an interval, as
      one uniform shift (like pyperf's "1.15x slower") over the budgets outside every
      regime of either run, and the budgets that depart significantly from that shift.
      Intervals include the process-to-process variation of both runs (a run's
      processes share one offset that trials do not average away).

    Every test of the call is under one false discovery rate control: Benjamini-Hochberg
    over the regime tests (ratios of ratios, boundary and presence tests), the shifts,
    and one Simes combination per curve of its budgets' departures from the shift; the
    budgets of the curves so selected are then controlled within each curve at the
    level Benjamini and Bogomolov give for selected families. Hundreds of budget tests
    therefore do not dilute the few tests of regimes and shifts.

    Parameters
    ----------
    base, new : polars.DataFrame, pandas.DataFrame, str or os.PathLike
        The two runs: trial tables, or run directories / trial files (read with
        :func:`regimes.load`, which adds the environment columns).
    by : str or sequence of str, optional
        Columns to match curves on; default every case column present in both runs
        except ``device`` (so runs on two machines compare).
    x : str, default "budget"
        The axis along which latency is followed (``budget`` or ``total_tokens``).
    y : str, default "latency_s"
        The time compared (``latency_s``, ``decode_s``, ``prefill_s``).
    alpha : float, default 0.05
        False discovery rate: of each run's detection, and of every test here.
    min_ratio : float, default 1.25
        Smallest ratio over trend that counts as a regime (detection's, and the
        presence test's).
    n_boot : int, default 200
        Bootstrap draws of each run's detection (:func:`regimes.detect_regimes`: the
        bounds on each regime's boundaries); its default.
    seed : int, default 0
        Seed of those draws; the same seed gives the same result.
    level : float, default 0.95
        Confidence level of every interval.
    detection : RegimeResult, optional
        The new run's detection, already made (:func:`regimes.analyze` passes its own),
        so that the new run is not detected again. It must be a detection of ``new``
        with this call's ``x``, ``y``, ``alpha``, ``min_ratio``, ``n_boot``, ``seed`` and
        ``level``, grouped by the matched columns (or by more that never split a
        matched curve); the base run is then detected with its other settings too.

    Returns
    -------
    ComparisonResult
        ``changes``, ``shift``, ``budgets``, ``unmatched``, ``environment``,
        ``untested``; ``summary()`` prints them with the environment difference.

    Raises
    ------
    RegimesInputError
        A run that cannot be read or detected (the message names which), no curve in
        common is not an error (every curve is then listed in ``unmatched``), bad
        ``alpha``, ``level``, ``min_ratio`` or ``n_boot``, or ``by`` naming a column a
        run lacks, or a ``detection`` that is not one of ``new`` with these settings.

    See Also
    --------
    regimes.detect_regimes : the detection run on each run.
    regimes.compare_backends : one run, an anomaly's interval on the other backends.

    References
    ----------
    .. [1] Y. Benjamini and Y. Hochberg, "Controlling the false discovery rate: a
       practical and powerful approach to multiple testing", J. R. Stat. Soc. B 57(1),
       289-300, 1995.
    .. [2] Y. Benjamini and M. Bogomolov, "Selective inference on multiple families of
       hypotheses", J. R. Stat. Soc. B 76(1), 297-318, 2014.
    .. [3] R. J. Simes, "An improved Bonferroni procedure for multiple tests of
       significance", Biometrika 73(3), 751-754, 1986.
    .. [4] V. Stinner, pyperf, ``compare_to``: a benchmark compared between two runs as
       one ratio ("1.15x slower") with a significance test,
       https://pyperf.readthedocs.io/en/latest/cli.html#compare-to-cmd

    Examples
    --------
    Two synthetic runs of one curve; the 3x spike of the base is gone from the new run.

    >>> import regimes
    >>> grid = dict(n_budgets=16, trials=5, sessions=2, intercept_s=0.05, per_token_s=0.005)
    >>> base = regimes.simulate_sweep(anomaly="spike", ratio=3.0, seed=1, **grid)
    >>> new = regimes.simulate_sweep(anomaly="none", seed=2, **grid)
    >>> result = regimes.compare_runs(base.trials, new.trials, n_boot=200)
    >>> result.changes.select("start", "end", "status").rows()
    [(128, 144, 'vanished')]
    >>> base.truth.select("start", "end").rows()
    [(128, 144)]
    >>> result.shift.get_column("change").to_list()
    ['no significant change']
    """
    detect = dict(x=x, y=y, alpha=alpha, min_ratio=min_ratio, n_boot=n_boot, seed=seed, level=level)
    check_options(**detect)
    base_frame, base_label = read_source(base, "base")
    new_frame, new_label = read_source(new, "new")
    group_columns = match_columns(base_frame, new_frame, by, x)
    base_detect = detect if detection is None else _reused(detection, group_columns, detect)
    sides = (
        build_side("base", base_frame, base_label, group_columns, base_detect),
        build_side("new", new_frame, new_label, group_columns, detect, report=detection),
    )
    rows = _compare_curves(sides, group_columns, alpha, min_ratio, level)
    _adjust(rows, alpha)
    for row in rows["changes"]:
        row["status"], note = _status(row, alpha, min_ratio)
        row["note"] = row.get("note") or note
    tables = build_tables(sides, rows, group_columns, x)
    return ComparisonResult(
        **tables,
        base_report=sides[0].report,
        new_report=sides[1].report,
        group_columns=tuple(group_columns),
        x=x,
        y=y,
        params=dict(detect, by=by, base=base_label, new=new_label),
        native=native_library(base),
    )


_DETECTION_ONLY = ("direction", "penalty", "session", "fdr", "ratio_interval")
"""Settings of a given detection that this call does not take, but the base run's
detection must share with it."""


def _reused(
    detection: RegimeResult, group_columns: list[str], detect: dict[str, Any]
) -> dict[str, Any]:
    """Check a given detection of the new run; return the base run's detection options."""
    if not isinstance(detection, RegimeResult):
        raise RegimesInputError(
            f"detection must be a RegimeResult of the new run, got {type(detection).__name__}"
        )
    axes = {"x": detection.x, "y": detection.y}
    differ = [
        f"{k}={v!r} (given {detection.params.get(k, axes.get(k))!r})"
        for k, v in detect.items()
        if detection.params.get(k, axes.get(k)) != v
    ]
    if differ:
        raise RegimesInputError(
            "the detection given was made with other settings than this comparison: "
            f"{', '.join(differ)}; pass the same settings or leave detection out"
        )
    reason = detection_fits(detection, group_columns)
    if reason is not None:
        raise RegimesInputError(
            f"the detection given cannot stand for the new run: {reason} (the curves are "
            f"matched on {group_columns}); pass by= or leave detection out"
        )
    return detect | {k: detection.params[k] for k in _DETECTION_ONLY if k in detection.params}


def _compare_curves(
    sides: tuple[Side, Side],
    group_columns: list[str],
    alpha: float,
    min_ratio: float,
    level: float,
) -> dict[str, list[dict[str, Any]]]:
    """Rows of every table, before multiple-testing control, keyed by table."""
    base, new = sides
    spans = [_spans(side.report, group_columns) for side in sides]
    out: dict[str, list[dict[str, Any]]] = {
        "changes": [],
        "shift": [],
        "budgets": [],
        "unmatched": [],
        "untested": [],
    }
    for side, other in ((base, new), (new, base)):
        for key in side.curves:
            if key not in other.curves:
                out["unmatched"].append(
                    _keyed(key, group_columns)
                    | {"run": side.name, "n_budgets": int(side.curves[key].curve.x.size)}
                )
                out["untested"].append(
                    _keyed(key, group_columns) | {"reason": f"measured by the {side.name} run only"}
                )
    for key in (k for k in base.curves if k in new.curves):
        cells = (base.curves[key], new.curves[key])
        span_b, span_n = spans[0].get(key, []), spans[1].get(key, [])
        diff = difference(*cells, [*span_b, *span_n])
        keyed = _keyed(key, group_columns)
        shift = keyed | shift_row(diff, level) | {"note": _process_note(sides, key)}
        out["shift"].append(shift)
        levels = (cells[0].curve.level, cells[1].curve.level)
        common = [np.isin(c.curve.x, diff.x) for c in cells]
        out["budgets"] += [
            keyed | row | {"_curve": len(out["shift"])}
            for row in budget_rows(
                diff, (levels[0][common[0]], levels[1][common[1]]), "shift" in shift, level
            )
        ]
        pairs = ((cells[0], span_b), (cells[1], span_n))
        out["changes"] += [
            keyed | row for row in anomaly_rows(*pairs, diff, alpha, min_ratio, level)
        ]
        out["untested"] += _untested_curve(sides, key, keyed, shift)
    return out


def _spans(report: RegimeResult, group_columns: list[str]) -> dict[Key, list[tuple[float, float]]]:
    spans: dict[Key, list[tuple[float, float]]] = {}
    for row in report.anomalies.iter_rows(named=True):
        key = tuple(row[c] for c in group_columns)
        spans.setdefault(key, []).append((float(row["start"]), float(row["end"])))
    return spans


def _keyed(key: Key, group_columns: list[str]) -> dict[str, Any]:
    return dict(zip(group_columns, key, strict=True))


def _process_note(sides: tuple[Side, Side], key: Key) -> str | None:
    lone = [side.name for side in sides if side.curves[key].n_processes == 1]
    if len(lone) == 2:
        return (
            "each run is a single process: a shift between them cannot be told from the "
            "difference between two processes (measure 2 or more sessions), so it is not "
            "tested and has no interval"
        )
    if lone:
        other = "new" if lone[0] == "base" else "base"
        return (
            f"the {lone[0]} run is a single process: its process-to-process variation is "
            f"taken to be the {other} run's"
        )
    return None


def _untested_curve(
    sides: tuple[Side, Side], key: Key, keyed: dict[str, Any], shift: dict[str, Any]
) -> list[dict[str, Any]]:
    out = []
    for side in sides:
        for row in side.report.untested.iter_rows(named=True):
            if tuple(row[c] for c in keyed) == key:
                out.append(keyed | {"reason": f"{side.name} run: {row['reason']}"})
    if shift.get("p_value") is None:
        out.append(keyed | {"reason": f"shift not tested: {shift['note']}"})
    return out


def _adjust(rows: dict[str, list[dict[str, Any]]], alpha: float) -> None:
    """Multiple-testing control over every test of the call; q-values written in place.

    Benjamini-Hochberg runs over the regime tests (ratio of ratios, boundary, presence),
    the shifts, and one Simes p-value per curve for its budgets' departures from the
    shift. Within the ``R`` of ``M`` curves so selected, the budgets are controlled by
    Benjamini-Hochberg at ``alpha * R / M`` (Benjamini and Bogomolov): a budget's
    ``q_value`` is the larger of its curve's q-value and its within-curve one times
    ``M / R``, so ``q_value < alpha`` is exactly that rule.
    """
    families: dict[int, list[dict[str, Any]]] = {}
    for row in rows["budgets"]:
        if row.get("p_value") is not None:
            families.setdefault(row["_curve"], []).append(row)
    simes = [{"p_value": _simes([r["p_value"] for r in f])} for f in families.values()]
    tables = {**rows, "families": simes}
    slots = [
        (row, p_column, q_column)
        for table, columns in _P_COLUMNS.items()
        for row in tables[table]
        for p_column, q_column in columns
        if row.get(p_column) is not None and math.isfinite(row[p_column])
    ]
    q = benjamini_hochberg(np.asarray([row[p] for row, p, _ in slots], dtype=float))
    for (row, _, q_column), value in zip(slots, q, strict=True):
        row[q_column] = float(value)
    selected = sum(f["q_value"] < alpha for f in simes)
    scale = len(simes) / max(selected, 1)
    for family, members in zip(simes, families.values(), strict=True):
        within = benjamini_hochberg(np.asarray([r["p_value"] for r in members]))
        for row, value in zip(members, within, strict=True):
            row["q_value"] = max(family["q_value"], min(1.0, float(value) * scale))
    _verdicts(rows, alpha)


def _simes(p: list[float]) -> float:
    """Simes' combination of a family's p-values: a test that none of its nulls is false."""
    ordered = np.sort(np.asarray(p, dtype=float))
    return float(np.min(ordered * ordered.size / np.arange(1, ordered.size + 1)))


def _verdicts(rows: dict[str, list[dict[str, Any]]], alpha: float) -> None:
    for row in rows["shift"]:
        if row.get("q_value") is None:
            row["change"] = None
        elif row["q_value"] < alpha:
            row["change"] = "slower" if row["shift"] > 1 else "faster"
        else:
            row["change"] = "no significant change"
    for row in rows["budgets"]:
        row["differs"] = None if row.get("q_value") is None else bool(row["q_value"] < alpha)


def _status(row: dict[str, Any], alpha: float, min_ratio: float) -> tuple[str, str | None]:
    """Decide a regime's status and, when it needs one, say why."""
    if row.get("q_value") is None:
        return "inconclusive", None
    if row["found_in"] == "both":
        moved = row.get("boundary_q") is not None and row["boundary_q"] < alpha
        return ("changed" if moved else "persists"), None
    lacking = "new" if row["found_in"] == "base" else "base"
    if row["presence_q"] < alpha and row[f"ratio_{lacking}"] >= min_ratio:
        return "persists", (
            f"not reported by the {lacking} run's detection, but its level there is "
            f"x{row[f'ratio_{lacking}']:.3g} its trend (q={row['presence_q']:.2g})"
        )
    claim = "vanished" if lacking == "new" else "appeared"
    if row["q_value"] < alpha and row["power"] >= POWER:
        return claim, None
    if row["power"] < POWER:
        return "inconclusive", (
            f"the {lacking} run had power {row['power']:.2f} < {POWER} to report it there"
        )
    return "inconclusive", (
        f"its ratio over trend is not significantly {'smaller' if lacking == 'new' else 'larger'}"
        f" in the new run (q={row['q_value']:.2g})"
    )
