"""Does a process's history explain its latency?  The cost of a KV length's first visit.

Some attention backends build an execution plan per tensor shape the first time a
process meets it, then cache it: cuDNN's scaled-dot-product attention on CUDA (about
33 ms per new KV length on an H200, against 4 ms for a decode step), and MPSGraph, which
compiles per shape on Apple GPUs. Decode latency then depends on what the process ran
before, not on the budget alone, and a sweep without warm-ups (or with its budgets in
another order) shows budget "regimes" that are first-visit costs.

History. Every trial, warm-ups included, is replayed in its process in ``order``. A
generation with a prompt of ``p`` tokens and a budget of ``b`` makes ``b`` forward
passes; pass ``k`` (``k = 0`` is the prefill) attends over ``p + k`` positions, so the
trial visits the KV lengths ``p .. p + b - 1``. Length ``p + b`` is never visited: the
token chosen after the last pass is returned, not fed back. A trial's ``n_new_lengths``
is how many of its lengths no earlier trial of the same process and shape family
visited. The process is identified by ``run_id``, ``session`` and ``process_id``
(those present); the shape family by the columns that change the attention's shape or
kernel (:data:`SHAPE_COLUMNS`, those present: model, dtype, cache on or off,
attention implementation and backends, device). The prefill's query spans the whole
prompt while a decode step's spans one token, so when one process runs several prompt
lengths a prefill can be counted as a revisit of a length a decode step met first: at
most one length per trial, and none with one prompt length per process.

Model. Per curve (one group of ``by`` columns), on the measured trials only::

    y_i = c_{x(i)} + pi_{P(i)} + g F_i + theta n_i + e_i

``c_x`` is a free level for every ``x`` value (the budget's own latency, whatever its
shape: a smooth trend, a spike or a plateau), ``pi_P`` a level for the process,
``F_i`` marks the first trial of its shape family in its process (process start-up:
lazy library loading, handle creation) and ``n_i`` is ``n_new_lengths``. So ``theta``,
``first_visit_s``, the cost in seconds of one newly visited length, is identified only
by trials of the same budget (and process) whose histories differ: no budget regime,
however sharp, can pass for a history effect, and where ``n`` is a function of the
budget (every trial alone in a fresh process, where ``n = b``; the same fixed order in
every process) the curve is reported untested. The fit is ordinary least squares
(statsmodels), on seconds because the cost adds to the latency.

Errors. The trials that visit new lengths are few (in a shuffled sweep without warm-ups,
the first trial of a process and the few that exceed every budget run before it) and
carry most of the information about ``theta``: they have high leverage and, since noise
scales with latency, the largest variance. The standard error is HC3 (MacKinnon and
White 1985), which corrects each residual for its leverage, and the t reference
distribution takes the Bell-McCaffrey degrees of freedom (Bell and McCaffrey 2002;
Imbens and Kolesar 2016): about the number of influential trials, not ``N - k``
(derived for HC2, whose error HC3's exceeds, so the test errs on the safe side).
On synthetic sweeps that mimic the H200 (4 ms a step, 33 ms a first visit, 3 % noise,
4 fresh processes of 3 shuffled rounds over 15 budgets), 95 % intervals cover the true
cost in 97 % of 400 draws (in 90 % with HC3 on ``N - k`` df and a smooth trend), and
with no cost the test rejects in 1 %; with 10 % noise, or 2 processes of 2 rounds, the
figures hold (97 % and 1-1.5 %). p-values are two-sided; q-values are
Benjamini-Hochberg across the tested curves of the call.

A curve is not tested (``untested``, with the reason) when no measured trial visits a
new length (warm-ups visited them all: its latencies carry no first-visit cost), when
fewer than :data:`MIN_FIRST_VISIT_TRIALS` do, or when ``n`` is a linear function of the
budget, process and first-trial terms: the two costs cannot be told apart.

References
----------
.. [1] J. G. MacKinnon and H. White, "Some heteroskedasticity-consistent covariance
   matrix estimators with improved finite sample properties", Journal of Econometrics
   29(3), 305-325, 1985.
.. [2] R. M. Bell and D. F. McCaffrey, "Bias reduction in standard errors for linear
   regression with multi-stage samples", Survey Methodology 28(2), 169-181, 2002.
.. [3] G. W. Imbens and M. Kolesar, "Robust standard errors in small samples: some
   practical advice", Review of Economics and Statistics 98(4), 701-712, 2016.
.. [4] Y. Benjamini and Y. Hochberg, "Controlling the false discovery rate: a practical
   and powerful approach to multiple testing", Journal of the Royal Statistical
   Society B 57(1), 289-300, 1995.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from regimes._result import AnalysisResult, native_library, untested_frame
from regimes._stats.multitest import benjamini_hochberg
from regimes.data.schema import (
    RegimesInputError,
    as_polars,
    check_fraction,
    present_case_columns,
    validate_trials,
)
from regimes.explain._anomalies import group_label, read_report, summary_text

__all__ = [
    "MIN_FIRST_VISIT_TRIALS",
    "NO_FIRST_VISITS",
    "PROCESS_COLUMNS",
    "SHAPE_COLUMNS",
    "HistoryResult",
    "detection_note",
    "first_visits",
    "history_anomalies",
    "history_effect",
    "history_note",
]

PROCESS_COLUMNS: tuple[str, ...] = ("run_id", "session", "process_id")
"""Columns that together identify the process a trial ran in (those present)."""

SHAPE_COLUMNS: tuple[str, ...] = (
    "backend",
    "device",
    "model",
    "dtype",
    "use_cache",
    "attn_implementation",
    "sdpa_backends",
)
"""Columns that change the attention's shapes or kernels: a process keeps one history of
visited KV lengths per combination of those present."""

MIN_FIRST_VISIT_TRIALS = 3
"""Fewest measured trials of a curve that must visit new lengths for it to be tested."""

_COLLINEAR = 1e-9
"""``n_new_lengths`` counts as collinear with the other terms when less than this share
of its sum of squares lies outside their span."""

_MS = 1e3
_COV_TYPE = "HC3"
"""Heteroskedasticity-consistent error of ``theta`` (module docstring: Errors)."""


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

    def summary(self) -> str:
        """Return one line per curve: its first-visit cost, or why it was not tested."""
        p = self.params
        head = (
            f"First-visit cost per new KV length ({p['y']} over {p['x']}; OLS, HC3 errors "
            f"with Bell-McCaffrey df, {100 * p['level']:g}% CIs, BH at alpha={p['alpha']:g})"
        )
        text = summary_text(head, self.effects, "no curve could be tested", self._line)
        if self.untested.height:
            lines = [
                f"  {group_label(row, self.group_columns)}: {row['reason']}"
                for row in self.untested.iter_rows(named=True)
            ]
            text = "\n".join([text, "Not tested:", *lines])
        return text

    def _line(self, row: dict[str, Any]) -> str:
        star = " *" if row["significant"] else ""
        return (
            f"{group_label(row, self.group_columns)}: {_MS * row['first_visit_s']:.3g} ms "
            f"[{_MS * row['ci_low']:.3g}, {_MS * row['ci_high']:.3g}] per new length, "
            f"q={row['q_value']:.2g}{star}; {round(100 * row['latency_share']):d}% of measured "
            f"latency ({row['n_first_visit_trials']} of {row['n_trials']} trials visit new "
            f"lengths, {row['n_processes']} process(es))"
        )


def _key(frame: pl.DataFrame, columns: Sequence[str], name: str) -> pl.Expr:
    """One string per row joining ``columns`` (lists joined by commas; nulls empty)."""
    parts = []
    for c in columns:
        if isinstance(frame.schema[c], pl.List):
            parts.append(pl.col(c).list.eval(pl.element().cast(pl.String)).list.join(","))
        else:
            parts.append(pl.col(c).cast(pl.String))
    if not parts:
        return pl.lit("").alias(name)
    return pl.concat_str([p.fill_null("") for p in parts], separator="|").alias(name)


def _check_history_columns(frame: pl.DataFrame) -> None:
    """Raise unless ``frame`` has what a history needs: order, process, budget."""
    columns = set(frame.columns)
    if "order" not in columns:
        raise RegimesInputError(
            "the trial table lacks the column 'order' (the execution order of trials in "
            "the run), so no process's history can be replayed. Runs written by "
            "`regimes collect` carry it; for another table add an integer 'order' column "
            "giving the order in which the trials, warm-ups included, ran"
        )
    if not columns & {"session", "process_id"}:
        raise RegimesInputError(
            "the trial table lacks both 'session' and 'process_id', so trials cannot be "
            "assigned to the process they ran in. Runs written by `regimes collect` carry "
            "both; for another table add 'session' (one value per process)"
        )
    for column in ("order", "budget", "prompt_tokens"):
        if column == "prompt_tokens" and column not in columns:
            continue
        if column not in columns:
            raise RegimesInputError(
                f"the trial table lacks the column {column!r}; it has {frame.columns}"
            )
        dtype = frame.schema[column]
        nulls = frame.get_column(column).null_count()
        if not dtype.is_integer() or nulls:
            raise RegimesInputError(
                f"column {column!r} must hold integers without nulls to replay a process's "
                f"history, found {dtype} with {nulls} null(s)"
            )


def first_visits(df: Any) -> pl.DataFrame:
    """Replay every process's history: the KV lengths each trial visits first.

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        The whole trial table of a run (or several), warm-ups included: a history is
        only as complete as the rows given. It needs ``order``, ``budget`` and
        ``session`` or ``process_id``; without ``prompt_tokens`` every trial is taken
        to share one prompt length.

    Returns
    -------
    polars.DataFrame
        ``df`` sorted by process and ``order``, with ``n_new_lengths`` (Int64: lengths
        ``p .. p + b - 1`` that no earlier trial of the process and shape family
        visited) and ``first_in_process`` (Boolean: the first trial of its shape family
        in its process). See the module docstring for the conventions.

    Raises
    ------
    RegimesInputError
        When ``order``, ``budget``, or both ``session`` and ``process_id`` are missing,
        or ``order`` repeats within a process.

    See Also
    --------
    history_effect : the cost of a first visit, estimated from these counts.

    Examples
    --------
    >>> import polars as pl
    >>> from regimes.explain.history import first_visits
    >>> runs = pl.DataFrame({"session": [0, 0, 0], "order": [0, 1, 2],
    ...     "backend": "cuda", "model": "gpt2", "use_cache": True, "prompt_tokens": 8,
    ...     "budget": [64, 32, 96], "latency_s": [2.4, 0.13, 1.3]})
    >>> first_visits(runs)["n_new_lengths"].to_list()
    [64, 0, 32]
    """
    frame = as_polars(df)
    _check_history_columns(frame)
    return _replay(frame)


def _replay(frame: pl.DataFrame) -> pl.DataFrame:
    process = [c for c in PROCESS_COLUMNS if c in frame.columns]
    shape = [c for c in SHAPE_COLUMNS if c in frame.columns]
    frame = frame.with_columns(_key(frame, process, "_process"), _key(frame, shape, "_family"))
    repeats = frame.select("_process", "order").is_duplicated()
    if repeats.any():
        raise RegimesInputError(
            f"'order' repeats within a process in {int(repeats.sum())} row(s) "
            f"(process columns {process}); each trial of a process needs its own order. "
            "Pass each run once (drop duplicated rows), or give runs distinct run_id"
        )
    frame = frame.sort("_process", "_family", "order")
    keys = frame.select(pl.struct("_process", "_family").rank("dense")).to_series().to_numpy()
    prompt = (
        frame.get_column("prompt_tokens").to_numpy()
        if "prompt_tokens" in frame.columns
        else np.zeros(frame.height, dtype=np.int64)
    )
    budget = frame.get_column("budget").to_numpy()
    n_new, opening = _count_new_lengths(keys, prompt, prompt + budget)
    return frame.drop("_process", "_family").with_columns(
        pl.Series("n_new_lengths", n_new, dtype=pl.Int64),
        pl.Series("first_in_process", opening, dtype=pl.Boolean),
    )


def _count_new_lengths(
    keys: np.ndarray, first: np.ndarray, stop: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the lengths ``first .. stop - 1`` its key's earlier rows did not visit.

    Rows are sorted by key, then order; returns the counts and the first row of each key.
    """
    n_new = np.zeros(keys.size, dtype=np.int64)
    opening = np.ones(keys.size, dtype=bool)
    opening[1:] = keys[1:] != keys[:-1]
    starts = np.flatnonzero(opening)
    stops = np.append(starts[1:], keys.size)
    for a, b in zip(starts, stops, strict=True):
        seen = np.zeros(int(stop[a:b].max()) + 1, dtype=bool)
        for i in range(a, b):
            window = seen[max(int(first[i]), 0) : max(int(stop[i]), 0)]
            n_new[i] = window.size - np.count_nonzero(window)
            window[:] = True
    return n_new, opening


def _orthonormal(columns: list[np.ndarray]) -> np.ndarray:
    """Return an orthonormal basis of the span of ``columns`` (dependent columns drop out)."""
    u, s, _ = np.linalg.svd(np.column_stack(columns), full_matrices=False)
    return u[:, s > s[0] * 1e-10]


def _residual(basis: np.ndarray, v: np.ndarray) -> np.ndarray:
    return v - basis @ (basis.T @ v)


def _nuisance(
    x: np.ndarray, first: np.ndarray, process: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """Return the cell and process terms as an orthonormal basis, and the first-trial column.

    ``theta`` and its error depend on the cell and process terms only through their
    span, so a basis of it serves, and terms that repeat one another (a process with a
    single trial) drop out instead of making the design singular. The first-trial
    column is ``None`` when it lies in that span (no measured trial is a first one, or
    every first trial is alone in its process): it cannot be estimated then.
    """
    columns = [(x == value).astype(float) for value in np.unique(x)]
    labels = np.unique(process, return_inverse=True)[1]
    columns += [(labels == j).astype(float) for j in range(1, int(labels.max()) + 1)]
    basis = _orthonormal(columns)
    f = first.astype(float)
    outside = _residual(basis, f)
    if not f.any() or outside @ outside <= _COLLINEAR * (f @ f):
        return basis, None
    return basis, f


def _bell_mccaffrey_df(basis: np.ndarray, r: np.ndarray) -> float:
    """Bell-McCaffrey degrees of freedom of the robust t-statistic of ``theta``.

    ``basis`` spans the other terms and ``r`` is ``n_new_lengths`` with that span
    projected out, so ``theta = a'y`` with ``a = r / r'r``. With ``M = I - H`` and
    ``d_i^2 = a_i^2 / (1 - h_i)``, the df is ``tr(DMD)^2 / ||DMD||_F^2``, computed
    without forming the ``N x N`` matrix since ``H = V V'`` with ``V = [basis, r/|r|]``.
    """
    rr = float(r @ r)
    a = r / rr
    leverage = np.einsum("ij,ij->i", basis, basis) + r * r / rr
    d2 = a * a / (1.0 - leverage)
    v = np.column_stack([basis, r / math.sqrt(rr)])
    vwv = v.T @ (d2[:, None] * v)
    frobenius = float(np.sum(d2 * d2 * (1.0 - 2.0 * leverage)) + np.sum(vwv * vwv))
    return float(np.sum(a * a)) ** 2 / frobenius


NO_FIRST_VISITS = (
    "no measured trial visits a KV length for the first time in its process (warm-ups or "
    "earlier trials visited them all): its latencies carry no first-visit cost"
)
"""The ``untested`` reason of a curve whose measured trials all revisit known lengths."""


def _too_few_visits(visits: int) -> str:
    if visits == 0:
        return NO_FIRST_VISITS
    return (
        f"only {visits} measured trial(s) visit new KV lengths; at least "
        f"{MIN_FIRST_VISIT_TRIALS} are needed to estimate a first-visit cost"
    )


def _fit_curve(
    x: np.ndarray,
    y: np.ndarray,
    n_new: np.ndarray,
    first: np.ndarray,
    process: np.ndarray,
    level: float,
) -> dict[str, float] | str:
    """``theta`` of one curve with its interval and p-value, or why it is untested."""
    import statsmodels.api as sm
    from scipy import stats

    visits = int(np.count_nonzero(n_new))
    if visits < MIN_FIRST_VISIT_TRIALS:
        return _too_few_visits(visits)
    basis, f = _nuisance(x, first, process)
    others = basis if f is None else _orthonormal([basis, f])
    n = n_new.astype(float)
    r = _residual(others, n)
    if r @ r <= _COLLINEAR * (n @ n):
        return (
            "new lengths are a function of the budget here (every trial at a budget has "
            "the same history: the same order in every process, or one trial per "
            "process), so a first-visit cost cannot be told apart from the budget's own "
            "latency"
        )
    if y.size - others.shape[1] - 1 < 2:
        return f"too few measured trials ({y.size}) for the budget, process terms and cost"
    design = np.column_stack([basis, n] if f is None else [basis, f, n])
    with np.errstate(divide="ignore", invalid="ignore"):
        fit = sm.OLS(y, design).fit(cov_type=_COV_TYPE)
        dof = _bell_mccaffrey_df(others, r)
    theta, se = float(fit.params[-1]), float(fit.bse[-1])
    if not (math.isfinite(se) and se > 0 and math.isfinite(dof) and dof > 0):
        return (
            "the first-visit cost rests on a single trial (leverage 1), so it has no "
            "heteroskedasticity-consistent error"
        )
    half = float(stats.t.ppf(0.5 + level / 2, dof)) * se
    return {
        "first_visit_s": theta,
        "ci_low": theta - half,
        "ci_high": theta + half,
        "p_value": float(2.0 * stats.t.sf(abs(theta) / se, dof)),
        "df": dof,
        "first_trial_s": 0.0 if f is None else float(fit.params[-2]),
        "latency_share": theta * float(n.sum()) / float(y.sum()),
        "n_trials": y.size,
        "n_first_visit_trials": visits,
        "n_processes": np.unique(process).size,
    }


def _group_columns(frame: pl.DataFrame, by: str | Sequence[str] | None, x: str) -> list[str]:
    if by is None:
        return present_case_columns(frame, exclude=(x, "budget"))
    columns = [by] if isinstance(by, str) else list(by)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise RegimesInputError(
            f"by= names column(s) not in the trial table: {missing}; it has {frame.columns}"
        )
    if x in columns or "budget" in columns:
        raise RegimesInputError(f"by= must not contain the x column {x!r} or 'budget'")
    return columns


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
        (``regimes.CASE_COLUMNS``), as :func:`regimes.detect_regimes` groups.
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
    _check_history_columns(frame)
    frame = validate_trials(frame, x=x, y=y, required=["budget", "order"], drop_warmup=False)
    group_columns = _group_columns(frame, by, x)
    replayed = _replay(frame)
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
    measured = measured.with_columns(_key(measured, process, "_process"))
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
        fitted = _fit_curve(
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
    report : RegimeReport
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
    A synthetic sweep: six fresh processes, one trial per budget each, budgets shuffled,
    no warm-ups; 4 ms a step, 33 ms a first visit, 0.3 s to start a process.

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
    >>> sweep = sweep.with_columns(latency_s=(trend + cost) * rng.lognormal(0, 0.03, 90))
    >>> report = regimes.detect_regimes(sweep)
    >>> history_anomalies(report, sweep).select("start", "end", "history_verdict").rows()
    [(448, 448, 'history')]
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
    report : RegimeReport, optional
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
    A synthetic sweep: six fresh processes, one trial per budget each, budgets shuffled,
    no warm-ups; 4 ms a step, 33 ms a first visit, 0.3 s to start a process.

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
    >>> sweep = sweep.with_columns(latency_s=(trend + cost) * rng.lognormal(0, 0.03, 90))
    >>> report = regimes.detect_regimes(sweep)
    >>> print(history_note(sweep, report))
    Latency depends on process history: model=gpt2 pays 3... ms [...] per KV length met
    for the first time in its process (...). The anomaly at 448..448 (model=gpt2) is a
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
    columns = list(history.group_columns)
    varying = [c for c in columns if history.trials.get_column(c).n_unique() > 1]
    shown = varying or [c for c in ("model",) if c in columns]
    return group_label(row, shown)


def _cost_sentence(history: HistoryResult, row: dict[str, Any]) -> str | None:
    if not row["significant"]:
        return None
    return (
        f"Latency depends on process history: {_label(history, row)} pays "
        f"{_MS * row['first_visit_s']:.3g} ms [{_MS * row['ci_low']:.3g}, "
        f"{_MS * row['ci_high']:.3g}] per KV length met for the first time in its process "
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
        _check_history_columns(frame)
        history = _history_for(report, source, _anomalous_curves(frame, source))
    except RegimesInputError:
        return None
    rows = history_anomalies(report, history).iter_rows(named=True)
    sentences = [s for s in (_anomaly_sentence(history, row) for row in rows) if s]
    if not sentences:
        return None
    return " ".join([*sentences, "See regimes.history_effect."])
