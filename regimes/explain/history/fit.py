"""The fit: one curve's first-visit cost by least squares, HC3 errors, Bell-McCaffrey df.

The Model and Errors paragraphs of :mod:`regimes.explain.history` say what is fitted.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MIN_FIRST_VISIT_TRIALS", "NO_FIRST_VISITS", "fit_curve"]

MIN_FIRST_VISIT_TRIALS = 3
"""Fewest measured trials of a curve that must visit new lengths for it to be tested."""


_COLLINEAR = 1e-9
"""``n_new_lengths`` counts as collinear with the other terms when less than this share
of its sum of squares lies outside their span."""


_COV_TYPE = "HC3"
"""Heteroskedasticity-consistent error of ``theta`` (module docstring: Errors)."""


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


def fit_curve(
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
