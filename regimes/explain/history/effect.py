"""``history_effect``: the first-visit cost of every curve of a trial table, tested."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from regimes._labels import text_label
from regimes._result import AnalysisResult, native_library, untested_frame
from regimes._stats.multitest import benjamini_hochberg
from regimes._summary import Summary
from regimes.data._prepare import group_columns as resolve_groups
from regimes.data.schema import (
    RegimesInputError,
    as_polars,
    check_fraction,
    validate_trials,
)
from regimes.explain.history.fit import fit_curve
from regimes.explain.history.replay import PROCESS_COLUMNS, check_history_columns, replay, row_key

__all__ = ["MS_PER_S", "HistoryResult", "history_effect"]

MS_PER_S = 1e3


@dataclass(frozen=True, repr=False)
class HistoryResult(AnalysisResult):
    """Result of :func:`history_effect`.

    Attributes
    ----------
    effects : polars.DataFrame
        One row per tested curve: the group columns, ``first_visit_s`` (seconds per
        newly visited KV length), ``ci_low``, ``ci_high`` (HC3 t interval at
        ``level``), ``df`` (its Bell-McCaffrey degrees of freedom), ``p_value``
        (two-sided), ``q_value`` (Benjamini-Hochberg across the tested curves),
        ``significant`` (``q_value < alpha``), ``first_trial_s`` (what the first trial
        of a process costs on top, start-up; 0 when it cannot be estimated),
        ``latency_share`` (the share of the curve's measured latency that first visits
        account for: ``first_visit_s * sum(n_new_lengths) / sum(y)``), ``n_trials``
        (measured),
        ``n_first_visit_trials`` (measured trials with ``n_new_lengths > 0``) and
        ``n_processes``.
    trials : polars.DataFrame
        Every trial, warm-ups included, in process and ``order``: the process columns,
        ``order``, ``warmup``, the group columns, ``prompt_tokens`` (when present),
        ``budget``, ``x`` and ``y``, ``n_new_lengths`` and ``first_in_process`` (the
        first trial of its shape family in its process).
    untested : polars.DataFrame
        The group columns and ``reason`` of every curve that could not be tested.
    group_columns : tuple of str
        The columns that identify a curve.
    params : dict
        The call's arguments.
    """

    effects: pl.DataFrame
    trials: pl.DataFrame
    untested: pl.DataFrame
    group_columns: tuple[str, ...]
    params: dict[str, Any]

    _tables = ("effects", "untested", "trials")
    _title = "First-visit cost of KV lengths (process history)"

    def _summary(self) -> Summary:
        """One line per curve: its first-visit cost, or why it was not tested."""
        p = self.params
        head = (
            f"First-visit cost per new KV length ({p['y']} over {p['x']}; OLS, HC3 errors "
            f"with Bell-McCaffrey df, {100 * p['level']:g}% CIs, BH at alpha={p['alpha']:g})"
        )
        out = Summary().add_listing(
            head, self.effects, self._line, empty="no curve could be tested"
        )
        return out.add_untested(self.untested, head="Not tested:", columns=self.group_columns)

    def _line(self, row: dict[str, Any]) -> str:
        star = " *" if row["significant"] else ""
        return (
            f"{text_label(row, self.group_columns)}: {MS_PER_S * row['first_visit_s']:.3g} ms "
            f"[{MS_PER_S * row['ci_low']:.3g}, {MS_PER_S * row['ci_high']:.3g}] per new length, "
            f"q={row['q_value']:.2g}{star}; {round(100 * row['latency_share']):d}% of measured "
            f"latency ({row['n_first_visit_trials']} of {row['n_trials']} trials visit new "
            f"lengths, {row['n_processes']} process(es))"
        )


def _trial_columns(frame: pl.DataFrame, group_columns: list[str], x: str, y: str) -> list[str]:
    wanted = [
        *(c for c in PROCESS_COLUMNS if c in frame.columns),
        "order",
        "warmup",
        *group_columns,
        "prompt_tokens",
        "budget",
        x,
        y,
        "n_new_lengths",
        "first_in_process",
    ]
    return [c for c in dict.fromkeys(wanted) if c in frame.columns]


def history_effect(
    df: Any,
    *,
    by: str | Sequence[str] | None = None,
    x: str = "budget",
    y: str = "latency_s",
    alpha: float = 0.05,
    level: float = 0.95,
) -> HistoryResult:
    """Estimate, per curve, the cost of visiting a KV length for the first time.

    Every trial's history is replayed in its process (:func:`first_visits`, warm-ups
    included), then each curve's measured latencies are fitted by a level per budget,
    process and first-trial terms, and ``first_visit_s`` seconds per newly visited
    length (see the module docstring for the model and its conventions).

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        The whole trial table of a run, warm-ups included (they enter the history, not
        the fit). Needs ``order``, ``budget``, ``session`` or ``process_id``, and ``x``
        and ``y``.
    by : str or sequence of str, optional
        Columns that identify a curve; default every case column present
        (``regimes.CASE_COLUMNS``) and ``host`` when it varies, as
        :func:`regimes.detect_regimes` groups (``budget`` never is one).
    x : str, default "budget"
        The cells' coordinate (``budget``, ``total_tokens`` or another numeric column):
        each of its values gets its own level.
    y : str, default "latency_s"
        The latency in seconds (``latency_s`` or ``decode_s``): the cost is additive in
        seconds, so ``y`` is fitted on its own scale.
    alpha : float, default 0.05
        False discovery rate of ``significant`` (Benjamini-Hochberg across curves).
    level : float, default 0.95
        Confidence level of ``ci_low`` and ``ci_high``.

    Returns
    -------
    HistoryResult
        ``effects`` per tested curve, ``trials`` with ``n_new_lengths`` per trial, and
        ``untested`` with the reason for every curve that could not be tested.

    Raises
    ------
    RegimesInputError
        When ``order``, ``budget``, or both ``session`` and ``process_id`` are missing
        (the message names the fix), ``x`` or ``y`` is not usable, every row is a
        warm-up, or ``alpha`` or ``level`` lies outside (0, 1).

    See Also
    --------
    first_visits : the replayed history alone.
    history_anomalies : which anomalies of a detection report history explains.
    regimes.detect_regimes : budget regimes, which first visits can mimic.

    References
    ----------
    .. [1] J. G. MacKinnon and H. White, "Some heteroskedasticity-consistent covariance
       matrix estimators with improved finite sample properties", Journal of
       Econometrics 29(3), 305-325, 1985 (the HC3 error).
    .. [2] R. M. Bell and D. F. McCaffrey, "Bias reduction in standard errors for linear
       regression with multi-stage samples", Survey Methodology 28(2), 169-181, 2002
       (the degrees of freedom).
    .. [3] Y. Benjamini and Y. Hochberg, "Controlling the false discovery rate", Journal
       of the Royal Statistical Society B 57(1), 289-300, 1995 (the q-values).

    Examples
    --------
    A synthetic sweep: six fresh processes, no warm-ups, budgets shuffled in each of
    three rounds; 4 ms a step plus 33 ms the first time a process meets a KV length.

    >>> import numpy as np
    >>> import polars as pl
    >>> from regimes.explain.history import first_visits, history_effect
    >>> rng = np.random.default_rng(0)
    >>> budgets = [b for s in range(6) for r in range(3) for b in rng.permutation(8) + 1]
    >>> sweep = first_visits(pl.DataFrame({
    ...     "run_id": "synthetic-example", "session": np.repeat(np.arange(6), 24),
    ...     "order": np.arange(144), "backend": "cuda", "model": "gpt2",
    ...     "use_cache": True, "prompt_tokens": 8, "budget": 32 * np.array(budgets)}))
    >>> sweep = sweep.with_columns(latency_s=(0.004 * pl.col("budget")
    ...     + 0.033 * pl.col("n_new_lengths")) * rng.lognormal(0, 0.03, 144))
    >>> result = history_effect(sweep)
    >>> round(result.effects["first_visit_s"][0], 3), bool(result.effects["significant"][0])
    (0.033, True)
    """
    check_fraction(alpha=alpha, level=level)
    frame = as_polars(df)
    check_history_columns(frame)
    frame = validate_trials(frame, x=x, y=y, required=["budget", "order"], drop_warmup=False)
    group_columns = resolve_groups(frame, x, by, reserved=("budget",))
    replayed = replay(frame)
    if "warmup" not in replayed.columns:
        replayed = replayed.with_columns(pl.lit(False).alias("warmup"))
    replayed = replayed.with_columns(pl.col("warmup").fill_null(False))
    measured = replayed.filter(~pl.col("warmup"))
    if measured.height == 0:
        raise RegimesInputError("every row is a warm-up; no measured trials remain to fit")
    effects, untested = _fit_curves(measured, group_columns, x, y, level)
    effects = _with_q_values(effects, alpha)
    params = dict(by=by, x=x, y=y, alpha=alpha, level=level)
    return HistoryResult(
        effects=effects,
        trials=replayed.select(_trial_columns(replayed, group_columns, x, y)),
        untested=untested_frame(untested, group_columns).cast(
            {c: frame.schema[c] for c in group_columns}
        ),
        group_columns=tuple(group_columns),
        params=params,
        native=native_library(df),
    )


_EFFECT_SCHEMA: dict[str, pl.DataType] = {
    "first_visit_s": pl.Float64(),
    "ci_low": pl.Float64(),
    "ci_high": pl.Float64(),
    "df": pl.Float64(),
    "p_value": pl.Float64(),
    "first_trial_s": pl.Float64(),
    "latency_share": pl.Float64(),
    "n_trials": pl.Int64(),
    "n_first_visit_trials": pl.Int64(),
    "n_processes": pl.Int64(),
}


def _fit_curves(
    measured: pl.DataFrame, group_columns: list[str], x: str, y: str, level: float
) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    """Fit every curve; return the effects (no q-values yet) and the untested rows."""
    process = [c for c in PROCESS_COLUMNS if c in measured.columns]
    measured = measured.with_columns(row_key(measured, process, "_process"))
    parts = (
        measured.partition_by(group_columns, maintain_order=False, as_dict=True)
        if group_columns
        else {(): measured}
    )
    rows: list[dict[str, Any]] = []
    untested: list[dict[str, Any]] = []
    for key in sorted(parts, key=lambda k: tuple((v is None, str(v)) for v in k)):
        part = parts[key]
        label = dict(zip(group_columns, key, strict=True))
        fitted = fit_curve(
            part.get_column(x).cast(pl.Float64).to_numpy(),
            part.get_column(y).to_numpy(),
            part.get_column("n_new_lengths").to_numpy(),
            part.get_column("first_in_process").to_numpy(),
            part.get_column("_process").to_numpy(),
            level,
        )
        if isinstance(fitted, str):
            untested.append({**label, "reason": fitted})
        else:
            rows.append({**label, **fitted})
    schema = {c: measured.schema[c] for c in group_columns} | _EFFECT_SCHEMA
    return pl.DataFrame(rows, schema=schema, orient="row"), untested


def _with_q_values(effects: pl.DataFrame, alpha: float) -> pl.DataFrame:
    q = benjamini_hochberg(effects.get_column("p_value").to_numpy())
    columns = effects.columns
    at = columns.index("p_value") + 1
    ordered = [*columns[:at], "q_value", "significant", *columns[at:]]
    return effects.with_columns(
        pl.Series("q_value", q, dtype=pl.Float64),
        pl.Series("significant", q < alpha, dtype=pl.Boolean),
    ).select(ordered)
