r"""Cell levels with honest sampling variances, from raw replicates.

Everything works on the log scale of the measured quantity, where a multiplicative
slowdown is a shift and noise is close to homoscedastic. A cell is one ``x`` of one
curve. Its level :math:`\ell_t` is the median of the log trials after removing session
main effects (a session that spans several cells of a curve gets its offset
:math:`\alpha_s`, the median over its cells of its session median minus the cell's
median of session medians). The sampling variance of :math:`\ell_t` is the larger of
two estimates, each moderated towards the curve's pooled value the way limma moderates
gene-wise variances (Smyth 2004), :math:`\tilde s^2 = (d_0 s_0^2 + d\,s^2)/(d_0 + d)`
with :math:`d_0` = :data:`PRIOR_DF` and df :math:`d_0 + d`:

* within-session noise, :math:`\kappa(n_t)\,\tilde s_{w,t}^2/n_t`: the pooled value
  :math:`\sigma_w` is the median absolute pairwise difference of log trials within
  sessions of the curve over :math:`\sqrt2\,\Phi^{-1}(3/4)` (robust to single-trial
  hiccups), the cell's own is its within-session variance (df :math:`n_t - S_t`), and
  :math:`\kappa(n)` is :math:`n` times the variance of the median of ``n`` standard
  normals (1 for n <= 2, tending to :math:`\pi/2`). A cell whose trials disagree, say
  two hiccups among three trials, is no more certain than its replicates say;
* between sessions, :math:`\tilde B_t/S_t`: the variance of the cell's session
  medians (df :math:`S_t - 1`) moderated towards the curve's pooled value. One slow
  process among the sessions of a cell makes that cell uncertain, not anomalous.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy import stats

__all__ = ["PRIOR_DF", "VARIANCE_FLOOR", "cell_levels", "median_variance_factor"]

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


VARIANCE_FLOOR = 1e-8
"""Smallest sampling variance of a cell's log level, (0.01 %)^2: timers round, and
identical trials would otherwise make any difference between cells infinitely
significant."""

PRIOR_DF = 4.0
"""Weight, in degrees of freedom, of a curve's pooled noise when it is combined with a
cell's own estimate (empirical-Bayes moderation): a cell's replicates can raise its
variance far above the curve's, but two or three trials cannot make it much smaller."""


def median_variance_factor(n: np.ndarray) -> np.ndarray:
    r""":math:`\kappa(n)`: ``n * Var(median of n standard normals)`` (pi/2 beyond 40)."""
    n = np.asarray(n, dtype=np.int64)
    out = np.full(n.shape, np.pi / 2.0)
    small = (n >= 1) & (n <= _MEDIAN_VARIANCE.size)
    out[small] = _MEDIAN_VARIANCE[n[small] - 1]
    return out


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


def _session_adjusted(
    frame: pl.DataFrame, curve: str, x: str, value: str, session: str
) -> pl.DataFrame:
    """Remove session offsets from the trials.

    ``curve``, ``x``, ``session``, ``value`` and ``_adj``: the value minus its session's offset
    (sessions spanning at least 3 multi-session cells of the curve).
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
        return adjusted.with_columns(
            (pl.col(value) - pl.col("_alpha").fill_null(0.0)).alias("_adj")
        )
    return adjusted.with_columns(pl.col(value).alias("_adj"))


def _cell_moments(adjusted: pl.DataFrame, curve: str, x: str, session: str) -> pl.DataFrame:
    """Reduce trials to cell moments.

    Per cell, sorted by ``(curve, x)``: ``n``, ``n_sessions``, ``level``, the pooled
    within-session sum of squares ``_ss``, the variance of session medians ``_between``,
    the curve's ``sigma_w`` and the df of that pooled scale, ``_pooled_df``.
    """
    cell_keys = [curve, x]
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
    if int(cells.get_column("n_sessions").to_numpy().max()) > 1:
        # the level is the median of all of a cell's trials, not of its session medians
        cells = cells.drop("level").join(
            adjusted.group_by(cell_keys).agg(pl.col("_adj").median().alias("level")), on=cell_keys
        )
    return (
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


def _pooled_between(
    curve_ids: np.ndarray, between_own: np.ndarray, between_df: np.ndarray, multi: np.ndarray
) -> np.ndarray:
    """Pool each curve's between-session variance.

    Per cell, its curve's pooled value: the median over the
    curve's multi-session cells, each scaled by the median of its chi-square law so the
    median is unbiased (0 for a curve without such cells).
    """
    if not multi.any():
        return np.zeros(curve_ids.size)
    scaled = np.where(
        multi, between_own * between_df / stats.chi2.median(np.maximum(between_df, 1)), np.nan
    )
    return (
        pl.DataFrame({"c": curve_ids, "b": scaled})
        .with_columns(pl.col("b").fill_nan(None).median().over("c").fill_null(0.0).alias("p"))
        .get_column("p")
        .to_numpy()
    )


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
    cells = _cell_moments(_session_adjusted(frame, curve, x, value, session), curve, x, session)
    n = cells.get_column("n").to_numpy()
    n_sessions = cells.get_column("n_sessions").to_numpy()
    kappa = median_variance_factor(n)
    own_df = (n - n_sessions).astype(float)
    pooled_df = cells.get_column("_pooled_df").to_numpy()
    sigma_w2 = cells.get_column("sigma_w").fill_nan(None).fill_null(0.0).to_numpy() ** 2
    own_w2 = cells.get_column("_ss").to_numpy() / np.maximum(own_df, 1.0)
    within = (PRIOR_DF * sigma_w2 + own_df * own_w2) / (PRIOR_DF + own_df)
    within_df = np.minimum(pooled_df, PRIOR_DF + own_df)
    between_own = cells.get_column("_between").to_numpy()
    between_df = (n_sessions - 1).astype(float)
    multi = n_sessions > 1
    between_pool = _pooled_between(
        cells.get_column(curve).to_numpy(), between_own, between_df, multi
    )
    between = (PRIOR_DF * between_pool + between_df * between_own) / (PRIOR_DF + between_df)
    estimates = np.stack([kappa * within / n, np.where(multi, between / n_sessions, 0.0)])
    dfs = np.stack([within_df, PRIOR_DF + between_df])
    pick = np.argmax(estimates, axis=0)
    cols = np.arange(n.size)
    return cells.select([curve, x, "n", "n_sessions", "level", "sigma_w"]).with_columns(
        pl.Series("var", np.maximum(estimates[pick, cols], VARIANCE_FLOOR)),
        pl.Series("df", np.maximum(dfs[pick, cols], 1.0)),
    )
