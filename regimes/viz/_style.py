"""The look every chart shares: palette, sizes, axis titles with their units.

The palette is Okabe and Ito's, chosen to stay distinguishable under the common
colour-vision deficiencies; lines that must be told apart also differ in dash, so
colour is never the only cue.
"""

from __future__ import annotations

from typing import Any, Final

import altair as alt

from regimes._labels import axis_title, level_text, quantity

__all__ = ["axis_title", "level_text", "legend", "quantity", "title"]

BLUE = "#0072B2"
ORANGE = "#E69F00"
SKY = "#56B4E9"
GREEN = "#009E73"
VERMILLION = "#D55E00"
PURPLE = "#CC79A7"
GREY = "#666666"
BLACK = "#000000"

PALETTE = (BLUE, ORANGE, GREEN, VERMILLION, SKY, PURPLE, "#F0E442", GREY)
"""Okabe-Ito colours, for charts that colour by group."""

MEDIAN_COLOR = BLUE
TREND_COLOR = GREY
ANOMALY_COLOR = VERMILLION
CHANGE_COLOR = ORANGE
TRIAL_COLOR = GREY
PREFILL_COLOR = PURPLE
DECODE_COLOR = SKY
HEATMAP_SCHEME: Final = "blueorange"
"""A diverging scheme readable with red-green colour blindness: blue faster, orange slower."""

FACET_WIDTH = 380
FACET_HEIGHT = 200
SMALL_FACET_WIDTH = 260
SMALL_FACET_HEIGHT = 150
MANY_GROUPS = 6
"""From this many groups on, panels are drawn smaller and three to a row."""

OVERVIEW_HEIGHT = 60


def title(text: str, subtitle: str = "") -> alt.TitleParams:
    """Title a chart, anchored left, with the shared group keys as its subtitle."""
    return alt.TitleParams(
        text=text,
        subtitle=subtitle or alt.Undefined,
        anchor="start",
        limit=0,
        subtitleColor=GREY,
    )


def legend(**options: Any) -> alt.Legend:
    """Return a legend on top whose labels are never truncated."""
    settings: dict[str, Any] = {"orient": "top", "labelLimit": 0, "titleLimit": 0}
    settings.update(options)
    return alt.Legend(**settings)
