"""The chart of a boundary refinement: each refined curve, its probes and its brackets."""

from __future__ import annotations

from typing import Any

import altair as alt
import polars as pl

from regimes.errors import RegimesInputError
from regimes.viz import _style as style
from regimes.viz._frames import GROUP_FIELD, frame_attr, noisy, require
from regimes.viz._layout import (
    ChartText,
    Panels,
    Strip,
    panels_over_strip,
    part,
    value_axis,
    value_scale,
    x_encoding,
)

_BOUNDARY_FIELDS = (
    "boundary", "source", "kind", "low", "high", "resolved", "status", "grid_low",
    "grid_high", "probes", "generations", "tokens", "new_generations",
)  # fmt: skip

_DECISIONS: dict[str, tuple[str, str]] = {
    # decision: (colour, shape); a left-side state is a circle, a right-side one a square
    "normal": (style.BLUE, "circle"),
    "before": (style.BLUE, "circle"),
    "anomalous": (style.VERMILLION, "square"),
    "collapsed": (style.VERMILLION, "square"),
    "after": (style.VERMILLION, "square"),
    "undecided": (style.GREY, "triangle-up"),
    "between": (style.PURPLE, "diamond"),
    "beyond": (style.PURPLE, "diamond"),
    "pending": (style.SKY, "cross"),
}

_SPEEDUP_TITLE = "speedup, cache off / on (×)"


def refine_chart(
    result: Any,
    df: Any = None,
    *,
    log_y: bool | None = None,
    columns: int | None = None,
    title: str | None = None,
) -> alt.VConcatChart:
    """Each refined curve against the budget, with its probes and its brackets.

    One panel per refined curve (latency, or the KV-cache speedup for a speedup
    boundary). Layers, bottom to top: each boundary's grid bracket as a light band;
    its refined bracket ``(low, high)`` as a narrow dark band between two rules,
    labelled ``onset 104|105`` (an open bracket says why: ``undecided``,
    ``max_generations``...); every measured trial as a faint point (latency curves);
    the median of every budget as a thin line, with the grid budgets' medians as
    black points; and each probe's median, coloured and shaped by its decision
    (``normal``, ``anomalous``, ``undecided``, ``between``...). Every mark has a
    tooltip. An overview strip under the panels carries an x brush: a 1-token
    bracket on a wide grid is a hairline until one zooms in.

    Parameters
    ----------
    result : RefineResult
        The result of :func:`regimes.refine_boundaries`.
    df : polars.DataFrame or pandas.DataFrame, optional
        The trial table (warm-ups are dropped). Default: the result's own ``trials``.
    log_y : bool, optional
        Values on a log axis. Default ``None``: logarithmic when a trial reaches
        :data:`~regimes.viz.charts.NOISY_SPREAD` times its budget's median.
    columns : int, optional
        Panels per row. Default: 2, or 3 from six curves on.
    title : str, optional
        The chart's title. Default: ``"Refined boundaries"``.

    Returns
    -------
    altair.VConcatChart
        The panels (each with its own y scale) over the overview strip.

    Raises
    ------
    RegimesInputError
        When the result has no boundary, or lacks the tables or trials drawn here.

    See Also
    --------
    regimes.refine_boundaries : the analysis drawn here.
    latency_chart : the detection on the grid.

    Examples
    --------
    >>> import regimes
    >>> from regimes.refine import SimulatedProbe, refine_boundaries
    >>> oracle = SimulatedProbe(505, 633, factor=3.0, seed=1)  # synthetic
    >>> res = refine_boundaries(oracle.sweep(range(480, 657, 16), trials=3), probe=oracle)
    >>> chart = regimes.plot.refine_chart(res)
    >>> chart.to_dict()["title"]["text"]
    'Refined boundaries'
    """
    boundaries = frame_attr(result, "boundaries")
    require(boundaries, _BOUNDARY_FIELDS[:10], "the result's boundaries")
    if boundaries.height == 0:
        raise RegimesInputError("the refinement has no boundary to draw (nothing was refined)")
    probes = frame_attr(result, "probes")
    require(probes, ["boundary", "budget", "level", "decision"], "the result's probes")
    trials = _measured(df if df is not None else getattr(result, "trials", None))
    group_columns = [c for c in boundaries.columns if c not in _BOUNDARY_FIELDS]
    params = getattr(result, "params", None) or {}
    labelled, subtitle = _panel_labels(boundaries, group_columns, params)
    grid = set(params.get("grid") or trials.get_column("budget").unique().to_list())
    parts = _parts(labelled, probes, trials, group_columns, grid)
    order = labelled.get_column(GROUP_FIELD).unique(maintain_order=True).to_list()
    if log_y is None:
        log_y = "trial" in parts and _spread(parts)
    panels = Panels.for_groups(len(order), columns)
    layers = _layers(parts, log_y, _y_title(labelled))
    strip = Strip(parts["cell"].select(GROUP_FIELD, "budget", "value"), "median", log_y=True)
    text = ChartText(title or "Refined boundaries", subtitle, _describe(labelled, parts))
    return panels_over_strip(layers, parts, strip, "budget", order, panels, text)


def _measured(source: Any) -> pl.DataFrame:
    """Keep the measured trials (warm-ups and failed generations dropped)."""
    from regimes.data.schema import as_polars

    if source is None:
        raise RegimesInputError("the refinement chart needs the trials: pass df=")
    frame = as_polars(source)
    require(frame, ["budget", "latency_s"], "the trial table")
    if "warmup" in frame.columns:
        frame = frame.filter(~pl.col("warmup").fill_null(False))
    return frame.filter(pl.col("latency_s").is_not_null() & (pl.col("latency_s") > 0))


def _panel_labels(
    boundaries: pl.DataFrame, group_columns: list[str], params: dict[str, Any]
) -> tuple[pl.DataFrame, str]:
    """Label each boundary's panel (its curve) and name what all panels share."""
    varying = [c for c in params.get("label_columns", []) if c in group_columns]
    shared = [
        c
        for c in group_columns
        if c not in varying and boundaries.get_column(c).drop_nulls().n_unique() == 1
    ]
    both_sources = boundaries.get_column("source").n_unique() > 1
    labels = []
    for row in boundaries.iter_rows(named=True):
        words = [_value_text(c, row[c]) for c in varying if row[c] is not None]
        if row["source"] == "speedup":
            words.insert(0, "KV-cache speedup")
        elif both_sources:
            words.insert(0, "latency")
        labels.append(" · ".join(words) or str(row.get("model") or "all"))
    subtitle = " · ".join(_value_text(c, boundaries.get_column(c).drop_nulls()[0]) for c in shared)
    return boundaries.with_columns(pl.Series(GROUP_FIELD, labels)), subtitle


def _value_text(column: str, value: Any) -> str:
    if column == "use_cache":
        return "cache on" if value else "cache off"
    if column == "prompt_tokens":
        return f"prompt {value}"
    return str(value)


def _curve_trials(
    trials: pl.DataFrame, row: dict[str, Any], group_columns: list[str]
) -> pl.DataFrame:
    """Select the trials of a boundary's curve (for a speedup boundary, both cache settings)."""
    keys = [c for c in group_columns if c in trials.columns and row[c] is not None]
    if row["source"] == "speedup":
        keys = [c for c in keys if c != "use_cache"]
    condition = pl.lit(True)
    for c in keys:
        condition = condition & (pl.col(c) == row[c])
    return trials.filter(condition)


def _cells(curve: pl.DataFrame, source: str) -> pl.DataFrame:
    """Median per budget: latency, or cache-off over cache-on median for a speedup."""
    per = curve.group_by("budget").agg(
        pl.col("latency_s").median().alias("value"), pl.len().alias("n")
    )
    if source != "speedup":
        return per
    if "use_cache" not in curve.columns:
        return per.clear()
    sides = curve.group_by("budget", "use_cache").agg(pl.col("latency_s").median().alias("m"))
    off = sides.filter(~pl.col("use_cache")).select("budget", pl.col("m").alias("off"))
    on = sides.filter(pl.col("use_cache")).select("budget", pl.col("m").alias("on"))
    ratio = off.join(on, on="budget").select(
        "budget", (pl.col("off") / pl.col("on")).alias("value")
    )
    return ratio.join(per.select("budget", "n"), on="budget")


def _parts(
    labelled: pl.DataFrame,
    probes: pl.DataFrame,
    trials: pl.DataFrame,
    group_columns: list[str],
    grid: set[int],
) -> dict[str, pl.DataFrame]:
    """Build the chart's long table, part by part: bands, brackets, trials, cells, probes."""
    trial_parts, cell_parts = [], []
    panels = labelled.unique(GROUP_FIELD, keep="first", maintain_order=True)
    for row in panels.iter_rows(named=True):
        curve = _curve_trials(trials, row, group_columns)
        label = pl.lit(row[GROUP_FIELD]).alias(GROUP_FIELD)
        cells = _cells(curve, row["source"]).sort("budget")
        cell_parts.append(
            cells.select(
                label, "budget", "value", "n", pl.col("budget").is_in(sorted(grid)).alias("on_grid")
            )
        )
        if row["source"] == "latency":
            trial_parts.append(curve.select(label, "budget", pl.col("latency_s").alias("value")))
    cells = pl.concat(cell_parts)
    parts = {"grid": _grid_part(labelled), "bracket": _label_side(_bracket_part(labelled), cells)}
    if trial_parts:
        parts["trial"] = pl.concat(trial_parts)
    parts["cell"] = cells
    parts["probe"] = _probe_part(labelled, probes)
    return {name: frame for name, frame in parts.items() if frame.height}


def _bracket_text(row: dict[str, Any]) -> str:
    text = f"{row['kind']} {row['low']}|{row['high']}"
    return text if row["resolved"] else f"{text} ({row['status']})"


def _grid_part(labelled: pl.DataFrame) -> pl.DataFrame:
    return labelled.select(
        GROUP_FIELD,
        "kind",
        pl.col("grid_low").alias("x_lo"),
        pl.col("grid_high").alias("x_hi"),
    )


def _bracket_part(labelled: pl.DataFrame) -> pl.DataFrame:
    texts = [_bracket_text(row) for row in labelled.iter_rows(named=True)]
    extra = [c for c in ("probes", "generations", "tokens") if c in labelled.columns]
    return labelled.select(
        GROUP_FIELD,
        "kind",
        "low",
        "high",
        "resolved",
        "status",
        "grid_low",
        "grid_high",
        *extra,
        pl.col("low").cast(pl.Float64).alias("x_lo"),
        pl.col("high").cast(pl.Float64).alias("x_hi"),
        ((pl.col("low") + pl.col("high")) / 2).alias("x_mid"),
        pl.Series("label", texts),
    )


def _label_side(brackets: pl.DataFrame, cells: pl.DataFrame) -> pl.DataFrame:
    """Say where each bracket's label goes: ``label_right`` of it or left, ``label_low``.

    A label centred on its bracket sat on the bracket's rules; beside them it needs the
    room of its panel's wider side: right of a bracket in the left half of the budgets
    its panel draws, left of one in the right half. Every second bracket of a panel
    (by budget) puts its label a line lower, so that an onset's and a recovery's labels
    pointing at each other across a narrow panel do not run into each other.
    """
    span = cells.group_by(GROUP_FIELD).agg(
        ((pl.col("budget").min() + pl.col("budget").max()) / 2).alias("middle")
    )
    order = pl.col("x_mid").rank("ordinal").over(GROUP_FIELD)
    return (
        brackets.join(span, on=GROUP_FIELD, how="left")
        .with_columns(
            (pl.col("x_mid") <= pl.col("middle").fill_null(pl.col("x_mid"))).alias("label_right"),
            (order % 2 == 0).alias("label_low"),
        )
        .drop("middle")
    )


def _probe_part(labelled: pl.DataFrame, probes: pl.DataFrame) -> pl.DataFrame:
    """Each probe's median, and the two levels it was tested between, by panel.

    The medians are ``exp`` of the probes' log levels (latency, or speedup).
    """
    if probes.height == 0:
        return pl.DataFrame()
    keep = [c for c in ("n", "sessions", "llr") if c in probes.columns]
    sides = [
        pl.col(c).exp().alias(name)
        for c, name in (("mu_left", "left_level"), ("mu_right", "right_level"))
        if c in probes.columns
    ]
    return probes.join(labelled.select("boundary", GROUP_FIELD, "kind"), on="boundary").select(
        GROUP_FIELD,
        "kind",
        "budget",
        pl.col("level").exp().alias("value"),
        "decision",
        *keep,
        *sides,
    )


def _spread(parts: dict[str, pl.DataFrame]) -> bool:
    worst = parts["trial"].group_by(GROUP_FIELD, "budget").agg(pl.col("value").max().alias("top"))
    cells = parts["cell"].join(worst, on=[GROUP_FIELD, "budget"], how="inner")
    return noisy(cells, "value", ["top"])


def _y_title(labelled: pl.DataFrame) -> str:
    sources = set(labelled.get_column("source").to_list())
    if sources == {"speedup"}:
        return _SPEEDUP_TITLE
    if "speedup" in sources:
        return f"{style.axis_title('latency_s')}, or {_SPEEDUP_TITLE}"
    return style.axis_title("latency_s")


def _layers(parts: dict[str, pl.DataFrame], log_y: bool, y_title: str) -> list[alt.Chart]:
    """Stack the layers, bottom to top, of the parts that have rows."""
    y = alt.Y(
        "value:Q",
        scale=value_scale(log_y),
        title=y_title + (", log scale" if log_y else ""),
        axis=value_axis(log_y),
    )
    group = alt.Tooltip(f"{GROUP_FIELD}:N", title="curve")
    layers = _band_layers(group)
    if "trial" in parts:
        layers.append(
            alt.Chart()
            .transform_filter(part("trial"))
            .mark_circle(size=12, color=style.TRIAL_COLOR, opacity=0.35, clip=True)
            .encode(
                x=x_encoding("budget", "budget"),
                y=y,
                tooltip=[
                    group,
                    alt.Tooltip("budget:Q", title=style.axis_title("budget")),
                    alt.Tooltip("value:Q", format=".4g", title="trial latency (s)"),
                ],
            )
        )
    layers += _cell_layers(y, group)
    if "probe" in parts:
        layers.append(_probe_layer(y, group, parts["probe"]))
    return layers


def _band_layers(group: alt.Tooltip) -> list[alt.Chart]:
    """Grid brackets (light), refined brackets (dark band and rules) and their labels."""
    grid_tip = [
        group,
        alt.Tooltip("kind:N", title="boundary"),
        alt.Tooltip("x_lo:Q", title="grid bracket: last budget before"),
        alt.Tooltip("x_hi:Q", title="grid bracket: first budget after"),
    ]
    tip = [
        group,
        alt.Tooltip("kind:N", title="boundary"),
        alt.Tooltip("low:Q", title="refined: last budget before"),
        alt.Tooltip("high:Q", title="refined: first budget after"),
        alt.Tooltip("status:N", title="status"),
        alt.Tooltip("grid_low:Q", title="grid bracket from"),
        alt.Tooltip("grid_high:Q", title="grid bracket to"),
        alt.Tooltip("probes:Q", title="probes"),
        alt.Tooltip("generations:Q", title="generations spent"),
    ]
    x = x_encoding("x_lo", "budget")
    grid = (
        alt.Chart()
        .transform_filter(part("grid"))
        .mark_rect(color=style.ORANGE, opacity=0.12, clip=True)
        .encode(x=x, x2="x_hi:Q", tooltip=grid_tip)
    )
    bracket = alt.Chart().transform_filter(part("bracket"))
    band = bracket.mark_rect(color=style.BLACK, opacity=0.3, clip=True).encode(
        x=x, x2="x_hi:Q", tooltip=tip
    )
    rules = (
        bracket.transform_fold(["x_lo", "x_hi"], as_=["end", "at"])
        .mark_rule(color=style.BLACK, strokeWidth=1, clip=True)
        .encode(x=x_encoding("at", "budget"), tooltip=tip)
    )
    return [grid, band, rules, *_bracket_labels(bracket, tip)]


def _bracket_labels(bracket: alt.Chart, tip: list[alt.Tooltip]) -> list[alt.Chart]:
    """Each refined bracket's label, beside its rules on the side :func:`_label_side` chose."""
    text: dict[str, Any] = {"fontSize": 11, "fontWeight": "bold", "baseline": "top", "clip": True}
    labels = [
        # beside the bracket, clear of its rules by a few pixels; dy, not y, sets the
        # line: the page's loader moves a y in pixels down when it makes a panel taller
        bracket.transform_filter(f"{'' if right else '!'}datum.label_right")
        .transform_filter(f"{'' if low else '!'}datum.label_low")
        .mark_text(
            align="left" if right else "right",
            dx=7 if right else -7,
            dy=18 if low else 3,
            color=style.BLACK,
            **text,
        )
        .encode(
            x=x_encoding("x_hi" if right else "x_lo", "budget"),
            y=alt.value(3),
            text="label:N",
            tooltip=tip,
        )
        for right in (True, False)
        for low in (False, True)
    ]
    return labels


def _cell_layers(y: alt.Y, group: alt.Tooltip) -> list[alt.Chart]:
    """Median of every budget as a thin line, and the grid budgets' medians as points."""
    tip = [
        group,
        alt.Tooltip("budget:Q", title=style.axis_title("budget")),
        alt.Tooltip("value:Q", format=".4g", title="median"),
        alt.Tooltip("n:Q", title="generations"),
        alt.Tooltip("on_grid:N", title="on the grid"),
    ]
    base = alt.Chart().transform_filter(part("cell"))
    line = base.mark_line(color=style.GREY, strokeWidth=1, opacity=0.7, clip=True).encode(
        x=x_encoding("budget", "budget"), y=y, tooltip=tip
    )
    points = (
        base.transform_filter("datum.on_grid")
        .mark_point(color=style.BLACK, size=22, filled=True, clip=True)
        .encode(x=x_encoding("budget", "budget"), y=y, tooltip=tip)
    )
    return [line, points]


def _probe_layer(y: alt.Y, group: alt.Tooltip, probes: pl.DataFrame) -> alt.Chart:
    """Each probe's median, coloured and shaped by its decision."""
    present = set(probes.get_column("decision").to_list())
    domain = [d for d in _DECISIONS if d in present] + sorted(present - set(_DECISIONS))
    colours = [_DECISIONS.get(d, (style.GREY, "circle"))[0] for d in domain]
    shapes = [_DECISIONS.get(d, (style.GREY, "circle"))[1] for d in domain]
    tip = [
        group,
        alt.Tooltip("kind:N", title="boundary"),
        alt.Tooltip("budget:Q", title="probe budget"),
        alt.Tooltip("decision:N", title="decision"),
        alt.Tooltip("value:Q", format=".4g", title="median"),
    ]
    named = {
        "left_level": "level tested, left side",
        "right_level": "level tested, right side",
        "n": "trials",
        "sessions": "sessions",
        "llr": "log-likelihood ratio (right / left)",
    }
    tip += [
        alt.Tooltip(f"{c}:Q", format=".4g", title=t)
        for c, t in named.items()
        if c in probes.columns
    ]
    legend = style.legend(title="probe decision")
    return (
        alt.Chart()
        .transform_filter(part("probe"))
        .mark_point(
            size=70, filled=True, opacity=0.9, stroke=style.BLACK, strokeWidth=0.5, clip=True
        )
        .encode(
            x=x_encoding("budget", "budget"),
            y=y,
            color=alt.Color(
                "decision:N", scale=alt.Scale(domain=domain, range=colours), legend=legend
            ),
            shape=alt.Shape(
                "decision:N", scale=alt.Scale(domain=domain, range=shapes), legend=legend
            ),
            tooltip=tip,
        )
    )


def _describe(labelled: pl.DataFrame, parts: dict[str, pl.DataFrame]) -> str:
    """Describe what the chart draws and found, for screen readers and the page."""
    found = [
        f"{row[GROUP_FIELD]} {_bracket_text(row)} (grid {row['grid_low']}|{row['grid_high']})"
        for row in labelled.iter_rows(named=True)
    ]
    probes = parts.get("probe")
    n_probes = 0 if probes is None else probes.height
    return (
        "Each refined curve against the decoding budget: grid brackets shaded light, "
        f"refined brackets dark; {n_probes} probe(s) coloured by decision; "
        + "; ".join(found)
        + "."
    )
