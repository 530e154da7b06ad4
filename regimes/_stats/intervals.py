"""Cell levels with honest variances, and tests of intervals against their flanking trend.

Everything here works on the log scale of the measured quantity, where a multiplicative
slowdown is a shift and noise is close to homoscedastic. Two layers:

**Cell levels from raw replicates** (:func:`cell_levels`). A cell is one ``x`` of one
curve. Its level :math:`\\ell_t` is the median of the log trials after removing session
main effects (a session that spans several cells of a curve gets its offset
:math:`\\alpha_s`, the median over its cells of its session median minus the cell's
median of session medians). The sampling variance of :math:`\\ell_t` is the larger of
two estimates, each moderated towards the curve's pooled value the way
limma moderates gene-wise variances, :math:`\\tilde s^2 = (d_0 s_0^2 + d\\,s^2)/(d_0 + d)`
with :math:`d_0` = :data:`PRIOR_DF` and df :math:`d_0 + d`:

* within-session noise, :math:`\\kappa(n_t)\\,\\tilde s_{w,t}^2/n_t`: the pooled value
  :math:`\\sigma_w` is the median absolute pairwise difference of log trials within
  sessions of the curve over :math:`\\sqrt2\\,\\Phi^{-1}(3/4)` (robust to single-trial
  hiccups), the cell's own is its within-session variance (df :math:`n_t - S_t`), and
  :math:`\\kappa(n)` is :math:`n` times the variance of the median of ``n`` standard
  normals (1 for n <= 2, tending to :math:`\\pi/2`). A cell whose trials disagree, say
  two hiccups among three trials, is no more certain than its replicates say;
* between sessions, :math:`\\tilde B_t/S_t`: the variance of the cell's session
  medians (df :math:`S_t - 1`) moderated towards the curve's pooled value. One slow
  process among the sessions of a cell makes that cell uncertain, not anomalous.

On top, a between-cell ("process") variance :math:`\\tau^2` shared by the curve's cells
(:func:`between_cell_variance`): the curve's wobble around any smooth trend beyond
replication noise, the robust spread of the cells around the fitted trend and
segments minus the sampling part (a first estimate for segmenting comes from second
differences that annihilate straight lines). A few jumps do not move it.

**Interval tests** (:func:`test_intervals`). Every statistic is a linear contrast
:math:`D = \\sum_t c_t \\ell_t` of cell levels, so
:math:`\\mathrm{Var}(D) = \\sum_t c_t^2 (v_t + \\tau^2)`, with Welch-Satterthwaite degrees
of freedom, a t reference, and a ratio :math:`e^D` with a t interval. Contrasts of
residuals from the curve's smooth trend :math:`G` (:class:`SmoothTrend`, a robust
polynomial fitted with a free level per segment) stay linear in the levels because
:math:`G` is, so the trend's own uncertainty is part of every variance.

* An *interior* interval ``[i, j]`` is compared with the straight line (weighted least
  squares) through up to ``flank`` residual cells on each side, taken from the
  neighbouring segments only: :math:`D` is the precision-weighted mean of the
  interval's residuals minus the line at their weighted mean position. A plateau may
  cover most of the grid; its flanks still set the trend. It must also jump up at its
  start and fall back at its end.
* An interval that runs to the end of the grid (a *step*) or starts at its beginning
  has one flank, and extrapolating a line over a long interval would mistake a change
  of slope for a level shift: its statistic is the mean residual over the interval
  minus that over the flank, gated by the jump at its inner boundary and by the
  segment at the grid's end standing up too (no recovery).

Gates enter as an intersection-union test: the p-value is the largest of the gates'
and the main test's.

Post-selection. Candidates are chosen by segmenting the same data, which would make a
naive p-value far too small. Each p-value is therefore Bonferroni-adjusted for the scan
over every interval the grid has (:math:`T(T+1)/2 - 1`, or :math:`T - 1` boundaries for
change points): whatever rule picked the candidate, the adjusted p-value stays valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from scipy import special, stats

__all__ = [
    "CurveEstimates",
    "ContrastResults",
    "IntervalTests",
    "SmoothTrend",
    "between_cell_variance",
    "candidate_intervals",
    "cell_levels",
    "contrast_test",
    "jump_contrast",
    "level_contrast",
    "median_variance_factor",
    "qn_scale_rows",
    "select_non_overlapping",
    "test_intervals",
    "t_quantile",
    "t_sf",
    "trend_contrast",
]

_MEDIAN_VARIANCE = np.array(
    [
        1.0,
        1.0,
        1.349,
        1.192,
        1.434,
        1.288,
        1.473,
        1.344,
        1.497,
        1.382,
        1.509,
        1.41,
        1.521,
        1.431,
        1.526,
        1.446,
        1.529,
        1.46,
        1.536,
        1.47,
        1.541,
        1.475,
        1.541,
        1.485,
        1.544,
        1.492,
        1.543,
        1.496,
        1.548,
        1.499,
        1.55,
        1.506,
        1.551,
        1.509,
        1.55,
        1.51,
        1.553,
        1.517,
        1.553,
        1.519,
    ]
)
"""n times the variance of the median of n standard normals, n = 1..40 (2 million
simulated samples each; even n average the middle pair)."""

_PAIR_DIFF_MEDIAN = float(np.sqrt(2.0) * stats.norm.ppf(0.75))
"""Median of |X - Y| for independent standard normals."""

_QN_CONSTANT = float(1.0 / (np.sqrt(2.0) * stats.norm.ppf(5.0 / 8.0)))

DIRECTIONS = ("up", "down", "both")

VARIANCE_FLOOR = 1e-8
"""Smallest sampling variance of a cell's log level, (0.01 %)^2: timers round, and
identical trials would otherwise make any difference between cells infinitely
significant."""

PRIOR_DF = 4.0
"""Weight, in degrees of freedom, of a curve's pooled noise when it is combined with a
cell's own estimate (empirical-Bayes moderation): a cell's replicates can raise its
variance far above the curve's, but two or three trials cannot make it much smaller."""


def median_variance_factor(n: np.ndarray) -> np.ndarray:
    """:math:`\\kappa(n)`: ``n * Var(median of n standard normals)`` (pi/2 beyond 40)."""
    n = np.asarray(n, dtype=np.int64)
    out = np.full(n.shape, np.pi / 2.0)
    small = (n >= 1) & (n <= _MEDIAN_VARIANCE.size)
    out[small] = _MEDIAN_VARIANCE[n[small] - 1]
    return out


def qn_scale_rows(values: np.ndarray) -> np.ndarray:
    """Qn scale (Croux & Rousseeuw) of each row of a 2-D array, NaN-free rows.

    Same estimator and constant as :func:`statsmodels.robust.scale.qn_scale`; written
    here because that one applies a Python function per row, which costs a quarter of a
    millisecond per curve, while one vectorised partition serves all curves of a length.
    """
    values = np.atleast_2d(np.asarray(values, dtype=float))
    n = values.shape[1]
    if n < 2:
        return np.full(values.shape[0], np.nan)
    if n > 400:
        # all pairs would cost n^2 memory; statsmodels has the O(n log n) algorithm
        from statsmodels.robust.scale import qn_scale

        return np.asarray([qn_scale(row) for row in values], dtype=float)
    h = n // 2 + 1
    k = h * (h - 1) // 2
    i, j = np.triu_indices(n, k=1)
    diffs = np.abs(values[:, i] - values[:, j])
    return _QN_CONSTANT * np.partition(diffs, k - 1, axis=1)[:, k - 1]


# ---------------------------------------------------------------------------------------
# cell levels from raw replicates
# ---------------------------------------------------------------------------------------


def _within_session_scale(
    frame: pl.DataFrame, curve: str, x: str, session: str, value: str
) -> pl.DataFrame:
    """Per curve: robust within-session scale ``sigma_w`` of ``value``.

    Median absolute difference over all pairs of trials that share a cell and a session,
    over the normal-theory constant; the pairs of a block are the same set whatever the
    order of its rows. Curves without any such pair get null.
    """
    # the set of pairs of a block does not depend on the order of its trials
    block_keys = [curve, x, session]
    ordered = frame.select([*block_keys, value]).sort(block_keys, maintain_order=False)
    blocks = ordered.group_by(block_keys, maintain_order=True).agg(pl.len().alias("_size"))
    sizes = blocks.get_column("_size").to_numpy()
    curves = blocks.get_column(curve).to_numpy()
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    values = ordered.get_column(value).to_numpy()
    diff_parts, curve_parts = [], []
    for m in np.unique(sizes):
        if m < 2:
            continue
        pick = sizes == m
        block_values = values[starts[pick, None] + np.arange(m)]
        i, j = np.triu_indices(int(m), k=1)
        diff_parts.append(np.abs(block_values[:, j] - block_values[:, i]).ravel())
        curve_parts.append(np.repeat(curves[pick], i.size))
    if not diff_parts:
        return pl.DataFrame(
            {curve: np.unique(curves), "sigma_w": np.full(np.unique(curves).size, np.nan)}
        )
    ids = np.unique(curves)
    counts = np.unique(curves, return_counts=True)[1]
    if len(diff_parts) == 1 and np.unique(counts).size == 1 and np.all(sizes == sizes[0]):
        # one block size and as many blocks per curve: the pairs of each curve are one
        # contiguous row (blocks are sorted by curve), and a row-wise median is a
        # partition, far cheaper than a grouped median over millions of pairs
        rows = diff_parts[0].reshape(ids.size, -1)
        return pl.DataFrame({curve: ids, "sigma_w": np.median(rows, axis=1) / _PAIR_DIFF_MEDIAN})
    pairs = pl.DataFrame({curve: np.concatenate(curve_parts), "_d": np.concatenate(diff_parts)})
    return pairs.group_by(curve).agg((pl.col("_d").median() / _PAIR_DIFF_MEDIAN).alias("sigma_w"))


def cell_levels(
    frame: pl.DataFrame,
    curve: str,
    x: str,
    value: str,
    session: str,
) -> pl.DataFrame:
    """Per cell (``curve``, ``x``): level, its sampling variance and df.

    ``curve`` is an integer id of the curve, ``value`` holds log-scale trials and
    ``session`` the process each ran in. Returns ``curve``, ``x``, ``n``, ``n_sessions``,
    ``level``, ``var``, ``df`` and the curve's ``sigma_w``, sorted by ``(curve, x)``.
    See the module docstring for the maths.
    """
    cell_keys = [curve, x]
    per_session = frame.group_by([*cell_keys, session]).agg(pl.col(value).median().alias("_m"))
    per_session = per_session.with_columns(
        (pl.col("_m") - pl.col("_m").median().over(cell_keys)).alias("_dev"),
        pl.len().over(cell_keys).alias("_S"),
    )
    offsets = (
        per_session.filter(pl.col("_S") > 1)
        .group_by([curve, session])
        .agg(pl.col("_dev").median().alias("_alpha"), pl.len().alias("_span"))
        .filter(pl.col("_span") >= 3)
        .drop("_span")
    )
    adjusted = frame.select([curve, x, session, value])
    if offsets.height:
        adjusted = adjusted.join(offsets, on=[curve, session], how="left", nulls_equal=True)
        adjusted = adjusted.with_columns(
            (pl.col(value) - pl.col("_alpha").fill_null(0.0)).alias("_adj")
        )
    else:
        adjusted = adjusted.with_columns(pl.col(value).alias("_adj"))
    session_stats = (
        adjusted.group_by([*cell_keys, session])
        .agg(
            pl.col("_adj").median().alias("_m"),
            pl.len().alias("_ns"),
            (pl.col("_adj").var(ddof=0) * pl.len()).alias("_ss"),
        )
        .sort([*cell_keys, session])
    )
    # sessions in a fixed order: float sums and variances must not depend on hashing
    cells = session_stats.group_by(cell_keys, maintain_order=True).agg(
        pl.col("_ns").sum().cast(pl.Int64).alias("n"),
        pl.len().cast(pl.Int64).alias("n_sessions"),
        pl.col("_ss").sum().alias("_ss"),
        pl.col("_m").var(ddof=1).fill_null(0.0).alias("_between"),
        pl.col("_m").first().alias("level"),
    )
    if cells.get_column("n_sessions").max() > 1:
        # the level is the median of all of a cell's trials, not of its session medians
        cells = cells.drop("level").join(
            adjusted.group_by(cell_keys).agg(pl.col("_adj").median().alias("level")), on=cell_keys
        )
    cells = (
        cells.join(_within_session_scale(adjusted, curve, x, session, "_adj"), on=curve, how="left")
        .with_columns(
            # pairs share trials and a median keeps about half the information of a
            # classical variance: half the curve's within-session df
            (0.5 * (pl.col("n") - pl.col("n_sessions")).sum().over(curve))
            .clip(1.0, None)
            .alias("_pooled_df")
        )
        .sort(cell_keys)
    )
    n = cells.get_column("n").to_numpy()
    n_sessions = cells.get_column("n_sessions").to_numpy()
    curve_ids = cells.get_column(curve).to_numpy()
    kappa = median_variance_factor(n)
    own_df = (n - n_sessions).astype(float)
    pooled_df = cells.get_column("_pooled_df").to_numpy()
    sigma_w2 = cells.get_column("sigma_w").fill_nan(None).fill_null(0.0).to_numpy() ** 2
    own_w2 = cells.get_column("_ss").to_numpy() / np.maximum(own_df, 1.0)
    within = (PRIOR_DF * sigma_w2 + own_df * own_w2) / (PRIOR_DF + own_df)
    within_df = np.minimum(pooled_df, PRIOR_DF + own_df)
    between_own = cells.get_column("_between").to_numpy()
    between_df = (n_sessions - 1).astype(float)
    # pooled between-session variance of the curve: median over its multi-session
    # cells, each scaled by the median of its chi-square law so the median is unbiased
    multi = n_sessions > 1
    between_pool = np.zeros(n.size)
    if multi.any():
        scaled = np.where(
            multi, between_own * between_df / stats.chi2.median(np.maximum(between_df, 1)), np.nan
        )
        pooled = (
            pl.DataFrame({"c": curve_ids, "b": scaled})
            .with_columns(pl.col("b").fill_nan(None).median().over("c").fill_null(0.0).alias("p"))
            .get_column("p")
            .to_numpy()
        )
        between_pool = pooled
    between = (PRIOR_DF * between_pool + between_df * between_own) / (PRIOR_DF + between_df)
    estimates = np.stack([kappa * within / n, np.where(multi, between / n_sessions, 0.0)])
    dfs = np.stack([within_df, PRIOR_DF + between_df])
    pick = np.argmax(estimates, axis=0)
    cols = np.arange(n.size)
    return cells.select([*cell_keys, "n", "n_sessions", "level", "sigma_w"]).with_columns(
        pl.Series("var", np.maximum(estimates[pick, cols], VARIANCE_FLOOR)),
        pl.Series("df", np.maximum(dfs[pick, cols], 1.0)),
    )


# ---------------------------------------------------------------------------------------
# between-cell variance
# ---------------------------------------------------------------------------------------


def _second_difference_weights(u: np.ndarray) -> np.ndarray:
    """Rows of unit-norm weights on (t-1, t, t+1) that vanish on straight lines in u."""
    h1 = np.diff(u)[:-1]
    h2 = np.diff(u)[1:]
    w = np.stack([1.0 / h1, -(1.0 / h1 + 1.0 / h2), 1.0 / h2], axis=1)
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def between_cell_variance(
    u: np.ndarray,
    level: np.ndarray,
    var: np.ndarray,
    breaks: Sequence[int] | None = None,
    smooth: np.ndarray | None = None,
) -> tuple[float, float]:
    """:math:`(\\tau^2, df)` of one curve, or ``(nan, 0)`` with too few cells.

    Without ``breaks``: MAD (about the median) of the unit-norm second differences,
    which tolerates the few large values a jump creates even when they come in
    same-signed pairs (a pairwise scale such as Qn does not); df: the differences
    overlap (about half as many independent ones) and the MAD is 37 % efficient.

    With ``breaks`` and the curve's ``smooth`` trend: the residuals
    :math:`\\ell_t - G_t` minus their segment's mean, inflated by
    :math:`1/\\sqrt{1 - 1/m}` for a segment of ``m`` cells, are nearly independent with
    variance :math:`v_t + \\tau^2`; their Qn scale (82 % efficient) gives the total.
    Used when it has at least 4 degrees of freedom; it has about twice those of the
    second differences, which matters on short curves where :math:`\\tau^2` dominates.

    Either way :math:`\\tau^2` is the total minus the median sampling variance.
    """
    u = np.asarray(u, dtype=float)
    t = u.size
    if breaks is not None and smooth is not None:
        edges = [0, *[int(b) for b in breaks], t]
        parts, sampling = [], []
        for lo, hi in zip(edges[:-1], edges[1:]):
            m = hi - lo
            if m < 2:
                continue
            r = level[lo:hi] - smooth[lo:hi]
            parts.append((r - r.mean()) / np.sqrt(1.0 - 1.0 / m))
            sampling.append(var[lo:hi])
        dof = 0.82 * sum(p.size - 1 for p in parts)
        if dof >= 4:
            total = float(qn_scale_rows(np.concatenate(parts)[None, :])[0] ** 2)
            return max(0.0, total - float(np.median(np.concatenate(sampling)))), dof
    if t < 5:
        return float("nan"), 0.0
    w = _second_difference_weights(u)
    d2 = w[:, 0] * level[:-2] + w[:, 1] * level[1:-1] + w[:, 2] * level[2:]
    sampling_d2 = w[:, 0] ** 2 * var[:-2] + w[:, 1] ** 2 * var[1:-1] + w[:, 2] ** 2 * var[2:]
    spread = 1.4826 * float(np.median(np.abs(d2 - np.median(d2))))
    tau2 = max(0.0, spread**2 - float(np.median(sampling_d2)))
    return tau2, max(1.0, 0.5 * 0.37 * d2.size)


# ---------------------------------------------------------------------------------------
# contrasts
# ---------------------------------------------------------------------------------------


def _wls_projection(design: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Rows map observations to WLS coefficients: ``(X'WX)^-1 X'W``."""
    xtw = design.T * weight
    return np.linalg.solve(xtw @ design, xtw)


def _flank_line(
    u: np.ndarray, total_var: np.ndarray, inside: np.ndarray, flank: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(c, rows, proj)``: contrast coefficients of :func:`trend_contrast`, and the line
    through the flank as ``rows @ proj @ values[flank]`` at the inside cells.

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
    c, rows, proj = _flank_line(u, total_var, inside, flank)
    at = np.zeros((inside.size, u.size))
    at[:, flank] = rows @ proj
    return c, at


def jump_contrast(
    u: np.ndarray, total_var: np.ndarray, left: np.ndarray, right: np.ndarray
) -> np.ndarray:
    """Coefficients of the level shift from ``left`` cells to ``right`` cells.

    ANCOVA with a common slope: :math:`\\ell = a + b u + D\\,[\\text{right}]`, fitted by
    WLS on both sides; a change of slope alone gives :math:`D \\approx 0`. Without two
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


# ---------------------------------------------------------------------------------------
# candidates and their tests
# ---------------------------------------------------------------------------------------


MIN_EDGE_FLANK = 3
"""Flank cells an interval touching an end of the grid needs on its one side."""


def candidate_intervals(
    n_cells: int,
    breaks: Sequence[int],
    max_segments: int = 25,
    max_candidates: int = 2000,
    min_edge_flank: int = MIN_EDGE_FLANK,
) -> list[tuple[int, int, int, int]]:
    """Runs of consecutive segments, as ``(start, end, first_segment, last_segment)``.

    ``breaks`` are the indices where a new segment starts (sorted, in ``1..n_cells-1``).
    Every run of at most ``max_segments`` segments is a candidate except the whole grid,
    single cells at either end of it (see :func:`test_intervals`), and runs touching an
    end whose one flank has fewer than ``min_edge_flank`` cells: their trend would be
    drawn from one side only, and one or two cells cannot tell a level from a
    curvature the smooth trend misses (a quadratic cost read on a log axis bends; a
    step "after" one cell is then an artefact of the fit). Such a shift is still
    reported as a change point. With many segments runs are shortened to keep about
    ``max_candidates``. The scan adjustment of :func:`test_intervals` covers every
    interval, so this changes power, not validity.
    """
    edges = [0, *[int(b) for b in breaks], n_cells]
    n_seg = len(edges) - 1
    # a long, finely cut curve keeps shorter runs, so the count stays near max_candidates
    longest = max(1, min(max_segments, max_candidates // n_seg))
    out = []
    for a in range(n_seg):
        for b in range(a, min(n_seg, a + longest)):
            start, end = edges[a], edges[b + 1] - 1
            at_edge = start == 0 or end == n_cells - 1
            if (a == 0 and b == n_seg - 1) or (at_edge and start == end):
                continue
            if at_edge and (start if end == n_cells - 1 else n_cells - 1 - end) < min_edge_flank:
                continue
            out.append((start, end, a, b))
    return out


@dataclass(frozen=True)
class SmoothTrend:
    """A curve's smooth trend :math:`G = B\\,M\\,\\ell`, linear in the levels.

    ``basis`` (T x k) holds the polynomial columns and ``coef_map`` (k x T) maps levels
    to their coefficients at the fit's final robust weights, so any contrast of the
    residuals :math:`c^\\top(\\ell - G)` is the contrast :func:`adjust` ``(c)`` of the
    levels themselves, and its variance includes the trend's own uncertainty.
    """

    values: np.ndarray
    basis: np.ndarray
    coef_map: np.ndarray

    def adjust(self, c: np.ndarray) -> np.ndarray:
        """Coefficients on the levels of the residual contrast ``c @ (level - G)``."""
        return c - (c @ self.basis) @ self.coef_map

    @classmethod
    def fixed(cls, values: np.ndarray) -> SmoothTrend:
        """A trend taken as known (its uncertainty ignored), e.g. from another fit."""
        values = np.asarray(values, dtype=float)
        return cls(values, np.zeros((values.size, 0)), np.zeros((0, values.size)))


@dataclass(frozen=True)
class CurveEstimates:
    """One curve's cells on the log scale, in increasing ``x`` (``u`` = trend coordinate)."""

    u: np.ndarray
    level: np.ndarray
    var: np.ndarray
    df: np.ndarray
    tau2: float
    tau2_df: float

    @property
    def total_var(self) -> np.ndarray:
        return self.var + self.tau2


@dataclass(frozen=True)
class ContrastResults:
    """Estimates of log ratios with their tests, aligned arrays (one entry per test)."""

    estimate: np.ndarray
    se: np.ndarray
    df: np.ndarray
    p_value: np.ndarray

    @property
    def size(self) -> int:
        return int(self.estimate.size)

    def ratio_interval(self, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:math:`e^D` and its two-sided t interval at ``level``."""
        half = t_quantile((1.0 + level) / 2.0, self.df) * self.se
        with np.errstate(over="ignore"):  # a ratio beyond 1e308 is reported as inf
            return np.exp(self.estimate), np.exp(self.estimate - half), np.exp(self.estimate + half)


@dataclass(frozen=True)
class IntervalTests(ContrastResults):
    """Tests of candidate intervals of one curve."""

    start: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    end: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    kind: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))
    peak: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    trend: list[np.ndarray] = field(default_factory=list)


def t_sf(z: np.ndarray, dof: np.ndarray) -> np.ndarray:
    """Upper tail of Student's t, ``scipy.stats.t.sf`` without its per-call overhead.

    ``scipy.special.stdtr`` is the same function as ``scipy.stats.t`` evaluates; it is
    called directly because the tests run per curve and the distribution object's
    argument checking costs more than the arithmetic. Infinite df is the normal.
    """
    z, dof = np.broadcast_arrays(np.asarray(z, dtype=float), np.asarray(dof, dtype=float))
    return np.where(
        np.isinf(dof), special.ndtr(-z), special.stdtr(np.where(np.isinf(dof), 1.0, dof), -z)
    )


def t_quantile(q: float, dof: np.ndarray) -> np.ndarray:
    """Quantile of Student's t (``scipy.stats.t.ppf`` through ``scipy.special``)."""
    dof = np.asarray(dof, dtype=float)
    return np.where(
        np.isinf(dof), special.ndtri(q), special.stdtrit(np.where(np.isinf(dof), 1.0, dof), q)
    )


def _one_sided_p(z: np.ndarray, dof: np.ndarray, direction: str) -> np.ndarray:
    if direction == "up":
        return t_sf(z, dof)
    if direction == "down":
        return t_sf(-np.asarray(z), dof)
    return np.minimum(1.0, 2.0 * t_sf(np.abs(z), dof))


def level_contrast(total_var: np.ndarray, inside: np.ndarray, flank: np.ndarray) -> np.ndarray:
    """Precision-weighted mean over ``inside`` minus that over ``flank``."""
    c = np.zeros(total_var.size)
    w_in = 1.0 / total_var[inside]
    w_fl = 1.0 / total_var[flank]
    c[inside] = w_in / w_in.sum()
    c[flank] -= w_fl / w_fl.sum()
    return c


def test_intervals(
    est: CurveEstimates,
    candidates: Sequence[tuple[int, int, int, int]],
    breaks: Sequence[int],
    *,
    smooth: SmoothTrend | np.ndarray | None = None,
    direction: str = "up",
    level: float = 0.95,
    flank: tuple[int, int] = (3, 8),
) -> IntervalTests:
    """Test each candidate interval of one curve against its flanking trend.

    ``flank = (lo, hi)``: each side uses ``clip(width, lo, hi)`` cells of the
    neighbouring segment. ``p_value`` is one-sided in ``direction`` and adjusted for the
    scan over all intervals of the grid; ``ratio`` is :math:`e^D` with a two-sided
    t interval at ``level``; ``peak`` is the index of the most extreme cell relative to
    the trend; ``kind`` is ``spike`` or ``step`` (runs to the end of the grid).

    Boundaries are gates of an intersection-union test (the p-value is the largest of
    the gates' and the main test's, valid without further adjustment). A *jump* at a
    boundary compares up to ``flank[0]`` cells on either side, within their segments:
    with ``smooth``, a smooth trend of the whole curve whose shape is trusted, the
    difference of their precision-weighted means of ``level - smooth`` (the trend's
    local slope, a level fitted on each side); without, the common-slope shift of
    :func:`jump_contrast`, whose slope costs precision.

    * An interior interval must jump up at its start and down at its end. Part of a
      step cut off by a spurious break, or a bend of the trend, cannot pass for a
      spike.
    * An interval touching an end of the grid has one flank, and needs at least two
      cells (one cell at the edge has no trend of its own side to be judged against).
      Extrapolating a line over it would mistake a change of slope for a level shift,
      so with ``smooth``, a smooth trend of the whole curve whose shape is trusted, its
      main statistic is the difference of precision-weighted means of
      ``level - smooth`` over the interval and over the flank. Gates: the jump at its
      inner boundary, and the same mean difference for the segment at the grid's end
      (for a step; its first segment for an interval from the grid's start), so a
      spike near the end cannot pass for a step that never recovers. Its trend is
      ``smooth`` shifted onto the flank. Without ``smooth`` the jump is the statistic.

    ``smooth`` is a :class:`SmoothTrend` (its uncertainty enters every contrast) or an
    array of trend values taken as known.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    if smooth is not None and not isinstance(smooth, SmoothTrend):
        smooth = SmoothTrend.fixed(smooth)
    t = est.u.size
    edges = [0, *[int(b) for b in breaks], t]
    total_var = est.total_var
    scan = max(1, t * (t + 1) // 2 - 1)
    rows: dict[str, list] = {
        k: [] for k in ("start", "end", "kind", "estimate", "se", "df", "gate", "peak")
    }
    trends: list[np.ndarray] = []

    # a main statistic whose normal tail times the scan is at least 1 has p = 1 (a t
    # tail is heavier still): its gates cannot change that and are skipped
    z_cut = stats.norm.isf((0.5 if direction == "both" else 1.0) / scan)

    def hopeless(estimate: float, se: float) -> bool:
        signed = {"up": estimate, "down": -estimate, "both": abs(estimate)}[direction]
        return bool(se > 0 and signed / se < z_cut)

    def test(c: np.ndarray, values: np.ndarray) -> tuple[float, float, float]:
        return contrast_test(c, values, est.var, est.df, est.tau2, est.tau2_df)

    for start, end, a, b in candidates:
        width = end - start + 1
        n_flank = int(np.clip(width, flank[0], flank[1]))
        left = np.arange(max(edges[a - 1] if a > 0 else 0, start - n_flank), start)
        right = np.arange(
            end + 1, min(edges[b + 2] if b + 2 < len(edges) else t, end + 1 + n_flank)
        )
        inside = np.arange(start, end + 1)
        gate = None
        first = inside[: min(n_flank, edges[a + 1] - start)]
        last = inside[-min(n_flank, end + 1 - edges[b]) :]

        def jump(after: np.ndarray, before: np.ndarray) -> tuple[float, float, float]:
            """Shift from ``before`` to the adjacent ``after`` cells along the trend."""
            if smooth is not None:
                return test(smooth.adjust(level_contrast(total_var, after, before)), est.level)
            if before[0] < after[0]:
                return test(jump_contrast(est.u, total_var, before, after), est.level)
            return test(-jump_contrast(est.u, total_var, after, before), est.level)

        if left.size and right.size:
            kind = "spike"
            flanks = np.concatenate([left, right])
            c, rows_, proj = _flank_line(est.u, total_var, inside, flanks)
            if smooth is None:
                estimate, se, dof = test(c, est.level)
                trend = rows_ @ (proj @ est.level[flanks])
            else:
                estimate, se, dof = test(smooth.adjust(c), est.level)
                residual = (est.level - smooth.values)[flanks]
                trend = smooth.values[inside] + rows_ @ (proj @ residual)
            if hopeless(estimate, se):
                gate = None
            else:
                gate = [jump(first, left), jump(last, right)]
        else:
            kind = "step" if left.size else "spike"
            if left.size:
                side, own, far = left, first, np.arange(edges[b], end + 1)
            else:
                side, own, far = right, last, np.arange(start, edges[a + 1])
            if smooth is None:
                estimate, se, dof = jump(own, side)
                _, rows_, proj = _flank_line(est.u, total_var, inside, side)
                trend = rows_ @ (proj @ est.level[side])
            else:
                estimate, se, dof = jump(inside, side)
                gate = None if hopeless(estimate, se) else [jump(own, side), jump(far, side)]
                w = 1.0 / total_var[side]
                shift = float(w @ (est.level - smooth.values)[side] / w.sum())
                trend = smooth.values[inside] + shift
        deviation = est.level[inside] - trend
        peak = inside[
            np.argmin(deviation)
            if direction == "down"
            else np.argmax(np.abs(deviation) if direction == "both" else deviation)
        ]
        for key, val in zip(rows, (start, end, kind, estimate, se, dof, gate, peak)):
            rows[key].append(val)
        trends.append(trend)
    estimate = np.asarray(rows["estimate"], dtype=float)
    se = np.asarray(rows["se"], dtype=float)
    dof = np.asarray(rows["df"], dtype=float)

    def p_values(est_: np.ndarray, se_: np.ndarray, dof_: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(se_ > 0, est_ / se_, np.sign(est_) * np.inf)
        return np.minimum(1.0, scan * _one_sided_p(z, dof_, direction))

    p = p_values(estimate, se, dof) if estimate.size else estimate
    gated = [k for k, g in enumerate(rows["gate"]) if g is not None]
    if gated:
        g = np.asarray([rows["gate"][k] for k in gated], dtype=float)  # (k, gate, 3)
        gate_p = p_values(g[..., 0], g[..., 1], g[..., 2]).max(axis=1)
        p[gated] = np.maximum(p[gated], gate_p)
    return IntervalTests(
        estimate=estimate,
        se=se,
        df=dof,
        p_value=p,
        start=np.asarray(rows["start"], dtype=np.int64),
        end=np.asarray(rows["end"], dtype=np.int64),
        kind=np.asarray(rows["kind"], dtype=object),
        peak=np.asarray(rows["peak"], dtype=np.int64),
        trend=trends,
    )


def select_non_overlapping(start: np.ndarray, end: np.ndarray, order_key: np.ndarray) -> np.ndarray:
    """Indices of a greedy set of non-overlapping intervals, best ``order_key`` first."""
    chosen: list[int] = []
    for idx in np.argsort(order_key, kind="stable"):
        if all(end[idx] < start[k] or start[idx] > end[k] for k in chosen):
            chosen.append(int(idx))
    return np.asarray(sorted(chosen, key=lambda k: start[k]), dtype=np.int64)


# a statistical test, not a pytest test: keep collectors from picking it up on import
test_intervals.__test__ = False  # type: ignore[attr-defined]
