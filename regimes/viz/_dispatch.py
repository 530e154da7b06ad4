"""One entry point from any analysis result to its chart.

Results are recognised by the tables they carry (a table and one of its columns),
not by their class, so a result renamed or subclassed keeps its chart. Each chart's
module is imported only when such a result is drawn.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING, Any

import polars as pl

from regimes.errors import RegimesInputError

if TYPE_CHECKING:  # pragma: no cover - altair is imported with the chart modules
    import altair as alt

_Builder = Callable[..., "alt.TopLevelMixin"]

_BY_TABLE: tuple[tuple[str, str, str, str, bool], ...] = (
    # (table attribute, a column it must have, module, function, takes the trial table)
    ("changes", "status", "regimes.viz._compare_chart", "comparison_chart", False),
    ("curve", "median", "regimes.viz._latency", "latency_chart", True),
    ("speedup", "speedup", "regimes.viz._speedup", "speedup_chart", False),
    ("phases", "start", "regimes.viz._explain", "phases_result_chart", True),
    ("comparisons", "other_backend", "regimes.viz._explain", "backends_chart", False),
    ("effects", "adjusted_ratio", "regimes.viz._explain", "memory_chart", False),
    ("effects", "first_visit_s", "regimes.viz._history_chart", "history_chart", False),
    ("positions", "boundary", "regimes.viz._explain", "alignment_chart", False),
    ("boundaries", "grid_low", "regimes.viz._refine_chart", "refine_chart", True),
    ("profiles", "share", "regimes.viz._operators_chart", "operators_chart", False),
)


def result_chart(result: Any, df: Any = None, **options: Any) -> alt.TopLevelMixin:
    """Draw the library's full chart of an analysis result.

    Parameters
    ----------
    result : AnalysisResult
        A result of :func:`regimes.detect_regimes` (the latency chart),
        :func:`regimes.cache_speedup` (the speedup chart),
        :func:`regimes.attribute_phases`, :func:`regimes.memory_confound`,
        :func:`regimes.compare_backends`, :func:`regimes.align_boundaries`,
        :func:`regimes.history_effect`, :func:`regimes.compare_runs`,
        :func:`regimes.attribute_operators` or :func:`regimes.refine_boundaries` (the
        refinement chart).
    df : polars.DataFrame or pandas.DataFrame, optional
        The trial table, for charts that draw trials (latency, phases, refinement).
        Default: the result's own ``trials`` when it keeps them.
    **options
        Passed to the chart function (e.g. ``log_y``, ``groups``, ``columns``).

    Returns
    -------
    altair.TopLevelMixin
        The chart; it renders in a notebook and :func:`regimes.plot.save` writes it.

    Raises
    ------
    RegimesInputError
        When no chart is known for the result.

    See Also
    --------
    latency_chart, speedup_chart, phase_chart, overview_heatmap

    Examples
    --------
    >>> import regimes
    >>> from regimes.viz import result_chart
    >>> trials = regimes.simulate_sweep(1, anomaly="spike", trials=3, seed=0).trials
    >>> chart = result_chart(regimes.detect_regimes(trials, n_boot=200), trials)
    >>> chart.to_dict()["title"]["text"]
    'Latency by decoding budget'
    """
    builder, takes_trials = _builder_for(result)
    if takes_trials:
        return builder(result, df, **options)
    return builder(result, **options)


def _builder_for(result: Any) -> tuple[_Builder, bool]:
    for table, column, module, name, takes_trials in _BY_TABLE:
        frame = getattr(result, table, None)
        if isinstance(frame, pl.DataFrame) and column in frame.columns:
            return _load(module, name, type(result).__name__), takes_trials
    raise RegimesInputError(
        f"no chart is known for a {type(result).__name__}: regimes charts the results of "
        "detect_regimes, cache_speedup, attribute_phases, memory_confound, compare_backends, "
        "align_boundaries, history_effect, compare_runs, attribute_operators and "
        "refine_boundaries"
    )


def _load(module: str, name: str, what: str) -> _Builder:
    try:
        return getattr(import_module(module), name)
    except (ImportError, AttributeError):
        raise RegimesInputError(
            f"no chart for a {what} in this version of regimes ({module}.{name} is missing)"
        ) from None
