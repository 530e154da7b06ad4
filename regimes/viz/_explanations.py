"""The charts of the explanations an analysis ran on its anomalies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import altair as alt

from regimes.viz import charts as plot


def explanation_charts(explanations: Sequence[Any]) -> dict[str, alt.TopLevelMixin]:
    """Draw each explanation of a :class:`regimes.analysis.RunAnalysis`, by its key.

    The phases are drawn stacked per budget among the report's charts; here, their
    excess over trend. The others draw their own chart (:func:`regimes.viz.result_chart`).
    """
    return {
        item.key: (
            plot.phase_excess_chart(item.result)
            if item.key == "phases"
            else plot.result_chart(item.result)
        )
        for item in explanations
    }
