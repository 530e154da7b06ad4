"""Does memory explain an anomaly?  A regression with and without the anomaly indicator.

For one group (a case: backend, model, dtype, cache, prompt ...) with trial rows
``(x_i, y_i, m_i)`` (``y`` the latency, ``m`` a memory reading in GiB) and anomalies
``A_1..A_K`` (intervals of ``x`` from the detection report), three ordinary least-squares
fits are made on the trial rows::

    unadjusted:  log y_i = s(x_i) + sum_k b0_k 1[x_i in A_k]                + e_i
    adjusted:    log y_i = s(x_i) + sum_k b1_k 1[x_i in A_k] + g * m_i      + e_i
    memory:      m_i     = s(x_i) + sum_k d_k  1[x_i in A_k]                + u_i

``s`` is the smooth trend, a polynomial of degree <= 3 in standardised ``log x``; the
other anomalies of the group stay in every fit as nuisance terms so that they do not bend
the trend. ``exp(b0_k)`` is the anomaly's ratio over trend, ``exp(b1_k)`` the ratio left
once memory is held fixed, ``g`` memory's own effect (log latency per GiB) and ``d_k``
the step memory takes inside the anomaly. By the Frisch-Waugh-Lovell theorem the part of
the anomaly that memory accounts for is exactly ``b0_k - b1_k = g * d_k``, reported as the
``explained_share`` ``g d_k / b0_k``.

Standard errors are heteroskedasticity-robust (HC3 by default; ``cov_type="cluster"``
clusters by session, or by ``x`` cell when there is one session). The adjusted effects'
p-values get Benjamini-Hochberg q-values across all anomalies. Verdicts:

``survives``       the adjusted effect is significant (``q < alpha``) with the sign of the
                   unadjusted one: memory does not account for the anomaly;
``explained``      it is not, memory's coefficient is significant and carries at least half
                   the anomaly (``explained_share >= 0.5``);
``inconclusive``   neither; usually memory moves only together with the anomaly
                   (``collinearity``, the R^2 of the indicator on trend and memory, near 1)
                   so the data cannot tell the two apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import statsmodels.api as sm

from regimes._stats.multitest import benjamini_hochberg
from regimes.data.schema import RegimesInputError, check_fraction, validate_trials
from regimes.explain._anomalies import AnomalyInput, group_label, read_report, summary_text

__all__ = ["MemoryConfound", "memory_confound"]

_GIB = float(2**30)
_MIB = float(2**20)
_COV_TYPES = ("HC0", "HC1", "HC2", "HC3", "cluster")
MAX_TREND_DEGREE = 3


@dataclass(frozen=True)
class MemoryConfound:
    """Result of :func:`memory_confound`.

    ``effects`` has one row per anomaly: the group columns, ``anomaly``, ``start``,
    ``end``, ``n`` (trial rows fitted), ``n_missing_memory`` (rows of the group dropped for
    a null memory reading), ``ratio`` / ``ratio_low`` / ``ratio_high`` (unadjusted ratio
    over trend, ``exp(b0)``), ``adjusted_ratio`` / ``adjusted_low`` / ``adjusted_high``
    (``exp(b1)``), ``p_value`` and ``q_value`` of the adjusted effect,
    ``memory_step_mib`` (``d``) with ``memory_step_p_value``, ``memory_coef`` /
    ``memory_coef_low`` / ``memory_coef_high`` (``g``, log latency per GiB) with
    ``memory_p_value``, ``memory_factor`` (``exp(g d)``, the factor of the anomaly that
    memory accounts for), ``explained_share``, ``collinearity`` and ``verdict``.
    """

    effects: pl.DataFrame
    memory: str
    alpha: float
    cov_type: str
    group_columns: tuple[str, ...]

    def summary(self) -> str:
        """One line per anomaly: the effect before and after holding memory fixed."""
        head = (
            f"Memory confound ({self.memory}, OLS on log latency, {self.cov_type} SEs, "
            f"alpha={self.alpha:g})"
        )
        return summary_text(head, self.effects, "no anomalies to explain", self._line)

    def _line(self, row: dict[str, Any]) -> str:
        return (
            f"[{row['start']}, {row['end']}] {group_label(row, self.group_columns)}: "
            f"ratio {row['ratio']:.2f} -> {row['adjusted_ratio']:.2f} "
            f"[{row['adjusted_low']:.2f}, {row['adjusted_high']:.2f}] with memory held fixed "
            f"(q={row['q_value']:.2g}); memory step {row['memory_step_mib']:+.1f} MiB "
            f"accounts for x{row['memory_factor']:.2f} "
            f"({_percent(row['explained_share'])}; memory p={row['memory_p_value']:.2g}), "
            f"collinearity {row['collinearity']:.2f} -> {row['verdict']}"
        )

    def __repr__(self) -> str:
        return self.summary()


def _percent(share: float | None) -> str:
    return "n/a" if share is None or not np.isfinite(share) else f"{100 * share:.0f}%"


def memory_confound(
    df: Any,
    report: Any,
    memory: str = "mem_driver_bytes",
    *,
    alpha: float = 0.05,
    cov_type: str = "HC3",
) -> MemoryConfound:
    """Test, per anomaly of ``report``, whether it survives controlling for memory.

    ``df`` is the trial table the report was computed from; ``memory`` a column of memory
    readings in bytes (``mem_driver_bytes``, ``mem_allocated_bytes`` or ``rss_bytes``).
    Rows whose reading is null are left out of that group's fits and counted in
    ``n_missing_memory``. See the module docstring for the model and the verdicts.

    Raises :class:`RegimesInputError` when the memory column is missing, not numeric, or
    null in every row of a group that has an anomaly.
    """
    check_fraction(alpha=alpha)
    if cov_type not in _COV_TYPES:
        raise RegimesInputError(f"cov_type must be one of {_COV_TYPES}, got {cov_type!r}")
    source = read_report(report, _columns(df))
    if memory not in _columns(df):
        raise RegimesInputError(
            f"memory column {memory!r} is missing from the trial table; memory readings "
            "(mem_driver_bytes, mem_allocated_bytes or rss_bytes) are needed to test "
            "whether memory explains an anomaly"
        )
    frame = validate_trials(df, x=source.x, y=source.y, required=[*source.group_columns, memory])
    if not frame.schema[memory].is_numeric():
        raise RegimesInputError(
            f"memory column {memory!r} must be numeric, found {frame.schema[memory]}"
        )
    if frame.get_column(memory).null_count() == frame.height:
        raise RegimesInputError(
            f"memory column {memory!r} is null in every row; this backend or run recorded "
            "no such reading (try another memory column)"
        )
    parts = [
        _fit_group(source, key, anomalies, frame, memory, cov_type, alpha)
        for key, anomalies in source.groups()
    ]
    effects = pl.concat(parts, how="vertical") if parts else _empty(source)
    effects = _add_verdicts(effects, alpha)
    return MemoryConfound(
        effects=effects,
        memory=memory,
        alpha=alpha,
        cov_type=cov_type,
        group_columns=tuple(source.group_columns),
    )


def _columns(df: Any) -> list[str]:
    return [str(c) for c in getattr(df, "columns", [])]


def trend_basis(
    x: np.ndarray, free_x: np.ndarray, max_degree: int = MAX_TREND_DEGREE
) -> np.ndarray:
    """Polynomial trend columns (without the constant) in standardised ``log x``.

    The degree is capped at one less than the number of distinct ``free_x`` (the x values
    outside every anomaly) so the trend stays identified by the flanks alone.
    """
    degree = min(max_degree, np.unique(free_x).size - 1)
    if degree < 1:
        raise RegimesInputError(
            "fewer than two x values lie outside the anomalies of a group; no trend "
            "can be fitted around them"
        )
    t = np.log(x) if np.all(x > 0) else x.astype(float)
    t = (t - t.mean()) / (t.std() or 1.0)
    return np.column_stack([t**p for p in range(1, degree + 1)])


def _fit_group(
    source: AnomalyInput,
    key: dict[str, Any],
    anomalies: pl.DataFrame,
    frame: pl.DataFrame,
    memory: str,
    cov_type: str,
    alpha: float,
) -> pl.DataFrame:
    rows = source.rows_of(frame, key)
    label = group_label(key, list(key))
    missing = rows.get_column(memory).null_count()
    rows = rows.filter(pl.col(memory).is_not_null())
    if rows.height == 0:
        raise RegimesInputError(
            f"memory column {memory!r} is null in every row of the group {label}, which "
            "has anomalies; no memory reading to control for"
        )
    x = rows.get_column(source.x).cast(pl.Float64).to_numpy()
    log_y = np.log(rows.get_column(source.y).to_numpy())
    mem_gib = rows.get_column(memory).cast(pl.Float64).to_numpy() / _GIB
    starts = anomalies.get_column("start").to_numpy()
    ends = anomalies.get_column("end").to_numpy()
    inside = (x[:, None] >= starts[None, :]) & (x[:, None] <= ends[None, :])
    free = ~inside.any(axis=1)
    trend = trend_basis(x, x[free])
    indicators = inside.astype(float)
    k = indicators.shape[1]
    base = sm.add_constant(np.column_stack([trend, indicators]), has_constant="add")
    cov = _cov_kwargs(rows, x, cov_type)
    columns = slice(base.shape[1] - k, base.shape[1])

    unadjusted = sm.OLS(log_y, base).fit(**cov)
    memory_varies = np.ptp(mem_gib) > 0
    if memory_varies:
        # Centred so the intercept stays the trend level at the mean reading.
        centred = mem_gib - mem_gib.mean()
        adjusted = sm.OLS(log_y, np.column_stack([base, centred])).fit(**cov)
        step = sm.OLS(mem_gib, base).fit(**cov)
        b1 = adjusted.params[columns]
        b1_ci = adjusted.conf_int(alpha)[columns]
        b1_p = adjusted.pvalues[columns]
        g, g_ci, g_p = adjusted.params[-1], adjusted.conf_int(alpha)[-1], adjusted.pvalues[-1]
        d, d_p = step.params[columns], step.pvalues[columns]
        collinearity = [
            _r_squared(
                indicators[:, j],
                np.column_stack([np.delete(base, base.shape[1] - k + j, axis=1), centred]),
            )
            for j in range(k)
        ]
    else:
        # A constant reading cannot explain anything: the adjusted fit is the unadjusted one.
        b1, b1_ci, b1_p = (
            unadjusted.params[columns],
            unadjusted.conf_int(alpha)[columns],
            unadjusted.pvalues[columns],
        )
        g, g_ci, g_p = 0.0, np.array([0.0, 0.0]), 1.0
        d, d_p = np.zeros(k), np.ones(k)
        collinearity = [
            _r_squared(indicators[:, j], np.delete(base, base.shape[1] - k + j, axis=1))
            for j in range(k)
        ]
    b0 = unadjusted.params[columns]
    b0_ci = unadjusted.conf_int(alpha)[columns]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(b0 != 0, (b0 - b1) / b0, np.nan)
    values = {
        "n": np.full(k, rows.height),
        "n_missing_memory": np.full(k, missing),
        "ratio": np.exp(b0),
        "ratio_low": np.exp(b0_ci[:, 0]),
        "ratio_high": np.exp(b0_ci[:, 1]),
        "adjusted_ratio": np.exp(b1),
        "adjusted_low": np.exp(b1_ci[:, 0]),
        "adjusted_high": np.exp(b1_ci[:, 1]),
        "p_value": b1_p,
        "memory_step_mib": np.asarray(d) * _GIB / _MIB,
        "memory_step_p_value": d_p,
        "memory_coef": np.full(k, g),
        "memory_coef_low": np.full(k, g_ci[0]),
        "memory_coef_high": np.full(k, g_ci[1]),
        "memory_p_value": np.full(k, g_p),
        "memory_factor": np.exp(b0 - b1),
        "explained_share": share,
        "collinearity": np.asarray(collinearity),
        "unadjusted_log": b0,
        "adjusted_log": b1,
    }
    return anomalies.select([*source.group_columns, "anomaly", "start", "end"]).with_columns(
        [pl.Series(name, np.asarray(v)) for name, v in values.items()]
    )


def _cov_kwargs(rows: pl.DataFrame, x: np.ndarray, cov_type: str) -> dict[str, Any]:
    if cov_type != "cluster":
        return {"cov_type": cov_type}
    if "session" in rows.columns and rows.get_column("session").n_unique() > 1:
        groups = rows.get_column("session").rank("dense").to_numpy()
    else:
        groups = np.unique(x, return_inverse=True)[1]
    return {"cov_type": "cluster", "cov_kwds": {"groups": groups}}


def _r_squared(target: np.ndarray, design: np.ndarray) -> float:
    fit = np.linalg.lstsq(design, target, rcond=None)[0]
    residual = target - design @ fit
    total = np.sum((target - target.mean()) ** 2)
    return float(1.0 - residual @ residual / total) if total > 0 else 1.0


def _add_verdicts(effects: pl.DataFrame, alpha: float) -> pl.DataFrame:
    if effects.height == 0:
        return effects.with_columns(
            pl.lit(None, dtype=pl.Float64).alias("q_value"),
            pl.lit(None, dtype=pl.String).alias("verdict"),
        ).drop("unadjusted_log", "adjusted_log")
    q = benjamini_hochberg(effects.get_column("p_value").to_numpy())
    same_sign = pl.col("adjusted_log").sign() == pl.col("unadjusted_log").sign()
    verdict = (
        pl.when((pl.col("q_value") < alpha) & same_sign)
        .then(pl.lit("survives"))
        .when((pl.col("memory_p_value") < alpha) & (pl.col("explained_share") >= 0.5))
        .then(pl.lit("explained"))
        .otherwise(pl.lit("inconclusive"))
    )
    ordered = [c for c in effects.columns if c not in ("unadjusted_log", "adjusted_log")]
    position = ordered.index("p_value") + 1
    ordered.insert(position, "q_value")
    return (
        effects.with_columns(pl.Series("q_value", q))
        .with_columns(verdict.alias("verdict"))
        .select([*ordered, "verdict"])
    )


def _empty(source: AnomalyInput) -> pl.DataFrame:
    floats = [
        "ratio",
        "ratio_low",
        "ratio_high",
        "adjusted_ratio",
        "adjusted_low",
        "adjusted_high",
        "p_value",
        "memory_step_mib",
        "memory_step_p_value",
        "memory_coef",
        "memory_coef_low",
        "memory_coef_high",
        "memory_p_value",
        "memory_factor",
        "explained_share",
        "collinearity",
        "unadjusted_log",
        "adjusted_log",
    ]
    base = source.anomalies.select([*source.group_columns, "anomaly", "start", "end"])
    return base.with_columns(
        pl.lit(None, dtype=pl.Int64).alias("n"),
        pl.lit(None, dtype=pl.Int64).alias("n_missing_memory"),
        *[pl.lit(None, dtype=pl.Float64).alias(c) for c in floats],
    )
