r"""The new run over the base along one curve: per budget, and as one uniform shift.

On the budgets both runs measured, the difference of log levels
:math:`d_t = \ell^{new}_t - \ell^{base}_t` has sampling variance
:math:`w_t = v^{new}_t + v^{base}_t` (Welch-Satterthwaite df from the cells'). Along the
curve it also wobbles beyond that, by a between-cell variance :math:`\tau_d^2`
estimated as detection estimates a curve's (the robust scale of second differences of
:math:`d` over the budgets outside every anomaly of either run,
:func:`regimes._stats.between_cell.between_cell_variance`; the sum of the two curves' own
when fewer than 5 such budgets remain). Wobble that both runs share, a budget that is
slow on this software whichever day it runs, cancels in :math:`d` and is not counted.

**Shift.** The precision-weighted mean of :math:`d_t` over the budgets outside every
anomaly of either run, weights :math:`1/(w_t + \tau_d^2)`. Its variance is that of the
contrast plus the variance of the two runs' mean process effects
(:mod:`regimes._compare.sides`): every level of a run carries that run's process effect,
so it does not average away over budgets. The df are Welch-Satterthwaite over the three
parts; with two processes a run, the process part has one df a run and the interval is
as wide as two processes can make it. The p-value is two-sided (shift = 1).

**Budgets.** Each common budget's ratio :math:`e^{d_t}`, with an interval from
:math:`w_t` plus the process part, and its departure from the shift,
:math:`d_t - \hat s`, tested two-sided as the contrast it is (the process effects
cancel; :math:`\tau_d^2` stays).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from regimes._compare.sides import CurveCells
from regimes._stats.between_cell import between_cell_variance
from regimes._stats.contrasts import contrast_test

__all__ = [
    "Difference",
    "budget_rows",
    "difference",
    "process_part",
    "shift_row",
    "t_quantile",
    "t_sf",
    "welch",
]


def t_sf(z: float, dof: float) -> float:
    """Upper tail of Student's t with ``dof`` degrees of freedom (normal when infinite)."""
    return float(stats.norm.sf(z) if math.isinf(dof) else stats.t.sf(z, dof))


def t_quantile(q: float, dof: float) -> float:
    """Quantile of Student's t with ``dof`` degrees of freedom (normal when infinite)."""
    return float(stats.norm.ppf(q) if math.isinf(dof) else stats.t.ppf(q, dof))


@dataclass(frozen=True)
class Difference:
    """``d = level_new - level_base`` on the common budgets of one matched curve."""

    x: np.ndarray
    u: np.ndarray
    d: np.ndarray
    var: np.ndarray
    df: np.ndarray
    normal: np.ndarray
    tau2: float
    tau2_df: float
    process_var: float
    process_df: float

    def weights(self) -> np.ndarray:
        """Weights of the shift: precision over normal budgets, 0 elsewhere, sum 1."""
        w = np.where(self.normal, 1.0 / (self.var + self.tau2), 0.0)
        return w / w.sum() if w.sum() > 0 else w


def welch(parts: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Sum of variances ``(v, df)`` and its Welch-Satterthwaite df (infinite for none)."""
    total = float(sum(v for v, _ in parts))
    denominator = sum(v * v / d for v, d in parts if v > 0 and d > 0 and math.isfinite(d))
    return total, (total * total / denominator if denominator > 0 else math.inf)


def difference(
    base: CurveCells, new: CurveCells, intervals: Sequence[tuple[float, float]]
) -> Difference:
    """Build the :class:`Difference` of two matched curves.

    ``intervals`` are every anomaly of either run on this curve (inclusive ``x``
    bounds), kept out of the shift.
    """
    x, ib, jn = np.intersect1d(base.curve.x, new.curve.x, return_indices=True)
    cb, cn = base.curve, new.curve
    var = cb.var[ib] + cn.var[jn]
    with np.errstate(divide="ignore", invalid="ignore"):
        df = var**2 / (cb.var[ib] ** 2 / cb.df[ib] + cn.var[jn] ** 2 / cn.df[jn])
    normal = np.ones(x.size, dtype=bool)
    for start, end in intervals:
        normal &= ~((x >= start) & (x <= end))
    u = np.log(x) if np.all(x > 0) else x.astype(float)
    tau2, tau2_df = (
        between_cell_variance(u[normal], (cn.level[jn] - cb.level[ib])[normal], var[normal])
        if normal.sum() >= 5
        else (math.nan, 0.0)
    )
    if not math.isfinite(tau2):
        tau2, tau2_df = welch([base.tau, new.tau])
    process = process_part(base, new)
    return Difference(
        x,
        u,
        cn.level[jn] - cb.level[ib],
        var,
        np.nan_to_num(df, nan=math.inf),
        normal,
        tau2,
        tau2_df,
        *process,
    )


def process_part(base: CurveCells, new: CurveCells) -> tuple[float, float]:
    r"""Variance of the difference of the two runs' mean process effects, and its df.

    Each run's is :math:`\hat\sigma^2_p / S` (:mod:`regimes._compare.sides`); a run
    measured by a single process takes the other run's :math:`\hat\sigma^2_p` (and
    df), and when neither has two processes the variance is NaN: a shift between two
    single processes cannot be told from the difference between two processes.
    """
    parts = []
    for own, other in ((base, new), (new, base)):
        if own.n_processes == 0:
            continue
        sigma2, dof = (
            (own.process_sigma2, own.process_df)
            if own.n_processes >= 2
            else (other.process_sigma2, other.process_df)
        )
        if not math.isfinite(sigma2):
            return math.nan, 0.0
        parts.append((sigma2 / own.n_processes, dof))
    return welch(parts)


def _interval(estimate: float, variance: float, dof: float, level: float) -> tuple[float, ...]:
    half = t_quantile((1.0 + level) / 2.0, dof) * math.sqrt(variance)
    return math.exp(estimate), math.exp(estimate - half), math.exp(estimate + half)


def _two_sided(estimate: float, variance: float, dof: float) -> float:
    if variance <= 0:
        return 0.0 if estimate != 0 else 1.0
    z = abs(estimate) / math.sqrt(variance)
    return min(1.0, 2.0 * t_sf(z, dof))


def shift_row(diff: Difference, level: float) -> dict[str, Any]:
    """One matched curve's uniform shift (see the module docstring), or a ``note``."""
    n = int(diff.normal.sum())
    row: dict[str, Any] = {"n_budgets": n}
    if n < 2:
        return row | {"note": f"{n} budget(s) measured by both runs outside every anomaly"}
    estimate, se, dof = contrast_test(
        diff.weights(), diff.d, diff.var, diff.df, diff.tau2, diff.tau2_df
    )
    if not math.isfinite(diff.process_var):
        return row | {"shift": math.exp(estimate), "_log_shift": estimate}
    variance, total_df = welch([(se * se, dof), (diff.process_var, diff.process_df)])
    shift, low, high = _interval(estimate, variance, total_df, level)
    return row | {
        "shift": shift,
        "shift_low": low,
        "shift_high": high,
        "df": total_df,
        "p_value": _two_sided(estimate, variance, total_df),
        "_log_shift": estimate,
    }


def budget_rows(
    diff: Difference, levels: tuple[np.ndarray, np.ndarray], shifted: bool, level: float
) -> list[dict[str, Any]]:
    """List, per common budget, the ratio new / base with its interval.

    When the curve has a shift (``shifted``), each row also holds the departure from it
    with a two-sided p-value. ``levels`` are the base and new log levels on the common budgets.
    """
    weights = diff.weights()
    rows = []
    for t in range(diff.x.size):
        variance, dof = welch(
            [(float(diff.var[t]), float(diff.df[t])), (diff.process_var, diff.process_df)]
        )
        row: dict[str, Any] = {
            "x": float(diff.x[t]),
            "level_base": math.exp(float(levels[0][t])),
            "level_new": math.exp(float(levels[1][t])),
            "ratio": math.exp(float(diff.d[t])),
            "in_anomaly": not bool(diff.normal[t]),
        }
        if math.isfinite(variance):
            _, row["ratio_low"], row["ratio_high"] = _interval(
                float(diff.d[t]), variance, dof, level
            )
        if shifted:
            c = -weights.copy()
            c[t] += 1.0
            estimate, se, c_df = contrast_test(
                c, diff.d, diff.var, diff.df, diff.tau2, diff.tau2_df
            )
            row |= {
                "vs_shift": math.exp(estimate),
                "p_value": _two_sided(estimate, se * se, c_df),
            }
        rows.append(row)
    return rows
