"""The tables of a :class:`~regimes.detect.RegimeResult`, built from the curve models."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import polars as pl
from scipy import special

from regimes._result import untested_frame
from regimes._stats.anomaly_table import anomaly_schema, x_value
from regimes._stats.levels import median_variance_factor
from regimes.detect._model import MAX_CELLS, MIN_CELLS, SENSITIVITY_WIDTHS, CurveModel, Regime
from regimes.detect._result import RegimeResult
from regimes.detect._trials import Adjusted

__all__ = ["CAVEAT_BESIDE", "CAVEAT_START", "INCONCLUSIVE_RATIO", "Decision", "assemble"]

CAVEAT_START = (
    "starts at the grid's first budget, where the trend is extrapolated from the budgets "
    "after it: below a latency that grows ever faster in log budget, so the ratio may run "
    "high; its interval spans a flat continuation of the trend too (docs/method.md, "
    "Known limits)"
)
"""The ``caveat`` of an anomaly at the first budget (``bench/trust.py``, ``tests``)."""

CAVEAT_BESIDE = (
    "sits beside a step in latency that the model may read as part of its trend; its "
    "interval spans the ratio measured against the level on the step's other side too "
    "(docs/method.md, section 5)"
)
"""The ``caveat`` of an anomaly whose interval the readings beside it widened."""

INCONCLUSIVE_RATIO = 3.0
"""A curve that could not have found a 2-cell spike below this ratio is inconclusive."""

_CURVE_COLUMNS = (
    "n",
    "n_sessions",
    "median",
    "ci_low",
    "ci_high",
    "baseline",
    "ratio",
    "segment",
    "anomalous",
)

_GROUP_COLUMNS = (
    "n_cells",
    "n_trials",
    "sigma_within",
    "tau_between",
    "trend_df",
    "slope_change_at",
    "slope_before",
    "slope_after",
    "drift",
    "n_change_points",
    "n_anomalies",
    "status",
    "note",
)


class Decision(NamedTuple):
    """q-values of the tested regimes and of the change points, keyed (curve, regime)."""

    regime_q: dict[tuple[int, int], float]
    change_q: dict[tuple[int, int], float]
    alpha: float


class _Context(NamedTuple):
    cells: pl.DataFrame
    starts: dict[int, int]
    groups: dict[int, list[Any]]
    group_schema: dict[str, Any]
    x_dtype: pl.DataType
    params: dict[str, Any]


def _significant(m: CurveModel, d: Decision) -> list[int]:
    return [k for k in range(len(m.regimes)) if d.regime_q.get((m.curve, k), 1.0) < d.alpha]


def _departure(m: CurveModel, t: int) -> np.ndarray:
    """Return the fitted departure from the trend at every cell of the curve."""
    f = np.zeros(t)
    for r in m.regimes:
        f[r.start : r.end + 1] += r.coef
    return f


def _cell_columns(ctx: _Context, models: dict[int, CurveModel], d: Decision) -> pl.DataFrame:
    """Interval, baseline, segment and flag of every cell."""
    cells = ctx.cells
    curve = cells.get_column("_curve").to_numpy()
    log_median = np.log(cells.get_column("median").to_numpy())
    half = _half_widths(cells, models, ctx.params["level"])
    # the cells are in curve order: each curve is a run
    edges = np.flatnonzero(np.diff(curve, prepend=curve[:1] - 1)).tolist() + [curve.size]
    level = cells.get_column("level").to_numpy()
    values = np.concatenate(
        [
            _curve_columns(models.get(int(curve[lo])), log_median[lo:hi], level[lo:hi], d)
            for lo, hi in zip(edges[:-1], edges[1:], strict=True)
        ]
    )
    median = cells.get_column("median").to_numpy()
    # exp(log m) is m up to its last bit: a zero-width interval must still hold its median
    return cells.with_columns(
        pl.Series("ci_low", np.minimum(np.exp(log_median - half), median)),
        pl.Series("ci_high", np.maximum(np.exp(log_median + half), median)),
        pl.Series("baseline", values[:, 0]),
        pl.Series("segment", values[:, 1].astype(np.int64)),
        pl.Series("anomalous", values[:, 2] > 0),
    ).with_columns((pl.col("median") / pl.col("baseline")).alias("ratio"))


def _half_widths(cells: pl.DataFrame, models: dict[int, CurveModel], level: float) -> np.ndarray:
    """Half-width of every cell's interval on the log scale.

    A cell of a curve with a model: its trials' sampling variance, the curve's between-
    cell noise and its process lottery, on Welch-Satterthwaite degrees of freedom; of
    one without: its own trials' variance on their own degrees of freedom.
    """
    n = cells.get_column("n").to_numpy()
    n_sessions = cells.get_column("n_sessions").to_numpy()
    fresh = cells.get_column("session_var").to_numpy() / n_sessions
    kappa = median_variance_factor(n)
    # each curve's model read once, then spread over its cells
    curves, of_cell = np.unique(cells.get_column("_curve").to_numpy(), return_inverse=True)
    none = (np.nan,) * 3
    own = [(m.sigma_within, m.tau, m.df) if (m := models.get(int(c))) else none for c in curves]
    params = np.array(own, dtype=float).reshape(-1, 3)[of_cell]
    modelled = ~np.isnan(params[:, 0])
    q = (1 + level) / 2
    half = np.empty(n.size)
    # scipy.stats.t.ppf's value (here and below), without its checks' cost
    alone = ~modelled
    var = kappa[alone] * cells.get_column("own_var").to_numpy()[alone] / n[alone] + fresh[alone]
    half[alone] = special.stdtrit(np.maximum(n[alone] - 1, 1), q) * np.sqrt(var)
    within, tau, df = params[modelled].T
    fresh, n, n_sessions = fresh[modelled], n[modelled], n_sessions[modelled]
    var = kappa[modelled] * within**2 / n + tau**2 + fresh
    # Welch-Satterthwaite: the process lottery rests on the curve's few processes
    sessions = np.maximum(n_sessions - 1.0, 1.0)
    parts = tau**4 / df + fresh**2 / sessions
    dof = np.where(parts > 0, var**2 / np.where(parts > 0, parts, 1.0), 1e6)
    half[modelled] = special.stdtrit(np.minimum(dof, 1e6), q) * np.sqrt(var)
    return half


def _curve_columns(
    m: CurveModel | None, log_median: np.ndarray, level: np.ndarray, d: Decision
) -> np.ndarray:
    """Baseline, segment and flag of one curve's cells ``(T, 3)``."""
    t = log_median.size
    if m is None:
        return np.column_stack([_running_trend(log_median), np.zeros((t, 2))])
    offset = float(np.median(log_median - level))
    flag = np.zeros(t)
    significant = _significant(m, d)
    for k in significant:
        flag[m.regimes[k].start : m.regimes[k].end + 1] = 1.0
    # the baseline is latency without the reported anomalies: every other regime of
    # the model (a speed-up, one short of its test) is part of it
    kept = np.zeros(t)
    for k, r in enumerate(m.regimes):
        if k not in significant:
            kept[r.start : r.end + 1] += r.coef
    segment = np.concatenate([[0], np.cumsum(np.abs(np.diff(_departure(m, t))) > 0)])
    return np.column_stack([np.exp(m.trend + kept + offset), segment, flag])


def _running_trend(log_median: np.ndarray) -> np.ndarray:
    """Return a descriptive baseline for a grid too long for the model: a running median.

    Nothing is tested against it; it lets the cells of such a curve be drawn against
    their neighbourhood. A curve too short for a trend has none (NaN).
    """
    if log_median.size <= MAX_CELLS:
        return np.full(log_median.size, np.nan)
    rolled = pl.Series(log_median).rolling_median(window_size=9, center=True, min_samples=1)
    return np.exp(rolled.to_numpy())


def _kind(r: Regime, t: int) -> tuple[str, bool | None]:
    """``spike`` (comes back), ``step`` (runs to the end) or ``edge`` (one end cell)."""
    width = r.end - r.start + 1
    if width == 1 and (r.start == 0 or r.end == t - 1):
        return "edge", None
    if r.end == t - 1:
        return "step", False
    return "spike", True


def _flat_start(r: Regime, trend: np.ndarray) -> float:
    """Return the trend's mean rise from a regime's cells to the next, if it starts the grid.

    Before its first normal cell a regime at the grid's start has only the trend's
    straight continuation to be measured against; ``delta`` less this rise measures it
    against a flat one. Zero for a regime with normal cells on either side.
    """
    if r.start != 0:
        return 0.0
    return float(np.mean(trend[r.end + 1] - trend[: r.end + 1]))


def _ratio_interval(
    r: Regime, m: CurveModel, params: dict[str, Any]
) -> tuple[float, float, str, bool]:
    """Return the ratio's interval at ``level``, which it is, and whether readings widened it.

    ``bootstrap``: the basic interval over the model's draws, selection re-done in each
    (:func:`regimes.detect._regimes.spread`); ``t``: the selected regime's interval held
    fixed, on its moderated noise, the one its TREAT test is the dual of. The ``t``
    interval stands in where too few draws found the regime. Either spans the regime's
    intervals under the readings of the level beside it (:mod:`regimes.detect._beside`)
    and, for a regime at the grid's start, the same interval under a flat continuation
    of the trend (:func:`_flat_start`; docs/method.md, section 5): the data tell these
    readings from the model's by little.
    """
    if params["ratio_interval"] == "bootstrap" and r.boot_delta is not None:
        (low, high), interval = r.boot_delta, "bootstrap"
    else:
        half = float(special.stdtrit(m.df, (1 + params["level"]) / 2)) * r.se
        (low, high), interval = (r.delta - half, r.delta + half), "t"
    flat = _flat_start(r, m.trend)
    low, high = min(low, low - flat), max(high, high - flat)
    widened = False
    if r.beside is not None:
        widened = r.beside[0] < low or r.beside[1] > high
        low, high = min(low, r.beside[0]), max(high, r.beside[1])
    return float(np.exp(low)), float(np.exp(high)), interval, widened


def _anomaly_rows(ctx: _Context, models: list[CurveModel], d: Decision) -> pl.DataFrame:
    rows = []
    for m in models:
        xs = ctx.cells.get_column("_x").to_numpy()[ctx.starts[m.curve] :][: m.trend.size]
        for k in _significant(m, d):
            r = m.regimes[k]
            kind, recovered = _kind(r, m.trend.size)
            low, high, interval, beside = _ratio_interval(r, m, ctx.params)
            peak = r.start + int(
                np.argmax(np.abs(_departure(m, m.trend.size)[r.start : r.end + 1]))
            )
            xv = [x_value(xs[i], ctx.x_dtype) for i in (r.start, r.end, peak, *r.bounds)]
            rows.append(
                [
                    *ctx.groups[m.curve],
                    *xv[:3],
                    float(np.exp(r.delta)),
                    low,
                    high,
                    r.p_value,
                    d.regime_q[(m.curve, k)],
                    recovered,
                    kind,
                    r.end - r.start + 1,
                    CAVEAT_START if r.start == 0 else CAVEAT_BESIDE if beside else None,
                    *xv[3:],
                    interval,
                ]
            )
    schema = {**ctx.group_schema, **anomaly_schema(ctx.x_dtype)}
    schema |= {c: ctx.x_dtype for c in ("start_low", "start_high", "end_low", "end_high")}
    schema["ratio_interval"] = pl.String
    return pl.DataFrame(rows, schema=schema, orient="row")


def _change_rows(ctx: _Context, models: list[CurveModel], d: Decision) -> pl.DataFrame:
    """Every boundary of a regime: the jump there, its bounds and significance."""
    rows = []
    level = ctx.params["level"]
    for m in models:
        t = m.trend.size
        xs = ctx.cells.get_column("_x").to_numpy()[ctx.starts[m.curve] :][:t]
        f = _departure(m, t)
        for k, r in enumerate(m.regimes):
            q = d.change_q[(m.curve, k)]
            sides = [(r.start, r.bounds[0], r.bounds[1])] if r.start > 0 else []
            if r.end < t - 1:
                sides.append((r.end + 1, min(r.bounds[2] + 1, t - 1), min(r.bounds[3] + 1, t - 1)))
            for after, low, high in sides:
                jump = f[after] - f[after - 1]
                half = float(special.stdtrit(m.df, (1 + level) / 2)) * r.se
                xv = [x_value(xs[i], ctx.x_dtype) for i in (after - 1, after, low, high)]
                rows.append(
                    [
                        *ctx.groups[m.curve],
                        xv[0],
                        xv[1],
                        float(np.exp(jump)),
                        float(np.exp(jump - half)),
                        float(np.exp(jump + half)),
                        r.p_change,
                        q,
                        q < d.alpha,
                        xv[2],
                        xv[3],
                    ]
                )
    schema = dict(ctx.group_schema) | {"x_before": ctx.x_dtype, "x_after": ctx.x_dtype}
    schema |= {c: pl.Float64 for c in ("ratio", "ratio_low", "ratio_high", "p_value", "q_value")}
    schema |= {"significant": pl.Boolean, "after_low": ctx.x_dtype, "after_high": ctx.x_dtype}
    frame = pl.DataFrame(rows, schema=schema, orient="row")
    # two regimes may share a boundary: one change there, with the stronger evidence
    keys = [*ctx.group_schema, "x_before"]
    return frame.sort("p_value").unique(subset=keys, keep="first", maintain_order=True)


def _sensitivity(ctx: _Context, models: list[CurveModel]) -> pl.DataFrame:
    rows = [
        [*ctx.groups[m.curve], w, ratio, _curve_status(m)]
        for m in models
        for w, ratio in zip(SENSITIVITY_WIDTHS, m.detectable, strict=True)
    ]
    schema = dict(ctx.group_schema) | {
        "width": pl.Int64,
        "detectable_ratio": pl.Float64,
        "status": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def _curve_status(m: CurveModel) -> str:
    width2 = m.detectable[SENSITIVITY_WIDTHS.index(2)]
    return "inconclusive" if not width2 <= INCONCLUSIVE_RATIO else "tested"


def _slope_change(ctx: _Context, m: CurveModel | None) -> tuple[Any, float | None, float | None]:
    """Return the ``x`` where the curve's trend changes slope, and its slopes on either side."""
    if m is None or m.hinge is None:
        return None, None, None
    knot, before, after = m.hinge
    x = ctx.cells.get_column("_x").to_numpy()[ctx.starts[m.curve] + knot]
    return x_value(x, ctx.x_dtype), before, after


def _group_rows(
    ctx: _Context, models: list[CurveModel], adjusted: Adjusted, d: Decision, notes: dict[int, str]
) -> pl.DataFrame:
    by_curve = {m.curve: m for m in models}
    drift = dict(adjusted.drift.select("_curve", "drift").iter_rows())
    stats_ = ctx.cells.group_by("_curve", maintain_order=True).agg(
        pl.len().alias("n_cells"), pl.col("n").sum().alias("n_trials")
    )
    rows = []
    for curve, n_cells, n_trials in stats_.iter_rows():
        m = by_curve.get(curve)
        n_cp = (
            0
            if m is None
            else len({k for k in range(len(m.regimes)) if d.change_q[(curve, k)] < d.alpha})
        )
        rows.append(
            [
                *ctx.groups[curve],
                n_cells,
                n_trials,
                None if m is None else m.sigma_within,
                None if m is None else m.tau,
                None if m is None else m.edf,
                *_slope_change(ctx, m),
                drift.get(curve),
                n_cp,
                0 if m is None else len(_significant(m, d)),
                "untested" if m is None else _curve_status(m),
                notes.get(curve),
            ]
        )
    schema = dict(ctx.group_schema) | {
        "n_cells": pl.Int64,
        "n_trials": pl.Int64,
        "sigma_within": pl.Float64,
        "tau_between": pl.Float64,
        "trend_df": pl.Float64,
        "slope_change_at": ctx.x_dtype,
        "slope_before": pl.Float64,
        "slope_after": pl.Float64,
        "drift": pl.Float64,
        "n_change_points": pl.Int64,
        "n_anomalies": pl.Int64,
        "status": pl.String,
        "note": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def _first_trial_rows(ctx: _Context, adjusted: Adjusted) -> pl.DataFrame:
    table = adjusted.first_trials.sort("_curve")
    rows = [[*ctx.groups[int(r[0])], *r[1:]] for r in table.iter_rows()]
    schema = dict(ctx.group_schema) | {
        "n_processes": pl.Int64,
        "ratio": pl.Float64,
        "p_value": pl.Float64,
        "dropped": pl.Boolean,
        "n_dropped": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


def _short_curves(
    ctx: _Context, models: list[CurveModel], x: str
) -> tuple[dict[int, str], pl.DataFrame]:
    """Note the curves too short or too long to test; return the notes and ``untested``."""
    tested = {m.curve for m in models}
    sizes = ctx.cells.group_by("_curve", maintain_order=True).len()
    notes = {
        int(c): (
            f"only {n} distinct {x} value(s); at least {MIN_CELLS} are needed"
            if n < MIN_CELLS
            else f"{n} distinct {x} values; at most {MAX_CELLS} are analysed at once "
            f"(analyse ranges of {x} separately, or thin the grid)"
        )
        for c, n in sizes.iter_rows()
        if int(c) not in tested
    }
    columns = list(ctx.group_schema)
    rows = [
        dict(zip(columns, ctx.groups[c], strict=True)) | {"reason": r} for c, r in notes.items()
    ]
    return notes, untested_frame(rows, columns)


def _trial_rows(frame: pl.DataFrame, group_columns: list[str], x: str, y: str) -> pl.DataFrame:
    """Keep the analysed trials: group columns, ``x``, ``y`` and the process ``session``."""
    kept = list(dict.fromkeys([*group_columns, x, y]))
    out = frame.select(kept)
    if "session" not in kept:
        out = out.with_columns(frame.get_column("_session").alias("session"))
    return out


def assemble(
    cells: pl.DataFrame,
    index: Any,
    adjusted: Adjusted,
    models: list[CurveModel],
    d: Decision,
    frame: pl.DataFrame,
    params: dict[str, Any],
) -> RegimeResult:
    """Build the result's tables from the curve models and the decision."""
    x, y = params["x"], params["y"]
    groups = {int(r[0]): list(r[1:]) for r in index.groups.iter_rows()}
    sizes = cells.group_by("_curve", maintain_order=True).len()
    starts = dict(
        zip(
            sizes.get_column("_curve").to_list(),
            np.concatenate([[0], np.cumsum(sizes.get_column("len").to_numpy())[:-1]]).tolist(),
            strict=True,
        )
    )
    ctx = _Context(
        cells,
        {int(k): int(v) for k, v in starts.items()},
        groups,
        {c: index.groups.schema[c] for c in index.group_columns},
        frame.schema[x],
        params,
    )
    notes, untested = _short_curves(ctx, models, x)
    by_curve = {m.curve: m for m in models}
    curve = (
        _cell_columns(ctx, by_curve, d)
        .join(index.groups, on="_curve", how="left")
        .with_columns(pl.col("_x").cast(ctx.x_dtype).alias(x))
        .select([*index.group_columns, x, *_CURVE_COLUMNS])
    )
    anomalies = _anomaly_rows(ctx, models, d)
    change_points = _change_rows(ctx, models, d)
    if index.group_columns:
        anomalies = anomalies.sort([*index.group_columns, "start"], nulls_last=True)
        change_points = change_points.sort([*index.group_columns, "x_before"], nulls_last=True)
    return RegimeResult(
        curve=curve,
        change_points=change_points,
        anomalies=anomalies,
        groups=_group_rows(ctx, models, adjusted, d, notes),
        untested=untested,
        trials=_trial_rows(frame, index.group_columns, x, y),
        x=x,
        y=y,
        group_columns=index.group_columns,
        params=params,
        sensitivity=_sensitivity(ctx, models),
        first_trials=_first_trial_rows(ctx, adjusted),
    )
