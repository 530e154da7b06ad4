r"""The anomalies of two runs along one matched curve: paired, then tested on both runs.

**Pairing.** An anomaly of the base and one of the new run whose ``x`` intervals overlap,
or touch (no budget both runs measured lies between them: a one-budget spike that moved
by one step), are the same regime seen twice; pairs are taken one to one, largest
overlap first. The rest are found in one run only.

**Both runs on one interval.** Every row is tested on both curves over the same interval
(a pair's union, so that neither run's flank holds cells of the regime): the log ratio of
the interval's level over its flank trend, :math:`D` with its standard error and df, by
the flank test detection uses for a fixed interval
(:func:`regimes._stats.fixed_intervals.fixed_interval_test`). The ratio of ratios is
:math:`e^{D_{new} - D_{base}}`, the runs being measured independently, with
Welch-Satterthwaite df.

* a pair: the ratio of ratios is tested two-sided (did the regime grow or shrink). When
  its boundaries differ, a *boundary test* asks whether they moved: on the budgets both
  runs measured, the difference of log levels :math:`d_t` (:mod:`regimes._compare.shift`)
  over the budgets only the new run's interval covers, minus that over the budgets only
  the base's covers (or minus the flanking normal budgets when one of the two sets is
  empty, or the reverse), one-sided: a regime that moved makes that contrast positive.
  The shift between runs and every process effect cancel in it.
* found in one run (``A``) only: a *presence test* of the other run's level over its
  flank trend there (one-sided, not adjusted for a scan: the interval was chosen on the
  other run's data), the ratio of ratios one-sided towards the other run having less of
  it, and the *power* the other run had to report an anomaly of ``A``'s size there:
  :math:`P(\hat D > \max(t_{crit}\,\mathrm{se}, \log r_{min}))` for a true
  :math:`D_A`, with :math:`t_{crit}` the detection's scan-adjusted one-sided critical
  value at ``alpha`` (a shifted central t approximates the noncentral one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from regimes._compare.shift import Difference, t_quantile, t_sf, welch
from regimes._compare.sides import CurveCells
from regimes._stats.contrasts import contrast_test, level_contrast
from regimes._stats.fixed_intervals import fixed_interval_test

__all__ = ["Fit", "anomaly_rows", "pair_intervals"]

FLANK = 3
"""Normal budgets on each side of a regime that a one-sided boundary test compares with."""

Interval = tuple[float, float]


class Fit(NamedTuple):
    """One run's log ratio of an interval's level over its flank trend."""

    estimate: float
    se: float
    df: float


def pair_intervals(
    base: Sequence[Interval], new: Sequence[Interval], grid: np.ndarray
) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Pair intervals one to one, largest overlap first.

    Intervals pair when they overlap or touch (no ``grid`` value strictly between them).
    Returns the pairs ``(base index, new index)`` in base order, then the unpaired base
    and new indices.
    """

    def close(a: Interval, b: Interval) -> bool:
        lo, hi = min(a[1], b[1]), max(a[0], b[0])  # a gap when lo < hi
        return lo >= hi or not np.any((grid > lo) & (grid < hi))

    overlaps = [
        (min(b[1], n[1]) - max(b[0], n[0]), i, j)
        for i, b in enumerate(base)
        for j, n in enumerate(new)
        if close(b, n)
    ]
    pairs: list[tuple[int, int]] = []
    for _, i, j in sorted(overlaps, key=lambda o: (-o[0], o[1], o[2])):
        if all(i != p and j != q for p, q in pairs):
            pairs.append((i, j))
    paired_base = {p for p, _ in pairs}
    paired_new = {q for _, q in pairs}
    return (
        sorted(pairs),
        [i for i in range(len(base)) if i not in paired_base],
        [j for j in range(len(new)) if j not in paired_new],
    )


def fit_interval(cells: CurveCells, start: float, end: float) -> tuple[Fit | None, str | None]:
    """Test ``[start, end]`` against its flank trend on one run's curve, or say why not."""
    x = cells.curve.x
    inside = np.flatnonzero((x >= start) & (x <= end))
    if inside.size == 0:
        return None, "no budget measured inside the interval"
    if inside.size == x.size:
        return None, "the interval covers every budget measured: no flank"
    try:
        tests = fixed_interval_test(cells.curve, int(inside[0]), int(inside[-1]), cells.tau)
    except (ValueError, np.linalg.LinAlgError):
        return None, "too few budgets around the interval for a flank trend"
    fit = Fit(float(tests.estimate[0]), float(tests.se[0]), float(tests.df[0]))
    if not (math.isfinite(fit.estimate) and math.isfinite(fit.se)):
        return None, "too few budgets around the interval for a flank trend"
    return fit, None


def _ratio_of_ratios(base: Fit, new: Fit, alternative: str, level: float) -> dict[str, float]:
    """Compute ``e^(D_new - D_base)``, its interval and p-value.

    ``alternative`` is ``two-sided``, ``less`` or ``greater``.
    """
    delta = new.estimate - base.estimate
    variance, dof = welch([(base.se**2, base.df), (new.se**2, new.df)])
    se = math.sqrt(variance)
    half = t_quantile((1.0 + level) / 2.0, dof) * se
    z = delta / se if se > 0 else math.copysign(math.inf, delta)
    upper = t_sf(z, dof)
    p = {"two-sided": min(1.0, 2.0 * min(upper, 1.0 - upper)), "greater": upper}
    return {
        "ratio_base": math.exp(base.estimate),
        "ratio_new": math.exp(new.estimate),
        "ratio_of_ratios": math.exp(delta),
        "ratio_low": math.exp(delta - half),
        "ratio_high": math.exp(delta + half),
        "p_value": p.get(alternative, 1.0 - upper),
    }


def _presence_and_power(
    found: Fit, other: Fit, n_other: int, alpha: float, min_ratio: float
) -> dict[str, float]:
    """Test the other run at the interval (one-sided); its power for ``found``'s size."""
    z = other.estimate / other.se if other.se > 0 else math.copysign(math.inf, other.estimate)
    scan = max(1, n_other * (n_other + 1) // 2 - 1)
    critical = t_quantile(1.0 - alpha / scan, other.df) * other.se
    threshold = max(critical, math.log(min_ratio))
    shifted = (threshold - found.estimate) / other.se if other.se > 0 else -math.inf
    return {
        "presence_p": t_sf(z, other.df),
        "power": t_sf(shifted, other.df),
    }


def _boundary_p(diff: Difference, base: Interval, new: Interval) -> tuple[float | None, str | None]:
    """One-sided p-value that the regime's boundaries moved from ``base`` to ``new``."""
    x = diff.x
    in_base = (x >= base[0]) & (x <= base[1])
    in_new = (x >= new[0]) & (x <= new[1])
    only_new, only_base = np.flatnonzero(in_new & ~in_base), np.flatnonzero(in_base & ~in_new)
    if only_new.size == 0 and only_base.size == 0:
        return None, "the boundaries differ only where the runs share no budget"
    union = np.flatnonzero(in_base | in_new)
    normal = np.flatnonzero(diff.normal)
    flank = np.concatenate([normal[normal < union[0]][-FLANK:], normal[normal > union[-1]][:FLANK]])
    total = diff.var + diff.tau2
    if only_new.size and only_base.size:
        c = level_contrast(total, only_new, only_base)
    elif flank.size == 0:
        return None, "no budget normal in both runs next to the regime to compare with"
    elif only_new.size:
        c = level_contrast(total, only_new, flank)
    else:
        c = level_contrast(total, flank, only_base)
    estimate, se, dof = contrast_test(c, diff.d, diff.var, diff.df, diff.tau2, diff.tau2_df)
    z = estimate / se if se > 0 else math.copysign(math.inf, estimate)
    return t_sf(z, dof), None


def anomaly_rows(
    base: tuple[CurveCells, list[Interval]],
    new: tuple[CurveCells, list[Interval]],
    diff: Difference,
    alpha: float,
    min_ratio: float,
    level: float,
) -> list[dict[str, Any]]:
    """One row per regime of either run on one matched curve (see the module docstring).

    Each row holds ``found_in``, the tested ``start``/``end``, each run's own bounds, the
    ratios with ``p_value`` of the ratio of ratios, ``boundary_p`` (pairs whose
    boundaries differ), ``presence_p`` and ``power`` (regimes found in one run), and a
    ``note`` when a test could not be made.
    """
    (cells_b, spans_b), (cells_n, spans_n) = base, new
    pairs, base_only, new_only = pair_intervals(spans_b, spans_n, diff.x)
    entities: list[tuple[str, Interval | None, Interval | None]]
    entities = [("both", spans_b[i], spans_n[j]) for i, j in pairs]
    entities += [("base", spans_b[i], None) for i in base_only]
    entities += [("new", None, spans_n[j]) for j in new_only]
    rows = []
    for found_in, span_b, span_n in entities:
        spans = [s for s in (span_b, span_n) if s is not None]
        start, end = min(s[0] for s in spans), max(s[1] for s in spans)
        row: dict[str, Any] = {"found_in": found_in, "start": start, "end": end}
        row |= _bounds(span_b, "base") | _bounds(span_n, "new")
        fit_b, note_b = fit_interval(cells_b, start, end)
        fit_n, note_n = fit_interval(cells_n, start, end)
        if fit_b is None or fit_n is None:
            rows.append(
                row | {"note": f"{'base' if fit_b is None else 'new'} run: {note_b or note_n}"}
            )
            continue
        alternative = {"both": "two-sided", "base": "less", "new": "greater"}[found_in]
        row |= _ratio_of_ratios(fit_b, fit_n, alternative, level)
        if span_b is not None and span_n is not None and span_b != span_n:
            row["boundary_p"], row["note"] = _boundary_p(diff, span_b, span_n)
        elif found_in != "both":
            found, other, cells = (
                (fit_b, fit_n, cells_n) if found_in == "base" else (fit_n, fit_b, cells_b)
            )
            row |= _presence_and_power(found, other, cells.curve.x.size, alpha, min_ratio)
        rows.append(row)
    return rows


def _bounds(span: Interval | None, name: str) -> dict[str, float | None]:
    return {
        f"start_{name}": None if span is None else span[0],
        f"end_{name}": None if span is None else span[1],
    }
