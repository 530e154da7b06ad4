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
clusters by session, as detection names it, or by ``x`` cell when there is one session)
and intervals are drawn at ``level``. The adjusted effects'
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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
import statsmodels.api as sm

from regimes._deprecation import renamed
from regimes._labels import text_label
from regimes._result import AnalysisResult, native_library, untested_frame
from regimes._stats.multitest import benjamini_hochberg
from regimes._summary import Summary
from regimes.data._prepare import prepare_trials
from regimes.data.schema import RegimesInputError, check_fraction
from regimes.explain._anomalies import AnomalyInput, frame_columns
from regimes.explain._source import anomaly_source

__all__ = ["MemoryResult", "memory_confound"]

_GIB = float(2**30)
_MIB = float(2**20)
_COV_TYPES = ("HC0", "HC1", "HC2", "HC3", "cluster")
MAX_TREND_DEGREE = 3

_FLOATS = (
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
)
"""Float columns of a group's effects, before the verdicts drop the two logs."""


@dataclass(frozen=True, repr=False)
class MemoryResult(AnalysisResult):
    """Result of :func:`memory_confound`: each anomaly with and without memory held fixed.

    Attributes
    ----------
    effects : polars.DataFrame
        One row per anomaly: the group columns, ``anomaly``, ``start``, ``end``, ``n``
        (trial rows fitted), ``n_missing_memory`` (rows of the group dropped for a null
        memory reading), ``ratio`` / ``ratio_low`` / ``ratio_high`` (unadjusted ratio
        over trend, ``exp(b0)``), ``adjusted_ratio`` / ``adjusted_low`` /
        ``adjusted_high`` (``exp(b1)``), ``p_value`` and ``q_value`` of the adjusted
        effect, ``memory_step_mib`` (``d``) with ``memory_step_p_value``,
        ``memory_coef`` / ``memory_coef_low`` / ``memory_coef_high`` (``g``, log latency
        per GiB) with ``memory_p_value``, ``memory_factor`` (``exp(g d)``, the factor of
        the anomaly that memory accounts for), ``explained_share``, ``collinearity`` and
        ``verdict``.
    untested : polars.DataFrame
        Anomalies whose group could not be fitted (group columns, ``anomaly``,
        ``start``, ``end``, ``reason``): no memory reading, or too few ``x`` outside the
        anomalies for a trend.
    params : dict
        The call's arguments (``memory``, ``x``, ``y``, ``by``, ``alpha``, ``level``,
        ``cov_type``, ``session``).
    group_columns : tuple of str
        The columns that identify a group.
    """

    effects: pl.DataFrame
    untested: pl.DataFrame
    params: dict[str, Any]
    group_columns: tuple[str, ...]

    _tables = ("effects",)
    _title = "Memory confound"
    _explanation = True

    @property
    def memory(self) -> str:
        """The memory column held fixed (``params["memory"]``)."""
        return str(self.params["memory"])

    @property
    def alpha(self) -> float:
        """False discovery rate of the verdicts (``params["alpha"]``)."""
        return float(self.params["alpha"])

    @property
    def cov_type(self) -> str:
        """Covariance of every fit (``params["cov_type"]``)."""
        return str(self.params["cov_type"])

    def _summary(self) -> Summary:
        """One line per anomaly: the effect before and after holding memory fixed."""
        p = self.params
        head = (
            f"Memory confound ({p['memory']}, OLS on log latency, {p['cov_type']} SEs, "
            f"{100 * p['level']:g}% CIs, alpha={p['alpha']:g})"
        )
        return Summary().add_listing(
            head, self.effects, self._line, empty="no anomalies to explain", untested=self.untested
        )

    def _line(self, row: dict[str, Any]) -> str:
        return (
            f"[{row['start']}, {row['end']}] {text_label(row, self.group_columns)}: "
            f"ratio {row['ratio']:.2f} -> {row['adjusted_ratio']:.2f} "
            f"[{row['adjusted_low']:.2f}, {row['adjusted_high']:.2f}] with memory held fixed "
            f"(q={row['q_value']:.2g}); memory step {row['memory_step_mib']:+.1f} MiB "
            f"accounts for x{row['memory_factor']:.2f} "
            f"({_percent(row['explained_share'])}; memory p={row['memory_p_value']:.2g}), "
            f"collinearity {row['collinearity']:.2f} -> {row['verdict']}"
        )


_RENAMED = {"MemoryConfound": "MemoryResult"}
"""Former names, answered with a :class:`DeprecationWarning` until release 0.2."""


def __getattr__(name: str) -> Any:
    return renamed(__name__, _RENAMED, name)


def _percent(share: float | None) -> str:
    return "n/a" if share is None or not np.isfinite(share) else f"{100 * share:.0f}%"


def memory_confound(
    df: Any,
    report: Any = None,
    memory: str = "mem_driver_bytes",
    *,
    x: str | None = None,
    y: str | None = None,
    by: str | Sequence[str] | None = None,
    alpha: float = 0.05,
    level: float = 0.95,
    n_boot: int | None = None,
    seed: int | None = None,
    session: str | None = None,
    cov_type: str = "HC3",
) -> MemoryResult:
    """Test, per anomaly, whether it survives controlling for memory.

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        The trial table the report was computed from, with a memory column.
    report : RegimeResult, optional
        The anomalies to explain (:func:`regimes.detect_regimes`); when None they are
        detected here with ``x``, ``y``, ``by``, ``alpha``, ``level``, ``n_boot``,
        ``seed`` and ``session``.
    memory : str, default "mem_driver_bytes"
        Memory readings in bytes (``mem_driver_bytes``, ``mem_allocated_bytes`` or
        ``rss_bytes``). Rows whose reading is null are left out of that group's fits and
        counted in ``n_missing_memory``.
    x, y : str, optional
        The axis and the time; default the report's. Given with a report, they must be
        the report's.
    by : str or sequence of str, optional
        Group columns; default the report's.
    alpha : float, default 0.05
        False discovery rate of the verdicts (Benjamini-Hochberg over every anomaly of
        the call), and of the detection when ``report`` is None.
    level : float, default 0.95
        Confidence level of every interval.
    n_boot, seed : int, optional
        Bootstrap options of the detection; only when ``report`` is None.
    session : str, optional
        Column naming the process of each trial; default ``run_id``, ``session`` and
        ``process_id`` together (those present), as in detection. ``cov_type="cluster"``
        clusters by it.
    cov_type : {"HC3", "HC0", "HC1", "HC2", "cluster"}, default "HC3"
        The heteroskedasticity-robust covariance of every fit.

    Returns
    -------
    MemoryResult
        ``effects`` (one row per anomaly, with its verdict: ``survives``, ``explained``
        or ``inconclusive``) and ``untested``; see the module docstring for the model.

    Raises
    ------
    RegimesInputError
        When the memory column is missing, not numeric or null in every row, when
        ``report`` is not a detection report, or for a bad ``alpha``, ``level`` or
        ``cov_type``.

    See Also
    --------
    regimes.detect_regimes : finds the anomalies explained here.
    regimes.attribute_phases : which phase carries an anomaly.

    References
    ----------
    .. [1] MacKinnon, J. G. and White, H. (1985). Some heteroskedasticity-consistent
       covariance matrix estimators with improved finite sample properties. *Journal of
       Econometrics* 29(3), 305-325 (HC3).
    .. [2] Seabold, S. and Perktold, J. (2010). statsmodels: econometric and statistical
       modeling with Python. *Proc. 9th Python in Science Conference* (``OLS``, robust
       covariances).
    .. [3] Frisch, R. and Waugh, F. V. (1933); Lovell, M. C. (1963): the partial
       regression identity behind ``explained_share``.
    .. [4] Benjamini, Y. and Hochberg, Y. (1995). Controlling the false discovery rate.
       *JRSS B* 57(1), 289-300.

    Examples
    --------
    >>> import numpy as np, polars as pl, regimes
    >>> b = np.repeat(np.arange(128, 769, 64), 5)
    >>> spike = (b >= 448) & (b <= 576)
    >>> rng = np.random.default_rng(0)
    >>> df = pl.DataFrame({"backend": "synthetic", "model": "synthetic", "use_cache": True,
    ...     "budget": b, "latency_s": 0.02 * b * np.where(spike, 8.0, 1.0)
    ...     * rng.lognormal(0, 0.1, b.size),
    ...     "mem_driver_bytes": (1426 + b / 5 + rng.normal(0, 2, b.size)).astype(int) << 20})
    >>> res = regimes.memory_confound(df, n_boot=200)
    >>> res.effects.select("start", "end", "verdict").rows()
    [(448, 576, 'survives')]
    """
    check_fraction(alpha=alpha, level=level)
    if cov_type not in _COV_TYPES:
        raise RegimesInputError(f"cov_type must be one of {_COV_TYPES}, got {cov_type!r}")
    if memory not in frame_columns(df):
        raise RegimesInputError(
            f"memory column {memory!r} is missing from the trial table; memory readings "
            "(mem_driver_bytes, mem_allocated_bytes or rss_bytes) are needed to test "
            "whether memory explains an anomaly"
        )
    detection = {"alpha": alpha, "level": level, "n_boot": n_boot, "seed": seed}
    source = anomaly_source(
        df,
        report,
        x=x,
        y=y,
        by=by,
        detection=detection | {"session": session},
        detection_only=("n_boot", "seed"),
    )
    frame = _memory_frame(df, source, memory, session)
    parts, untested = [], []
    for key, anomalies in source.groups():
        fitted = _fit_group(source, key, anomalies, frame, memory, cov_type, level)
        if isinstance(fitted, str):
            keys = [*source.group_columns, "anomaly", "start", "end"]
            untested += [{c: r[c] for c in keys} | {"reason": fitted} for r in anomalies.to_dicts()]
        else:
            parts.append(fitted)
    effects = pl.concat(parts, how="vertical") if parts else _empty(source)
    params = {"memory": memory, "x": source.x, "y": source.y, "by": source.group_columns}
    return MemoryResult(
        effects=_add_verdicts(effects, alpha),
        untested=untested_frame(untested, [*source.group_columns, "anomaly", "start", "end"]),
        params=params | {"alpha": alpha, "level": level, "cov_type": cov_type, "session": session},
        group_columns=tuple(source.group_columns),
        native=native_library(df),
    )


def _memory_frame(df: Any, source: AnomalyInput, memory: str, session: str | None) -> pl.DataFrame:
    """Prepare the trials as detection does and check the memory column."""
    frame, _ = prepare_trials(df, source.x, source.y, source.group_columns, session)
    if not frame.schema[memory].is_numeric():
        raise RegimesInputError(
            f"memory column {memory!r} must be numeric, found {frame.schema[memory]}"
        )
    if frame.get_column(memory).null_count() == frame.height:
        raise RegimesInputError(
            f"memory column {memory!r} is null in every row; this backend or run recorded "
            "no such reading (try another memory column)"
        )
    return frame


def trend_basis(
    x: np.ndarray, free_x: np.ndarray, max_degree: int = MAX_TREND_DEGREE
) -> np.ndarray:
    """Polynomial trend columns (without the constant) in standardised ``log x``.

    The degree is capped at one less than the number of distinct ``free_x`` (the x values
    outside every anomaly) so the trend stays identified by the flanks alone.

    Raises
    ------
    RegimesInputError
        When fewer than two distinct ``free_x`` remain: no trend can be fitted.
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


@dataclass(frozen=True)
class _Design:
    """One group's regression: response, memory, anomaly indicators and trend design."""

    log_y: np.ndarray
    mem_gib: np.ndarray
    indicators: np.ndarray
    base: np.ndarray
    cov: dict[str, Any]

    @property
    def columns(self) -> slice:
        """The indicator columns of ``base`` (after the constant and the trend)."""
        k = self.indicators.shape[1]
        return slice(self.base.shape[1] - k, self.base.shape[1])

    def without(self, j: int) -> np.ndarray:
        """Return ``base`` without the indicator of anomaly ``j``."""
        return np.delete(self.base, self.columns.start + j, axis=1)


def _fit_group(
    source: AnomalyInput,
    key: dict[str, Any],
    anomalies: pl.DataFrame,
    frame: pl.DataFrame,
    memory: str,
    cov_type: str,
    level: float,
) -> pl.DataFrame | str:
    """Estimate the group's effects, or return why they cannot be estimated."""
    rows = source.rows_of(frame, key)
    missing = rows.get_column(memory).null_count()
    rows = rows.filter(pl.col(memory).is_not_null())
    if rows.height == 0:
        return f"memory column {memory!r} is null in every row of the group"
    x = rows.get_column(source.x).cast(pl.Float64).to_numpy()
    starts = anomalies.get_column("start").to_numpy()
    ends = anomalies.get_column("end").to_numpy()
    inside = (x[:, None] >= starts[None, :]) & (x[:, None] <= ends[None, :])
    try:
        trend = trend_basis(x, x[~inside.any(axis=1)])
    except RegimesInputError as exc:
        return str(exc)
    indicators = inside.astype(float)
    design = _Design(
        log_y=np.log(rows.get_column(source.y).to_numpy()),
        mem_gib=rows.get_column(memory).cast(pl.Float64).to_numpy() / _GIB,
        indicators=indicators,
        base=sm.add_constant(np.column_stack([trend, indicators]), has_constant="add"),
        cov=_cov_kwargs(rows, x, cov_type),
    )
    values = {"n": np.full(indicators.shape[1], rows.height)}
    values |= {"n_missing_memory": np.full(indicators.shape[1], missing)}
    values |= _estimates(design, 1.0 - level)
    return anomalies.select([*source.group_columns, "anomaly", "start", "end"]).with_columns(
        [pl.Series(name, np.asarray(v)) for name, v in values.items()]
    )


def _estimates(design: _Design, ci_alpha: float) -> dict[str, Any]:
    """Make the three fits of the module docstring: one value per anomaly and column."""
    columns, k = design.columns, design.indicators.shape[1]
    unadjusted = sm.OLS(design.log_y, design.base).fit(**design.cov)
    b0, b0_ci = unadjusted.params[columns], unadjusted.conf_int(ci_alpha)[columns]
    if np.ptp(design.mem_gib) > 0:
        memory = _adjusted(design, ci_alpha)
    else:
        # A constant reading cannot explain anything: the adjusted fit is the unadjusted one.
        memory = {
            "b1": b0,
            "b1_ci": b0_ci,
            "b1_p": unadjusted.pvalues[columns],
            "g": 0.0,
            "g_ci": np.array([0.0, 0.0]),
            "g_p": 1.0,
            "d": np.zeros(k),
            "d_p": np.ones(k),
            "collinearity": [
                _r_squared(design.indicators[:, j], design.without(j)) for j in range(k)
            ],
        }
    b1 = memory["b1"]
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(b0 != 0, (b0 - b1) / b0, np.nan)
    return {
        "ratio": np.exp(b0),
        "ratio_low": np.exp(b0_ci[:, 0]),
        "ratio_high": np.exp(b0_ci[:, 1]),
        "adjusted_ratio": np.exp(b1),
        "adjusted_low": np.exp(memory["b1_ci"][:, 0]),
        "adjusted_high": np.exp(memory["b1_ci"][:, 1]),
        "p_value": memory["b1_p"],
        "memory_step_mib": np.asarray(memory["d"]) * _GIB / _MIB,
        "memory_step_p_value": memory["d_p"],
        "memory_coef": np.full(k, memory["g"]),
        "memory_coef_low": np.full(k, memory["g_ci"][0]),
        "memory_coef_high": np.full(k, memory["g_ci"][1]),
        "memory_p_value": np.full(k, memory["g_p"]),
        "memory_factor": np.exp(b0 - b1),
        "explained_share": share,
        "collinearity": np.asarray(memory["collinearity"]),
        "unadjusted_log": b0,
        "adjusted_log": b1,
    }


def _adjusted(design: _Design, ci_alpha: float) -> dict[str, Any]:
    """Fit with memory held fixed, and memory's step inside each anomaly."""
    columns, k = design.columns, design.indicators.shape[1]
    # Centred so the intercept stays the trend level at the mean reading.
    centred = design.mem_gib - design.mem_gib.mean()
    adjusted = sm.OLS(design.log_y, np.column_stack([design.base, centred])).fit(**design.cov)
    step = sm.OLS(design.mem_gib, design.base).fit(**design.cov)
    return {
        "b1": adjusted.params[columns],
        "b1_ci": adjusted.conf_int(ci_alpha)[columns],
        "b1_p": adjusted.pvalues[columns],
        "g": adjusted.params[-1],
        "g_ci": adjusted.conf_int(ci_alpha)[-1],
        "g_p": adjusted.pvalues[-1],
        "d": step.params[columns],
        "d_p": step.pvalues[columns],
        "collinearity": [
            _r_squared(design.indicators[:, j], np.column_stack([design.without(j), centred]))
            for j in range(k)
        ],
    }


def _cov_kwargs(rows: pl.DataFrame, x: np.ndarray, cov_type: str) -> dict[str, Any]:
    if cov_type != "cluster":
        return {"cov_type": cov_type}
    if rows.get_column("_session").n_unique() > 1:
        groups = rows.get_column("_session").rank("dense").to_numpy()
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
    base = source.anomalies.select([*source.group_columns, "anomaly", "start", "end"])
    return base.with_columns(
        pl.lit(None, dtype=pl.Int64).alias("n"),
        pl.lit(None, dtype=pl.Int64).alias("n_missing_memory"),
        *[pl.lit(None, dtype=pl.Float64).alias(c) for c in _FLOATS],
    )
