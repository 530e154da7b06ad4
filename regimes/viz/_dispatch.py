"""One entry point from any analysis result to its chart.

Results are recognised by the tables they carry, not by their class, so a result
renamed or subclassed keeps its chart. Charts that other parts of the library add
(run comparisons, history) are imported only when such a result is drawn.
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

_BY_TABLE: tuple[tuple[str, str, str, bool], ...] = (
    # (table attribute, module, function, takes the trial table)
    ("changes", "regimes.viz._compare_chart", "comparison_chart", False),
    ("curve", "regimes.viz._latency", "latency_chart", True),
    ("speedup", "regimes.viz._speedup", "speedup_chart", False),
    ("phases", "regimes.viz._explain", "phases_result_chart", True),
    ("comparisons", "regimes.viz._explain", "backends_chart", False),
    ("effects", "regimes.viz._explain", "memory_chart", False),
    ("positions", "regimes.viz._explain", "alignment_chart", False),
)


def result_chart(result: Any, df: Any = None, **options: Any) -> alt.TopLevelMixin:
    """Draw the library's full chart of an analysis result.

    Parameters
    ----------
    result : AnalysisResult
        A result of :func:`regimes.detect_regimes` (the latency chart),
        :func:`regimes.cache_speedup` (the speedup chart),
        :func:`regimes.attribute_phases`, :func:`regimes.memory_confound`,
        :func:`regimes.compare_backends`, :func:`regimes.align_boundaries`, or of a
        run comparison.
    df : polars.DataFrame or pandas.DataFrame, optional
        The trial table, for charts that draw trials (latency, phases). Default: the
        result's own ``trials`` when it keeps them.
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
    for table, module, name, takes_trials in _BY_TABLE:
        if isinstance(getattr(result, table, None), pl.DataFrame):
            return _load(module, name, type(result).__name__), takes_trials
    if "History" in type(result).__name__:
        return _load("regimes.viz._history_chart", "history_chart", type(result).__name__), False
    raise RegimesInputError(
        f"no chart is known for a {type(result).__name__}: regimes charts the results of "
        "detect_regimes, cache_speedup, attribute_phases, memory_confound, compare_backends, "
        "align_boundaries and run comparisons"
    )


def _load(module: str, name: str, what: str) -> _Builder:
    try:
        return getattr(import_module(module), name)
    except (ImportError, AttributeError):
        raise RegimesInputError(
            f"no chart for a {what} in this version of regimes ({module}.{name} is missing)"
        ) from None
