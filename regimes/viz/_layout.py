"""How charts are laid out and explored: small multiples, a group selector, an x brush.

Every chart against x is a grid of panels, one per group, above a thin overview
strip. Dragging over the strip (a brush on x) zooms every panel to that x range, so a
regime boundary can be inspected cell by cell; double-clicking the strip resets it.
With two groups or more a drop-down menu shows one group's panel at a time. Marks are
clipped to their panel, so a zoomed panel draws nothing outside its axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import altair as alt
import polars as pl

from regimes.viz import _style as style
from regimes.viz._frames import GROUP_FIELD, inline_data, stack_parts

BRUSH = "zoom_x"
"""Name of the x brush of the overview strip; each panel's x domain follows it."""

GROUP_PICK = "group_shown"
"""Name of the drop-down parameter that picks the group shown."""

ALL_GROUPS = "all groups"


@dataclass(frozen=True)
class Panels:
    """Size and arrangement of the small multiples for a number of groups."""

    width: int
    height: int
    columns: int

    @classmethod
    def for_groups(cls, n_groups: int, columns: int | None = None) -> Panels:
        """Large panels two to a row; from ``MANY_GROUPS`` groups on, small ones three."""
        if n_groups >= style.MANY_GROUPS:
            wanted = columns or 3
            return cls(style.SMALL_FACET_WIDTH, style.SMALL_FACET_HEIGHT, min(wanted, n_groups))
        wanted = columns or 2
        return cls(style.FACET_WIDTH, style.FACET_HEIGHT, max(1, min(wanted, n_groups)))

    @property
    def total_width(self) -> int:
        """About the width of one row of panels, with the axes between them."""
        return self.columns * self.width + (self.columns - 1) * 70


def x_encoding(
    field: str, x: str, *, title: bool = True, values: Sequence[float] | None = None
) -> alt.X:
    """Encode x on the data's own range (never from 0), following the brush.

    ``values``, when given, are the only ticks (the budgets of a bar chart, so that its
    ticks read the budgets the bars stand on).
    """
    return alt.X(
        f"{field}:Q",
        title=style.axis_title(x) if title else None,
        scale=alt.Scale(zero=False, nice=False, domain={"param": BRUSH, "encoding": "x"}),
        axis=alt.Axis(values=list(values)) if values is not None else alt.Undefined,
    )


MAX_TICKS = 12
"""At most this many ticks on an axis whose ticks are the data's own x values."""


def grid_ticks(values: Sequence[float]) -> list[float]:
    """Pick ticks among the grid's own ``values``: every k-th, at most :data:`MAX_TICKS`.

    Examples
    --------
    >>> grid_ticks([64, 128, 192, 256])
    [64, 128, 192, 256]
    >>> grid_ticks(list(range(16, 513, 16)))[:4]
    [16, 64, 112, 160]
    """
    ordered = sorted(set(values))
    step = -(-len(ordered) // MAX_TICKS)
    return ordered[::step]


VALUE_PADDING = 8
"""Pixels between the data and each end of a value axis, so that a CI band or a point
at the extreme is drawn whole inside the panel, not flush against (or cut by) its edge."""


def value_scale(log_y: bool, zero: bool = False) -> alt.Scale:
    """Scale y logarithmically or linearly, ending near the data either way.

    A nice log domain snaps to whole decades and can squash the data into a third of
    the panel, so the log axis ends :data:`VALUE_PADDING` pixels beyond the data. A
    linear axis ends at nice ticks, beyond the data already (padding would take it
    below zero).
    """
    if log_y:
        return alt.Scale(type="log", nice=False, padding=VALUE_PADDING)
    return alt.Scale(zero=zero, nice=True)


LOG_GRID_MANTISSAS = (1, 2, 5)
"""On a log axis, gridlines are drawn only at 1, 2 and 5 times a power of ten; the
ticks between them keep their tick marks, without a gridline each."""

_LOG_GRID_TEST = (
    f"indexof({list(LOG_GRID_MANTISSAS)}, "
    "round(datum.value / pow(10, floor(log(datum.value) / LN10 + 1e-9)))) >= 0"
)


LABEL_FLUSH = 6
"""Pixels from an end of a value axis within which a tick's label is drawn flush
inside the panel: half a label's height, so no label reaches above (or below) it."""


def value_axis(log_y: bool, **options: Any) -> alt.Axis:
    """Return a panel's value axis: end labels flush with the panel, light log gridlines.

    End labels within :data:`LABEL_FLUSH` pixels of the panel's edge are drawn flush
    inside it, so none reaches above the panel and every panel's header sits at the
    same height whatever its tick values. On a log axis Vega draws a tick at every
    integer times a power of ten; a gridline at each of them paints stripes, so only
    those of :data:`LOG_GRID_MANTISSAS` keep theirs.
    """
    settings: dict[str, Any] = {"labelFlush": LABEL_FLUSH}
    if log_y:
        settings["gridOpacity"] = alt.condition(_LOG_GRID_TEST, alt.value(1), alt.value(0))
    settings.update(options)
    return alt.Axis(**settings)


def part(name: str) -> str:
    """Return the filter that keeps one part of a chart's long table."""
    return f"datum.part == '{name}'"


def interval_tooltip(x: str, what: str) -> list[alt.Tooltip]:
    """Describe an interval on hover: group, ends, ``×ratio [CI]``, q value."""
    return [
        alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
        alt.Tooltip("start:Q", title=f"{what} starts at {x}"),
        alt.Tooltip("end:Q", title=f"{what} ends at {x}"),
        alt.Tooltip("label:N", title="ratio over trend [CI]"),
        alt.Tooltip("q_value:Q", format=".2g", title="q value"),
    ]


HALO_COLOR = "#ffffff"
"""The page's background, drawn round an interval's label so that the rules and lines
it crosses (change points at the interval's ends, on a narrow panel) leave it legible."""


def interval_layers(x: str, what: str, height: int, label_at_top: bool) -> list[alt.Chart]:
    """Shaded intervals (full height) with their ratio and CI printed inside.

    The label goes where the curve is not: at the foot of the panel for a spike or a
    step up, at the top for a dip (a speedup collapse). A chart that draws rules over
    the shading puts :func:`interval_labels` above them instead.
    """
    return [interval_shade(x, what), *interval_labels(x, what, height, label_at_top)]


def interval_shade(x: str, what: str) -> alt.Chart:
    """Shade each interval over the panel's full height."""
    base = alt.Chart().transform_filter(part("interval"))
    return base.mark_rect(color=style.ANOMALY_COLOR, opacity=0.13, clip=True).encode(
        x=x_encoding("x_lo", x), x2="x_hi:Q", tooltip=interval_tooltip(x, what)
    )


def interval_labels(x: str, what: str, height: int, label_at_top: bool) -> list[alt.Chart]:
    """Print each interval's ``×ratio [CI]`` on a halo of the page's background.

    Two layers: the halo (the label drawn with a wide stroke of :data:`HALO_COLOR`),
    then the label itself. Drawn last, they stay legible where the label is wider than
    its interval and crosses the rules at its ends.
    """
    tooltip = interval_tooltip(x, what)
    text: dict[str, Any] = {
        "fontSize": 11,
        "fontWeight": "bold",
        "baseline": "top" if label_at_top else "bottom",
        "align": alt.ExprRef(expr="datum.label_align"),
        "dx": alt.ExprRef(
            expr="datum.label_align == 'left' ? 3 : datum.label_align == 'right' ? -3 : 0"
        ),
        "clip": True,
    }
    encoding = {
        "x": x_encoding("label_x", x),
        "y": alt.value(3 if label_at_top else height - 3),
        "text": "label:N",
        "tooltip": tooltip,
    }
    base = alt.Chart().transform_filter(part("interval"))
    halo = base.mark_text(
        color=HALO_COLOR,
        stroke=HALO_COLOR,
        strokeWidth=4,
        strokeJoin="round",
        opacity=0.85,
        **text,
    ).encode(**encoding)
    label = base.mark_text(color=style.ANOMALY_COLOR, **text).encode(**encoding)
    return [halo, label]


ZOOM_HINT = "overview: drag across it to zoom the panels above; double-click to reset"
"""The strip's title in an interactive chart; pictures (PNG, SVG) leave it out."""


@dataclass(frozen=True)
class Strip:
    """What the overview strip under the panels draws: one line per group.

    ``lines`` holds ``group``, the x column and ``value``, so the strip shows where
    along x something happens before one zooms in; ``title`` names ``value``.
    """

    lines: pl.DataFrame
    title: str
    log_y: bool


def strip_colour(order: Sequence[str]) -> Any:
    """Colour the strip's lines by group, named in a legend, when a palette tells them apart.

    One group is one grey line. From two groups to as many as :data:`style.PALETTE`
    holds, each group has its colour, and the legend under the strip names it by the
    label its panel carries. More groups stay grey: their tooltips and the group menu
    tell them apart.
    """
    if len(order) < 2 or len(order) > len(style.PALETTE):
        return alt.value(style.GREY)
    longest = max(len(label) for label in order)
    return alt.Color(
        f"{GROUP_FIELD}:N",
        title=None,
        sort=list(order),
        scale=alt.Scale(domain=list(order), range=list(style.PALETTE[: len(order)])),
        legend=alt.Legend(
            orient="bottom",
            direction="horizontal",
            columns=1 if longest > 36 else 2,
            labelLimit=0,
            symbolType="stroke",
            symbolStrokeWidth=2,
        ),
    )


def _overview_strip(strip: Strip, x: str, panels: Panels, order: Sequence[str]) -> alt.Chart:
    """Draw the thin strip that carries the x brush, from the chart's long table."""
    brush = alt.selection_interval(name=BRUSH, encodings=["x"], empty=True)
    hint = alt.TitleParams(
        ZOOM_HINT,
        anchor="start",
        fontSize=11,
        fontWeight="normal",
        color=style.GREY,
        limit=0,
    )
    return (
        alt.Chart(title=hint)
        .transform_filter(part("overview"))
        .transform_filter(_picked())
        .mark_line(strokeWidth=1.2, opacity=0.85)
        .encode(
            color=strip_colour(order),
            x=alt.X(f"{x}:Q", title=style.axis_title(x), scale=alt.Scale(zero=False, nice=False)),
            y=alt.Y(
                "value:Q",
                title=strip.title,
                scale=value_scale(strip.log_y),
                # "~g" keeps a log axis's labels short; on a linear one it would print
                # 40 as "4e+1" (Vega sets its precision from the ticks' step)
                axis=value_axis(
                    strip.log_y,
                    tickCount=3,
                    # a title no taller than the strip: smaller than the panels', and
                    # cut to the strip's height should a long one still outgrow it
                    titleFontSize=9,
                    titleFontWeight="normal",
                    titleLimit=style.OVERVIEW_HEIGHT,
                    **({"format": "~g"} if strip.log_y else {}),
                ),
            ),
            detail=f"{GROUP_FIELD}:N",
            tooltip=[
                alt.Tooltip(f"{GROUP_FIELD}:N", title="group"),
                alt.Tooltip(f"{x}:Q", title=style.axis_title(x)),
                alt.Tooltip("value:Q", format=".3g", title=strip.title),
            ],
        )
        .add_params(brush)
        .properties(width=panels.total_width, height=style.OVERVIEW_HEIGHT)
    )


def _picked() -> str:
    return f"{GROUP_PICK} == '{ALL_GROUPS}' || datum.{GROUP_FIELD} == {GROUP_PICK}"


def group_picker(order: Sequence[str]) -> alt.Parameter:
    """Offer a drop-down bound to the group: all panels, or one group's."""
    return alt.param(
        name=GROUP_PICK,
        value=ALL_GROUPS,
        bind=alt.binding_select(options=[ALL_GROUPS, *order], name="show "),
    )


@dataclass(frozen=True)
class ChartText:
    """A chart's title, subtitle (what all its groups share) and description."""

    heading: str
    subtitle: str
    description: str


def _small_multiples(layers: list[alt.Chart], order: list[str], panels: Panels) -> alt.FacetChart:
    """Draw the layers once per group, from the long table the whole chart carries."""
    # Built directly: Altair's .facet() wants the data on the facet itself, and here
    # it sits one level up, where the overview strip can bring its own instead.
    chart = alt.FacetChart(
        spec=alt.layer(*layers).properties(width=panels.width, height=panels.height),
        facet=alt.Facet(
            f"{GROUP_FIELD}:N",
            title=None,
            sort=order,
            # One group is named by the chart's subtitle, so its panel needs no header.
            header=(
                alt.Header(labelFontSize=12, labelFontWeight="bold", labelLimit=0)
                if len(order) > 1
                else alt.Header(labelExpr="''", labelPadding=0)
            ),
        ),
        columns=panels.columns,
    ).transform_filter(_picked())
    return chart.resolve_scale(y="independent")


def panels_over_strip(
    layers: list[alt.Chart],
    parts: dict[str, pl.DataFrame],
    strip: Strip,
    x: str,
    order: list[str],
    panels: Panels,
    text: ChartText,
) -> alt.VConcatChart:
    """Panels over the overview strip, titled and described, with the group picker.

    ``parts`` and the strip's lines become one long table, the chart's only data,
    which the panels and the strip inherit. The picker is a parameter of the whole
    chart even for a single group, so the filters always have it to read; its menu
    is only offered for two groups or more. Each panel has its own y scale.
    """
    subtitle = text.subtitle
    if len(order) > 1:
        picker = group_picker(order)
    else:
        picker = alt.param(name=GROUP_PICK, value=ALL_GROUPS)
        subtitle = " · ".join(s for s in (order[0] if order else "", subtitle) if s)
    grid = _small_multiples(layers, order, panels)
    data = stack_parts({**parts, "overview": strip.lines})
    chart = alt.vconcat(
        grid, _overview_strip(strip, x, panels, order), data=inline_data(data), spacing=12
    ).properties(title=style.title(text.heading, subtitle), description=text.description)
    # The strip colours its groups; the panels colour their series: two scales.
    chart = chart.resolve_scale(color="independent", shape="independent", size="independent")
    # Set directly: add_params would try to move the parameter into the subcharts,
    # and a value parameter bound to a menu belongs at the top level.
    lifted = chart.params if isinstance(chart.params, list) else []
    chart.params = [*lifted, cast(alt.VariableParameter, picker.param)]
    return chart
