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
    "contrast_test",
    "flank_line",
    "jump_contrast",
    "level_contrast",
    "scan_p_values",
    "trend_contrast",
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
