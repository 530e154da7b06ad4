"""Which anomalies of a detection process history explains, and the sentences saying so."""

from __future__ import annotations

from typing import Any

import polars as pl

from regimes._labels import label_columns, text_label
from regimes.data.schema import (
    RegimesInputError,
    as_polars,
)
from regimes.explain._anomalies import read_report
from regimes.explain.history.effect import MS_PER_S, HistoryResult, history_effect
from regimes.explain.history.replay import check_history_columns

__all__ = ["detection_note", "history_anomalies", "history_note"]


def _join_groups(left: pl.DataFrame, right: pl.DataFrame, on: list[str]) -> pl.DataFrame:
    """Left join on the group columns; with none, every row of ``left`` meets ``right``."""
    if on:
        return left.join(right, on=on, how="left", nulls_equal=True)
    if right.height == 0:
        return left.with_columns(
            [pl.lit(None, dtype=dtype).alias(name) for name, dtype in right.schema.items()]
        )
    return left.join(right, how="cross")


def _history_for(report: Any, source: Any, history: Any) -> HistoryResult:
    """``history`` as a result computed the way ``report`` was (axes and groups)."""
    if not isinstance(history, HistoryResult):
        alpha = float(getattr(report, "params", {}).get("alpha", 0.05))
        return history_effect(history, by=source.group_columns, x=source.x, y=source.y, alpha=alpha)
    same = (
        history.params["x"] == source.x
        and history.params["y"] == source.y
        and set(history.group_columns) == set(source.group_columns)
    )
    if not same:
        raise RegimesInputError(
            f"the history was computed for {history.params['y']} over {history.params['x']} "
            f"by {list(history.group_columns)}, the report for {source.y} over {source.x} by "
            f"{source.group_columns}; call history_effect with the report's x, y and by"
        )
    return history


def _anomaly_cells(source: Any, history: HistoryResult, curve: pl.DataFrame) -> pl.DataFrame:
    """Per anomaly and cell: trials, first-visit trials and the two median ratios."""
    g, x, y = source.group_columns, source.x, source.y
    measured = history.trials.filter(~pl.col("warmup"))
    baseline = curve.select([*g, x, "baseline"])
    rows = measured.join(baseline, on=[*g, x], how="inner", nulls_equal=True)
    costs = history.effects.select([*g, "first_visit_s", "first_trial_s"])
    history_cost = pl.col("first_visit_s").fill_null(0.0) * pl.col("n_new_lengths") + pl.col(
        "first_trial_s"
    ).fill_null(0.0) * pl.col("first_in_process").cast(pl.Float64)
    rows = _join_groups(rows, costs, g).with_columns((pl.col(y) - history_cost).alias("_adjusted"))
    spans = source.anomalies.select([*g, "anomaly", "start", "end"])
    inside = _join_groups(spans, rows, g).filter(
        pl.col(x).is_between(pl.col("start"), pl.col("end"))
    )
    return inside.group_by("anomaly", x).agg(
        pl.len().alias("_n"),
        (pl.col("n_new_lengths") > 0).sum().alias("_visits"),
        pl.col("first_in_process").sum().alias("_firsts"),
        (pl.col(y).median() / pl.col("baseline").first()).log().alias("_log_ratio"),
        (pl.col("_adjusted").median() / pl.col("baseline").first()).log().alias("_log_adj"),
    )


def history_anomalies(report: Any, history: Any) -> pl.DataFrame:
    """Tell, for each anomaly of a detection report, whether process history explains it.

    For the measured trials inside an anomaly, the history cost of their curve (its
    ``first_visit_s`` per newly visited length plus its ``first_trial_s`` on a
    process's first trial) is removed from their latency, and the interval is compared
    with the report's baseline again: ``median_ratio`` is the geometric mean, over the
    anomaly's cells, of the cell median over the baseline; ``adjusted_ratio`` the same
    after the removal; ``history_share`` the part of the log excess removed.
    ``history_verdict`` is

    ``history``      the curve's first-visit cost is significant and its removal takes
                     away at least half of the excess and leaves the interval under the
                     report's ``min_ratio``: not a budget regime; a sweep with per-case
                     warm-ups would not show it;
    ``not history``  no trial inside the anomaly carries a history cost (no new length,
                     no process start), or its removal leaves the anomaly standing;
    ``cannot tell``  trials inside carry history but the curve's first-visit cost could
                     not be estimated (``history_reason`` says why; typically every
                     process ran the budgets in the same order, so history and budget
                     are confounded: shuffle the order or warm up each case).

    Parameters
    ----------
    report : RegimeResult
        The result of :func:`regimes.detect_regimes`.
    history : HistoryResult or polars.DataFrame or pandas.DataFrame
        The result of :func:`history_effect` for the report's ``x``, ``y`` and groups,
        or the trial table the report came from (warm-ups included), from which it is
        computed.

    Returns
    -------
    polars.DataFrame
        One row per anomaly: the group columns, ``anomaly``, ``start``, ``end``,
        ``ratio`` (the report's), ``first_visit_s`` and ``first_visit_q`` (the curve's;
        null when it was not tested), ``n_trials``, ``n_first_visit_trials``,
        ``median_ratio``, ``adjusted_ratio``, ``history_share`` (null unless the curve
        was tested and ``median_ratio > 1``), ``history_verdict``, ``history_reason``
        and ``explained_by_history`` (the verdict is ``history``).

    Raises
    ------
    RegimesInputError
        When ``report`` is not a detection report, ``history`` was computed for other
        axes or groups, or the table cannot replay a history.

    See Also
    --------
    history_effect : the first-visit cost of every curve.
    history_note : the same, as a sentence for reports.

    Examples
    --------
    A synthetic sweep: six fresh processes, one trial per budget each, budgets shuffled;
    4 ms a step, 33 ms a first visit; the first trial of each process pays 0.3 s to start
    it and is marked as a warm-up.

    >>> import numpy as np
    >>> import polars as pl
    >>> import regimes
    >>> from regimes.explain.history import first_visits, history_anomalies
    >>> rng = np.random.default_rng(30)
    >>> budgets = np.concatenate([rng.permutation(np.arange(64, 513, 32)) for _ in range(6)])
    >>> sweep = first_visits(pl.DataFrame({
    ...     "run_id": "synthetic-example", "session": np.repeat(np.arange(6), 15),
    ...     "order": np.arange(90), "backend": "cuda", "model": "gpt2", "use_cache": True,
    ...     "prompt_tokens": 16, "budget": budgets}))
    >>> trend = 0.02 + 0.004 * pl.col("budget") + 2e-6 * pl.col("budget") ** 2
    >>> cost = 0.033 * pl.col("n_new_lengths") + 0.3 * pl.col("first_in_process")
    >>> sweep = sweep.with_columns(
    ...     latency_s=(trend + cost) * rng.lognormal(0, 0.03, 90),
    ...     warmup=pl.col("first_in_process"))
    >>> report = regimes.detect_regimes(sweep)
    >>> history_anomalies(report, sweep).select("start", "end", "history_verdict").rows()
    [(448, 512, 'history')]
    """
    source = read_report(report, _table_columns(history))
    result = _history_for(report, source, history)
    g = source.group_columns
    per_anomaly = (
        _anomaly_cells(source, result, report.curve)
        .group_by("anomaly")
        .agg(
            pl.col("_n").sum().cast(pl.Int64).alias("n_trials"),
            pl.col("_visits").sum().cast(pl.Int64).alias("n_first_visit_trials"),
            pl.col("_firsts").sum().cast(pl.Int64).alias("_n_firsts"),
            pl.col("_log_ratio").mean().exp().alias("median_ratio"),
            pl.col("_log_adj").mean().exp().alias("adjusted_ratio"),
            (1.0 - pl.col("_log_adj").mean() / pl.col("_log_ratio").mean()).alias("_share"),
        )
    )
    costs = result.effects.select([*g, "first_visit_s", pl.col("q_value").alias("first_visit_q")])
    reasons = result.untested.select([*g, pl.col("reason").alias("history_reason")])
    out = _join_groups(source.anomalies.select([*g, "anomaly", "start", "end", "ratio"]), costs, g)
    out = _join_groups(out, reasons, g).join(per_anomaly, on="anomaly", how="left")
    min_ratio = float(getattr(report, "params", {}).get("min_ratio", 1.25))
    return _verdicts(out, float(result.params["alpha"]), min_ratio)


def _verdicts(out: pl.DataFrame, alpha: float, min_ratio: float) -> pl.DataFrame:
    tested = pl.col("first_visit_s").is_not_null()
    share = pl.when(tested & (pl.col("median_ratio") > 1.0)).then(pl.col("_share"))
    carries = (pl.col("n_first_visit_trials") + pl.col("_n_firsts")) > 0
    explained = (
        (pl.col("first_visit_q") < alpha)
        & (pl.col("history_share") >= 0.5)
        & (pl.col("adjusted_ratio") < min_ratio)
    ).fill_null(False)
    verdict = (
        pl.when(explained)
        .then(pl.lit("history"))
        .when(~carries | tested)
        .then(pl.lit("not history"))
        .otherwise(pl.lit("cannot tell"))
    )
    return (
        out.with_columns(pl.col("n_trials", "n_first_visit_trials", "_n_firsts").fill_null(0))
        .with_columns(share.alias("history_share"))
        .with_columns(verdict.alias("history_verdict"), explained.alias("explained_by_history"))
        .with_columns(
            pl.when(pl.col("history_verdict") == "cannot tell").then(pl.col("history_reason"))
        )
        .drop("_share", "_n_firsts")
        .select(
            pl.exclude("history_reason", "explained_by_history"),
            "history_reason",
            "explained_by_history",
        )
        .sort("anomaly")
    )


def _table_columns(history: Any) -> list[str]:
    if isinstance(history, HistoryResult):
        return history.trials.columns
    return [str(c) for c in getattr(history, "columns", [])]


def history_note(history: Any, report: Any = None) -> str | None:
    """Say, in a few sentences for a report, what process history does to the latency.

    Parameters
    ----------
    history : HistoryResult or polars.DataFrame or pandas.DataFrame
        The result of :func:`history_effect`, or the trial table (warm-ups included) to
        compute it from (with the report's ``x``, ``y`` and groups when a report is
        given).
    report : RegimeResult, optional
        A detection report of the same table: its anomalies are then classified with
        :func:`history_anomalies`.

    Returns
    -------
    str or None
        One sentence per curve whose first-visit cost is significant, then one per
        anomaly that history explains or that cannot be told apart from it; ``None``
        when there is nothing to say: no significant cost and no such anomaly, or a
        table given without the ``order`` and ``session`` columns a history needs.

    See Also
    --------
    history_effect, history_anomalies

    Examples
    --------
    A synthetic sweep: six fresh processes, one trial per budget each, budgets shuffled;
    4 ms a step, 33 ms a first visit; the first trial of each process pays 0.3 s to start
    it and is marked as a warm-up.

    >>> import numpy as np
    >>> import polars as pl
    >>> import regimes
    >>> from regimes.explain.history import first_visits, history_note
    >>> rng = np.random.default_rng(30)
    >>> budgets = np.concatenate([rng.permutation(np.arange(64, 513, 32)) for _ in range(6)])
    >>> sweep = first_visits(pl.DataFrame({
    ...     "run_id": "synthetic-example", "session": np.repeat(np.arange(6), 15),
    ...     "order": np.arange(90), "backend": "cuda", "model": "gpt2", "use_cache": True,
    ...     "prompt_tokens": 16, "budget": budgets}))
    >>> trend = 0.02 + 0.004 * pl.col("budget") + 2e-6 * pl.col("budget") ** 2
    >>> cost = 0.033 * pl.col("n_new_lengths") + 0.3 * pl.col("first_in_process")
    >>> sweep = sweep.with_columns(
    ...     latency_s=(trend + cost) * rng.lognormal(0, 0.03, 90),
    ...     warmup=pl.col("first_in_process"))
    >>> report = regimes.detect_regimes(sweep)
    >>> print(history_note(sweep, report))
    Latency depends on process history: model=gpt2 pays 3... ms [...] per KV length met
    for the first time in its process (...). The anomaly at 448..512 (model=gpt2) is a
    first-visit cost, not a budget regime: ...
    """
    if not isinstance(history, HistoryResult):
        columns = set(_table_columns(history))
        if "order" not in columns or not columns & {"session", "process_id"}:
            return None
        if report is None:
            history = history_effect(history)
        else:
            source = read_report(report, list(columns))
            history = _history_for(report, source, history)
    found = [_cost_sentence(history, row) for row in history.effects.iter_rows(named=True)]
    if report is not None and getattr(report, "anomalies", pl.DataFrame()).height:
        rows = history_anomalies(report, history).iter_rows(named=True)
        found += [_anomaly_sentence(history, row) for row in rows]
    sentences = [s for s in found if s]
    return " ".join(sentences) if sentences else None


def _label(history: HistoryResult, row: dict[str, Any]) -> str:
    """Label a row by the group columns that vary in the result (the model if none do)."""
    return text_label(row, label_columns(history.trials, history.group_columns))


def _cost_sentence(history: HistoryResult, row: dict[str, Any]) -> str | None:
    if not row["significant"]:
        return None
    return (
        f"Latency depends on process history: {_label(history, row)} pays "
        f"{MS_PER_S * row['first_visit_s']:.3g} ms [{MS_PER_S * row['ci_low']:.3g}, "
        f"{MS_PER_S * row['ci_high']:.3g}] per KV length met for the first time in its process "
        f"({round(100 * row['latency_share']):d}% of its measured latency, "
        f"q={row['q_value']:.2g})."
    )


def _anomaly_sentence(history: HistoryResult, row: dict[str, Any]) -> str | None:
    where = f"The anomaly at {row['start']}..{row['end']} ({_label(history, row)})"
    if row["history_verdict"] == "history":
        return (
            f"{where} is a first-visit cost, not a budget regime: x{row['ratio']:.2f} over "
            f"trend, x{row['adjusted_ratio']:.2f} once the process history is removed; warm "
            "each case up before measuring it."
        )
    if row["history_verdict"] == "cannot tell":
        return (
            f"{where} holds trials that met KV lengths for the first time, and this sweep "
            f"cannot tell that cost from a budget regime ({row['history_reason']}); "
            "shuffle the order across processes or warm each case up to tell them apart."
        )
    return None


def _anomalous_curves(frame: pl.DataFrame, source: Any) -> pl.DataFrame:
    """Keep the trials of the curves with an anomaly: the only ones the note speaks of.

    Fitting every curve would cost a regression over every trial of the table for a
    note about a few of them (most of a multi-session detection's time on a large
    table); the Benjamini-Hochberg family is likewise the anomalous curves.
    """
    columns = list(source.group_columns)
    if not columns:
        return frame
    curves = source.anomalies.select(columns).unique()
    return frame.join(curves, on=columns, how="semi", nulls_equal=True)


def detection_note(report: Any, df: Any) -> str | None:
    """Say which anomalies of a detection report process history explains, if any.

    What :func:`regimes.detect_regimes` adds to its result: a note for the anomalies
    whose trials met KV lengths for the first time, when the history explains them
    (``history``) or cannot be told apart from the budget (``cannot tell``); see
    :func:`history_anomalies`.

    Parameters
    ----------
    report : RegimeResult
        The detection result.
    df : polars.DataFrame or pandas.DataFrame
        The trial table it came from, warm-ups included.

    Returns
    -------
    str or None
        The note, ending with a pointer to :func:`history_effect`; ``None`` when the
        report has no anomaly that history explains or may explain, or when the table
        cannot replay a history (no ``order``, no ``session`` or ``process_id``, or an
        ``order`` that repeats within a process).
    """
    if report.anomalies.height == 0:
        return None
    try:
        source = read_report(report, _table_columns(df))
        frame = as_polars(df)
        check_history_columns(frame)
        history = _history_for(report, source, _anomalous_curves(frame, source))
    except RegimesInputError:
        return None
    rows = history_anomalies(report, history).iter_rows(named=True)
    sentences = [s for s in (_anomaly_sentence(history, row) for row in rows) if s]
    if not sentences:
        return None
    return " ".join([*sentences, "See regimes.history_effect."])
