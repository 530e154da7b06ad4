r"""Linear contrasts of a curve's cell levels, and their t tests.

Every statistic of the interval and change-point tests is a contrast
:math:`D = \sum_t c_t \ell_t` of log cell levels, so

.. math::  \mathrm{Var}(D) = \sum_t c_t^2 (v_t + \tau^2),

with :math:`v_t` the cell's sampling variance (df :math:`d_t`) and :math:`\tau^2` the
curve's between-cell variance (df :math:`d_\tau`). Its degrees of freedom are
Welch-Satterthwaite's, :math:`\mathrm{Var}(D)^2 / (\sum_t c_t^4 v_t^2 / d_t +
(\tau^2 \sum_t c_t^2)^2 / d_\tau)`, and the reference is Student's t. The ratio
:math:`e^D` gets the t interval of :math:`D`.

The contrasts themselves: a precision-weighted mean difference of two sets of cells
(:func:`level_contrast`), a level shift along a common slope (:func:`jump_contrast`),
and an interval's mean against the weighted least-squares line through its flanks
(:func:`trend_contrast`, :func:`flank_line`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

__all__ = [
    "ContrastResults",
    "broken_line_jump_contrast",
    "contrast_test",
    "flank_line",
    "jump_contrast",
    "level_contrast",
    "scan_family",
    "scan_p_values",
    "trend_contrast",
    "treat_p_values",
]


def _t_sf(z: np.ndarray, dof: np.ndarray) -> np.ndarray:
    """Upper tail of Student's t, ``scipy.stats.t.sf`` without its per-call overhead.

    ``scipy.special.stdtr`` is the function ``scipy.stats.t`` evaluates; it is called
    directly because the tests run per curve and the distribution object's argument
    checking costs more than the arithmetic. Infinite df is the normal.
    """
    z, dof = np.broadcast_arrays(np.asarray(z, dtype=float), np.asarray(dof, dtype=float))
    return np.where(
        np.isinf(dof), special.ndtr(-z), special.stdtr(np.where(np.isinf(dof), 1.0, dof), -z)
    )


def _t_quantile(q: float, dof: np.ndarray) -> np.ndarray:
    """Quantile of Student's t (``scipy.stats.t.ppf`` through ``scipy.special``)."""
    dof = np.asarray(dof, dtype=float)
    return np.where(
        np.isinf(dof), special.ndtri(q), special.stdtrit(np.where(np.isinf(dof), 1.0, dof), q)
    )


def _tail_p(z: np.ndarray, dof: np.ndarray, direction: str) -> np.ndarray:
    """One-sided t tail in ``direction`` (``up``/``down``), two-sided for ``both``."""
    if direction == "up":
        return _t_sf(z, dof)
    if direction == "down":
        return _t_sf(-np.asarray(z), dof)
    return np.minimum(1.0, 2.0 * _t_sf(np.abs(z), dof))


def scan_p_values(
    estimate: np.ndarray, se: np.ndarray, dof: np.ndarray, direction: str, scan: float
) -> np.ndarray:
    """Return t p-values of ``estimate / se``, Bonferroni-adjusted for ``scan`` tests.

    One-sided in ``direction`` (two-sided for ``both``), capped at 1. A zero standard error gives
    an infinite statistic.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(se > 0, estimate / se, np.sign(estimate) * np.inf)
    return np.minimum(1.0, scan * _tail_p(z, dof, direction))


def _treat_tail(c: np.ndarray, shift: np.ndarray, dof: np.ndarray, direction: str) -> np.ndarray:
    """TREAT tail: ``P(T >= c)`` one-sided; two-sided adds ``P(T >= c + shift)``."""
    tail = _t_sf(c, dof)
    return tail + _t_sf(c + shift, dof) if direction == "both" else tail


def treat_p_values(
    estimate: np.ndarray,
    se: np.ndarray,
    dof: np.ndarray,
    direction: str,
    threshold: float | np.ndarray,
    family: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    r"""Return TREAT p-values against a log-ratio ``threshold``, scan-adjusted.

    The null hypothesis of each test is that its log ratio :math:`D` is at most
    ``threshold`` away from 0 in ``direction`` (McCarthy and Smyth 2009): with
    :math:`c = (|D| - \tau)/\mathrm{se}` (signed :math:`D` for one direction), the
    p-value is :math:`P(T \ge c)`, plus :math:`P(T \ge c + 2\tau/\mathrm{se})` two-sided,
    where :math:`T` is Student's t with the test's df.

    ``threshold`` is one value, or one per test when no ``family`` is given.

    ``family`` is ``(se, count)`` of the other intervals the test was picked from. Each
    adds the chance that it would have looked as extreme on a smooth curve, a union
    bound: :math:`\sum_w n_w\,P(T \ge c + \tau/\mathrm{se}_w)`. With
    :math:`\tau = 0` this is Bonferroni over the family; with :math:`\tau > 0` the
    intervals whose noise is small against the threshold contribute almost nothing,
    so the adjustment is paid for the short, noisy intervals that could pass.
    """
    estimate, se, dof = (np.asarray(a, dtype=float) for a in (estimate, se, dof))
    signed = {"up": estimate, "down": -estimate, "both": np.abs(estimate)}[direction]
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.where(se > 0, (signed - threshold) / se, np.sign(signed - threshold) * np.inf)
        shift = np.where(se > 0, 2.0 * threshold / se, np.inf)
    p = _treat_tail(c, shift, dof, direction)
    if family is not None:
        family_se, count = family
        with np.errstate(divide="ignore", invalid="ignore"):
            lift = np.where(family_se > 0, threshold / family_se, 0.0)
        terms = _treat_tail(
            c[:, None] + lift[None, :], 2.0 * lift[None, :], dof[:, None], direction
        )
        p = p + terms @ count
    return np.minimum(1.0, p)


def scan_family(total_var: np.ndarray, flank: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(se, count)`` of every interval of a curve, by width and kind.

    The family of :func:`treat_p_values`.

    Standard errors are those of an interval's mean against flanks of ``clip(width,
    *flank)`` cells, with the curve's median total variance: two flanks for an interior
    interval, one for an interval at an end of the grid. Intervals of up to
    ``flank[1]`` cells are counted one by one at their own cells' variance (the flanks
    keep the median): where a few cells are far noisier than the rest (two of three
    fresh processes at a budget drew a slow kernel), those cells are the intervals
    that can pass by chance, and at the median noise they would count for nothing.
    """
    t = total_var.size
    s2 = float(np.median(total_var))
    width = np.arange(1, t)
    f = np.clip(width, *flank)
    interior_count = np.maximum(t - 1 - width, 0).astype(float)
    interior_se = np.sqrt(s2 * (1.0 / width + 1.0 / (2.0 * f)))
    edge_se = np.sqrt(s2 * (1.0 / width + 1.0 / np.minimum(f, t - width)))
    edge_count = np.full(width.size, 2.0)
    precision = np.r_[0.0, np.cumsum(1.0 / total_var)]
    own_se, own_count = [], []
    for w in range(1, min(flank[1], t - 2) + 1):
        starts = np.arange(1, t - w)
        inner = 1.0 / (precision[starts + w] - precision[starts])
        ends = 1.0 / (precision[[w, t]] - precision[[0, t - w]])
        own_se += [
            np.sqrt(inner + s2 / (2.0 * f[w - 1])),
            np.sqrt(ends + s2 / min(f[w - 1], t - w)),
        ]
        own_count += [np.ones(starts.size), np.ones(2)]
        interior_count[w - 1] = 0.0
        edge_count[w - 1] = 0.0
    return (
        np.concatenate([interior_se, edge_se, *own_se]),
        np.concatenate([interior_count, edge_count, *own_count]),
    )


@dataclass(frozen=True)
class ContrastResults:
    """Estimates of log ratios with their tests, aligned arrays (one entry per test)."""

    estimate: np.ndarray
    se: np.ndarray
    df: np.ndarray
    p_value: np.ndarray

    @property
    def size(self) -> int:
        """Number of tests."""
        return int(self.estimate.size)

    def ratio_interval(self, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:math:`e^D` and its two-sided t interval at ``level``."""
        half = _t_quantile((1.0 + level) / 2.0, self.df) * self.se
        with np.errstate(over="ignore"):  # a ratio beyond 1e308 is reported as inf
            return np.exp(self.estimate), np.exp(self.estimate - half), np.exp(self.estimate + half)


def contrast_test(
    c: np.ndarray,
    level: np.ndarray,
    var: np.ndarray,
    df: np.ndarray,
    tau2: float,
    tau2_df: float,
) -> tuple[float, float, float]:
    """Estimate, standard error and Welch-Satterthwaite df of the contrast ``c @ level``."""
    estimate = float(c @ level)
    sampling = c**2 * var
    process = float(np.sum(c**2) * tau2)
    total = float(sampling.sum() + process)
    denominator = float(np.sum(sampling**2 / df)) + (process**2 / tau2_df if tau2_df > 0 else 0.0)
    dof = total**2 / denominator if denominator > 0 else np.inf
    return estimate, float(np.sqrt(total)), float(dof)


def level_contrast(total_var: np.ndarray, inside: np.ndarray, flank: np.ndarray) -> np.ndarray:
    """Precision-weighted mean over ``inside`` minus that over ``flank``."""
    c = np.zeros(total_var.size)
    w_in = 1.0 / total_var[inside]
    w_fl = 1.0 / total_var[flank]
    c[inside] = w_in / w_in.sum()
    c[flank] -= w_fl / w_fl.sum()
    return c


def _wls_projection(design: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Rows map observations to WLS coefficients: ``(X'WX)^-1 X'W``."""
    xtw = design.T * weight
    return np.linalg.solve(xtw @ design, xtw)


def flank_line(
    u: np.ndarray, total_var: np.ndarray, inside: np.ndarray, flank: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return the contrast of :func:`trend_contrast` and the flank line.

    ``(c, rows, proj)``: contrast coefficients, and the line through the flank as ``rows @ proj @
    values[flank]`` at the inside cells.

    Weighted least squares of a line (or a constant) is solved in closed form: it runs
    for every candidate interval, where a general solver's call overhead dominates.
    """
    w_in = 1.0 / total_var[inside]
    w_in = w_in / w_in.sum()
    u_bar = float(w_in @ u[inside])
    uf = u[flank] - u_bar
    wf = 1.0 / total_var[flank]
    sw, swu, swuu = wf.sum(), wf @ uf, wf @ (uf * uf)
    det = sw * swuu - swu * swu
    if np.ptp(uf) > 0 and det > 1e-12 * sw * swuu:
        # (X'WX)^-1 X'W for X = [1, u - u_bar]
        proj = np.stack([(swuu - swu * uf) * wf, (sw * uf - swu) * wf]) / det
        rows = np.column_stack([np.ones(inside.size), u[inside] - u_bar])
    else:
        proj = (wf / sw)[None, :]
        rows = np.ones((inside.size, 1))
    c = np.zeros(u.size)
    c[inside] += w_in
    c[flank] -= proj[0]
    return c, rows, proj


def trend_contrast(
    u: np.ndarray, total_var: np.ndarray, inside: np.ndarray, flank: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients of "interval level minus flank trend", and the per-cell trend weights.

    ``inside`` and ``flank`` are index arrays. The interval level is the
    precision-weighted mean of ``inside`` levels; the trend is the WLS line through the
    ``flank`` cells (a constant when they sit at one position), evaluated at the
    interval's weighted mean position. Returns ``(c, h)`` where ``c`` has one entry per
    cell and ``h[k]`` gives the line's value at ``u[inside[k]]`` as ``h[k] @ level``.
    """
    c, rows, proj = flank_line(u, total_var, inside, flank)
    at = np.zeros((inside.size, u.size))
    at[:, flank] = rows @ proj
    return c, at


def jump_contrast(
    u: np.ndarray, total_var: np.ndarray, left: np.ndarray, right: np.ndarray
) -> np.ndarray:
    r"""Coefficients of the level shift from ``left`` cells to ``right`` cells.

    ANCOVA with a common slope: :math:`\ell = a + b u + D\,[\text{right}]`, fitted by
    WLS on both sides; a change of slope alone gives :math:`D \approx 0`. Without two
    distinct positions on either side the slope is dropped (difference of weighted means).
    """
    t = u.size
    cells = np.concatenate([left, right])
    indicator = np.concatenate([np.zeros(left.size), np.ones(right.size)])
    has_slope = np.ptp(u[left]) > 0 or np.ptp(u[right]) > 0
    centre = 0.5 * (u[left[-1]] + u[right[0]]) if left.size and right.size else 0.0
    columns = [np.ones(cells.size)]
    if has_slope:
        columns.append(u[cells] - centre)
    columns.append(indicator)
    proj = _wls_projection(np.column_stack(columns), 1.0 / total_var[cells])
    c = np.zeros(t)
    c[cells] = proj[-1]
    return c


def broken_line_jump_contrast(
    u: np.ndarray, total_var: np.ndarray, left: np.ndarray, right: np.ndarray
) -> np.ndarray | None:
    r"""Coefficients of the level shift from ``left`` to ``right`` with a slope each.

    :math:`\ell = a + b\,(u - c) + D\,[\text{right}] + e\,(u - c)\,[\text{right}]`,
    fitted by WLS, :math:`c` midway between the two runs: :math:`D` is the shift at the
    boundary between two lines. A change of slope alone, which a common slope
    (:func:`jump_contrast`) partly reads as a shift, gives :math:`D \approx 0`.
    ``None`` when a side has fewer than three cells (its slope is not estimable apart).
    """
    if left.size < 3 or right.size < 3:
        return None
    cells = np.concatenate([left, right])
    indicator = np.concatenate([np.zeros(left.size), np.ones(right.size)])
    centred = u[cells] - 0.5 * (u[left[-1]] + u[right[0]])
    design = np.column_stack([np.ones(cells.size), centred, indicator, indicator * centred])
    proj = _wls_projection(design, 1.0 / total_var[cells])
    c = np.zeros(u.size)
    c[cells] = proj[2]
    return c
