"""One offline HTML report of a run: environment, findings with their CIs, and charts.

:func:`build_report` analyses a run (or takes analyses already made) and returns a
:class:`RunReport`; :meth:`RunReport.write` renders it to a single HTML file that
needs no network when it is opened: the Vega, Vega-Lite and vega-embed libraries are
inlined (vl-convert's JavaScript bundle), and every chart's data travels inside its
spec. The page records its rendering state in ``data-`` attributes (each chart
``data-rendered="ok"`` or ``"error"``, the body ``data-charts="done"``) so that
automated checks know when it has drawn.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from regimes.data.io import Run, read_run
from regimes.data.schema import RegimesInputError, as_polars, validate_trials
from regimes.viz import charts as plot
from regimes.viz._frames import ratio_label

__all__ = [
    "ChartSection",
    "Explanation",
    "RunReport",
    "build_report",
    "headlines",
    "result_summary",
]

_MAX_TABLE_ROWS = 200


@dataclass(frozen=True)
class ChartSection:
    """A chart in the report with its heading and a sentence on how to read it."""

    key: str
    title: str
    caption: str
    chart: alt.TopLevelMixin


@dataclass(frozen=True)
class Explanation:
    """An explanation of the anomalies (phase, backend, memory, prompt length)."""

    key: str
    title: str
    result: Any
    table: pl.DataFrame


@dataclass
class RunReport:
    """Everything a report shows; :meth:`to_html` renders it, :meth:`write` saves it."""

    title: str
    meta: dict[str, Any]
    trials: pl.DataFrame
    regimes: Any
    speedup: Any = None
    charts: list[ChartSection] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: pl.DataFrame | None = None
    explanations: list[Explanation] = field(default_factory=list)

    @property
    def x(self) -> str:
        return plot.report_axes(self.regimes)[0]

    @property
    def y(self) -> str:
        return plot.report_axes(self.regimes)[1]

    @property
    def group_columns(self) -> list[str]:
        return plot.report_axes(self.regimes)[2]

    # ----------------------------------------------------------------- text

    def headlines(self) -> list[str]:
        """One line per finding: each anomaly, each speedup collapse."""
        return headlines(self.regimes, self.speedup)

    def summary(self) -> str:
        """The headline findings and the detection summary as plain text."""
        return "\n".join(
            [self.title, *("  " + h for h in self.headlines()), "", result_summary(self.regimes)]
        )

    # ----------------------------------------------------------------- output

    def to_html(self) -> str:
        """The whole report as one self-contained HTML document."""
        import vl_convert as vlc

        bundle = vlc.javascript_bundle(vl_version=plot.vegalite_version())
        specs = {f"chart-{s.key}": s.chart.to_dict() for s in self.charts}
        body = [
            f"<h1>{_e(self.title)}</h1>",
            f"<p class='sub'>generated {_e(_now())} by regimes {_e(_version())}</p>",
            self._findings_html(),
            self._charts_html(),
            self._explanations_html(),
            self._tables_html(),
            self._data_html(),
            self._environment_html(),
        ]
        return _PAGE.format(
            title=_e(self.title),
            style=_STYLE,
            bundle=_script_safe(bundle),
            body="\n".join(body),
            specs=_script_safe(json.dumps(specs, separators=(",", ":"), allow_nan=False)),
            loader=_LOADER,
        )

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`to_html` to ``path``, atomically."""
        target = Path(path)
        text = self.to_html()
        tmp = target.with_name(f".{target.name}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, target)
        except OSError as exc:
            raise RegimesInputError(f"cannot write {str(target)!r}: {exc.strerror}") from None
        return target

    def write_images(self, directory: str | os.PathLike[str], fmt: str = "png") -> list[Path]:
        """Save every chart as ``<key>.<fmt>`` (png or svg) in ``directory``."""
        if fmt not in ("png", "svg"):
            raise RegimesInputError(f"image format must be 'png' or 'svg', got {fmt!r}")
        out = Path(directory)
        return [plot.save(s.chart, out / f"{s.key}.{fmt}") for s in self.charts]

    # ----------------------------------------------------------------- sections

    def _findings_html(self) -> str:
        items = "".join(f"<li>{_e(h)}</li>" for h in self.headlines())
        notes = "".join(f"<li>{_e(n)}</li>" for n in self.notes)
        parts = ["<section id='findings'><h2>Findings</h2>", f"<ul class='headlines'>{items}</ul>"]
        if notes:
            parts.append(f"<ul class='notes'>{notes}</ul>")
        parts.append(f"<pre class='summary'>{_e(result_summary(self.regimes))}</pre></section>")
        return "".join(parts)

    def _charts_html(self) -> str:
        blocks = [
            f"<figure><h2>{_e(s.title)}</h2><div class='chart' id='chart-{_e(s.key)}' "
            f"data-chart='{_e(s.key)}'></div><figcaption>{_e(s.caption)}</figcaption></figure>"
            for s in self.charts
        ]
        return "<section id='charts'>" + "".join(blocks) + "</section>"

    def _explanations_html(self) -> str:
        if not self.explanations:
            return ""
        parts = ["<section id='explanations'><h2>What the anomalies go with</h2>"]
        for item in self.explanations:
            parts.append(
                f"<h3 id='explain-{_e(item.key)}'>{_e(item.title)}</h3>"
                f"<pre class='summary'>{_e(result_summary(item.result))}</pre>"
                + _html_table(item.table)
            )
        parts.append("</section>")
        return "".join(parts)

    def _tables_html(self) -> str:
        rep = self.regimes
        parts = ["<section id='tables'><h2>Tables</h2>"]
        parts.append("<h3>Anomalies</h3>" + _anomaly_table(rep.anomalies, self.group_columns))
        change_points = getattr(rep, "change_points", None)
        if isinstance(change_points, pl.DataFrame):
            tested = change_points.height
            if "significant" in change_points.columns:
                change_points = change_points.filter(pl.col("significant"))
            parts.append(
                f"<h3>Change points</h3><p>{change_points.height} significant of "
                f"{tested} tested.</p>" + _html_table(change_points)
            )
        if self.speedup is not None:
            parts.append(
                "<h3>KV-cache speedup</h3><pre class='summary'>"
                + _e(result_summary(self.speedup))
                + "</pre>"
            )
            parts.append(
                "<h3>KV-cache speedup collapses</h3>"
                + _anomaly_table(
                    self.speedup.collapses, [c for c in self.group_columns if c != "use_cache"]
                )
            )
        parts.append("</section>")
        return "".join(parts)

    def _data_html(self) -> str:
        keys = self.group_columns
        per_group = (
            self.trials.group_by(keys or pl.lit(1).alias("_all"), maintain_order=True)
            .agg(
                pl.col(self.x).n_unique().alias(f"{self.x} values"),
                pl.col(self.x).min().alias(f"min {self.x}"),
                pl.col(self.x).max().alias(f"max {self.x}"),
                pl.len().alias("trials"),
                *(
                    [pl.col("session").n_unique().alias("sessions")]
                    if "session" in self.trials.columns
                    else []
                ),
            )
            .sort(keys or "_all")
            .drop("_all", strict=False)
        )
        parts = [
            "<section id='data'><h2>Data</h2>",
            f"<p>{self.trials.height} measured trials (warm-ups excluded) in "
            f"{per_group.height} group(s).</p>",
            _html_table(per_group),
        ]
        if self.errors is not None and self.errors.height:
            parts.append(f"<h3>Cases that raised ({self.errors.height})</h3>")
            parts.append(_html_table(self.errors.drop("traceback", strict=False)))
        parts.append("</section>")
        return "".join(parts)

    def _environment_html(self) -> str:
        meta = dict(self.meta)
        spec = meta.pop("spec", None)
        rows = pl.DataFrame(
            [{"key": k, "value": v} for k, v in _flatten(meta)],
            schema={"key": pl.String, "value": pl.String},
        )
        parts = ["<section id='environment'><h2>Environment</h2>"]
        parts.append(_html_table(rows) if rows.height else "<p>The run carries no metadata.</p>")
        if spec is not None:
            parts.append(
                "<details><summary>Sweep specification</summary><pre>"
                + _e(json.dumps(spec, indent=2, default=str))
                + "</pre></details>"
            )
        parts.append("</section>")
        return "".join(parts)


# --------------------------------------------------------------------------- building


def headlines(regimes: Any, speedup: Any = None) -> list[str]:
    """One readable line per anomaly of ``regimes`` and per collapse of ``speedup``.

    Groups are named by the labels the charts use; each line gives the interval, the
    ratio over the smooth trend with its CI, the q value and whether it recovers.
    """
    x, y, group_columns = plot.report_axes(regimes)
    curve_labels = plot.group_labels(regimes.curve, group_columns)[0]
    level = _level(regimes)
    lines = [
        f"{row['group']}: {y} at {x} {_span(row)} is {row['ratio']:.3g}x its smooth trend "
        f"({level} CI {row['ratio_low']:.3g} to {row['ratio_high']:.3g})"
        + (f", q = {row['q_value']:.2g}" if row.get("q_value") is not None else "")
        + _recovery(row)
        for row in _labelled(regimes.anomalies, group_columns, curve_labels).iter_rows(named=True)
    ]
    collapses = getattr(speedup, "collapses", None)
    if isinstance(collapses, pl.DataFrame) and collapses.height:
        keys = [c for c in group_columns if c in collapses.columns and c != "use_cache"]
        speed_labels = plot.group_labels(speedup.speedup, keys)[0]
        lines += [
            f"{row['group']}: the KV-cache speedup at {x} {_span(row)} is {row['ratio']:.3g}x "
            f"its trend ({_level(speedup)} CI {row['ratio_low']:.3g} to {row['ratio_high']:.3g})"
            for row in _labelled(collapses, keys, speed_labels).iter_rows(named=True)
        ]
    if not lines:
        lines.append(f"no anomaly: {y} follows its smooth trend in every group")
    return lines


def build_report(
    source: Any,
    *,
    x: str = "budget",
    y: str = "latency_s",
    by: Sequence[str] | None = None,
    regimes: Any = None,
    speedup: Any = None,
    max_panels: int = 12,
    heatmap_min_groups: int = 4,
    title: str | None = None,
    **detect_options: Any,
) -> RunReport:
    """Analyse a run and gather what its report shows.

    ``source`` is a run directory or trial file path, a :class:`regimes.Run`, or a trial
    table. The detection (``regimes.detect_regimes(trials, x, y, by, **detect_options)``,
    e.g. ``alpha``, ``min_ratio``, ``n_boot``, ``seed``, ``direction``) and the cache
    speedup (``regimes.cache_speedup``, when both cache settings were measured) are run
    unless given as ``regimes`` / ``speedup``.

    Charts, each included when the data supports it: latency per group (at most
    ``max_panels`` panels, groups with anomalies first); an overview heatmap when
    there are ``heatmap_min_groups`` groups or more; the cache speedup; the phases
    when the trials were instrumented.
    """
    run = _as_run(source)
    trials_raw = run.trials
    notes: list[str] = []
    if regimes is None:
        from regimes.detect import detect_regimes

        regimes = detect_regimes(trials_raw, x=x, y=y, by=by, **detect_options)
    x, y, group_columns = plot.report_axes(regimes)
    trials = validate_trials(trials_raw, x=x, y=y, required=[*group_columns, x, y])
    if speedup is None:
        speedup = _try_speedup(trials_raw, x, y, by, detect_options, notes)

    labels, _ = plot.group_labels(regimes.curve, group_columns)
    charts = [_latency_section(regimes, trials, labels, group_columns, max_panels, notes)]
    if labels.height >= heatmap_min_groups:
        charts.append(
            ChartSection(
                "heatmap",
                "Overview: every group against the trend",
                f"Colour is the median {y} over its smooth trend (log scale; red slower, blue "
                f"faster); anomalous intervals are outlined.",
                plot.overview_heatmap(regimes),
            )
        )
    if speedup is not None:
        charts.append(
            ChartSection(
                "speedup",
                "KV-cache speedup",
                "Cache-off over cache-on latency with its CI; shaded: significant collapses "
                "below the speedup trend, labelled with their ratio and CI.",
                plot.speedup_chart(speedup, x=x),
            )
        )
    if _is_instrumented(trials):
        charts.append(
            ChartSection(
                "phases",
                "Prefill and decode",
                "Median prefill and decode time stacked per budget; the tick is the median "
                "end-to-end latency.",
                plot.phase_chart(trials, x=x, by=group_columns),
            )
        )
    name = run.meta.get("name") or run.meta.get("run_id") or (run.path.name if run.path else "")
    return RunReport(
        title=title or f"regimes report{': ' + str(name) if name else ''}",
        meta=run.meta,
        trials=trials,
        regimes=regimes,
        speedup=speedup,
        charts=charts,
        notes=notes,
        errors=run.errors,
        explanations=_explanations(trials_raw, trials, regimes, detect_options, notes),
    )


def _as_run(source: Any) -> Run:
    if isinstance(source, Run):
        return source
    if isinstance(source, (str, os.PathLike)):
        return read_run(source)
    return Run(as_polars(source), pl.DataFrame(), pl.DataFrame(), {}, None)


_SHARED_OPTIONS = ("alpha", "min_ratio", "n_boot", "seed", "level", "penalty", "session")
"""Options of ``detect_regimes`` that ``cache_speedup`` takes too (not ``direction``)."""


def _try_speedup(
    trials: pl.DataFrame,
    x: str,
    y: str,
    by: Sequence[str] | None,
    detect_options: dict[str, Any],
    notes: list[str],
) -> Any:
    """The cache speedup when both cache settings were measured, else ``None``."""
    if "use_cache" not in trials.columns or trials["use_cache"].drop_nulls().n_unique() < 2:
        return None
    from regimes.speedup import cache_speedup

    options = {k: v for k, v in detect_options.items() if k in _SHARED_OPTIONS}
    speedup_by = None if by is None else [c for c in by if c != "use_cache"]
    try:
        return cache_speedup(trials, x=x, y=y, by=speedup_by, **options)
    except RegimesInputError as exc:  # e.g. no budget measured both ways
        notes.append(f"KV-cache speedup not analysed: {exc}")
        return None


_MEMORY_COLUMNS = ("mem_driver_bytes", "mem_allocated_bytes", "rss_bytes")


def _explanations(
    trials_raw: pl.DataFrame,
    trials: pl.DataFrame,
    regimes: Any,
    detect_options: dict[str, Any],
    notes: list[str],
) -> list[Explanation]:
    """Run each explanation the data supports on the anomalies found.

    Phases need instrumented trials, backends two backends or more, memory a memory
    reading, alignment two prompt lengths or more. One that cannot run on this data
    leaves a note saying why instead of stopping the report.
    """
    if regimes.anomalies.height == 0:
        return []
    from regimes.explain.alignment import align_boundaries
    from regimes.explain.backends import compare_backends
    from regimes.explain.memory import memory_confound
    from regimes.explain.phases import attribute_phases

    _, _, group_columns = plot.report_axes(regimes)
    shared = {k: v for k, v in detect_options.items() if k in ("alpha", "level")}
    boot = {k: v for k, v in detect_options.items() if k in ("n_boot", "seed", "level")}
    plans: list[tuple[str, str, Any, str]] = []
    if _is_instrumented(trials):
        plans.append(
            (
                "phases",
                "Prefill or decode: where the excess time goes",
                lambda: attribute_phases(trials_raw, regimes, **boot),
                "phases",
            )
        )
    if "backend" in group_columns and trials["backend"].n_unique() >= 2:
        plans.append(
            (
                "backends",
                "Is it specific to one backend?",
                lambda: compare_backends(trials_raw, regimes, **shared),
                "comparisons",
            )
        )
    memory = next(
        (c for c in _MEMORY_COLUMNS if c in trials.columns and trials[c].drop_nulls().len() > 0),
        None,
    )
    if memory is not None:
        plans.append(
            (
                "memory",
                f"Does memory ({memory}) explain it?",
                lambda: memory_confound(
                    trials_raw, regimes, memory, alpha=shared.get("alpha", 0.05)
                ),
                "effects",
            )
        )
    if "prompt_tokens" in group_columns and trials["prompt_tokens"].n_unique() >= 2:
        plans.append(
            (
                "alignment",
                "Does it follow the budget or the total length?",
                lambda: align_boundaries(trials_raw, regimes),
                "boundaries",
            )
        )
    done = []
    for key, title, run, table in plans:
        try:
            result = run()
        except RegimesInputError as exc:
            notes.append(f"{title} not analysed: {exc}")
            continue
        done.append(Explanation(key, title, result, getattr(result, table)))
    return done


def _is_instrumented(trials: pl.DataFrame) -> bool:
    if not {"prefill_s", "decode_s"} <= set(trials.columns):
        return False
    both = pl.col("prefill_s").is_not_null() & pl.col("decode_s").is_not_null()
    return bool(trials.select(both.any()).item())


def _latency_section(
    regimes: Any,
    trials: pl.DataFrame,
    labels: pl.DataFrame,
    group_columns: list[str],
    max_panels: int,
    notes: list[str],
) -> ChartSection:
    x, y, _ = plot.report_axes(regimes)
    order = labels[plot.GROUP_FIELD].to_list()
    shown: list[str] | None = None
    if len(order) > max_panels:
        flagged = _labelled(regimes.anomalies, group_columns, labels)
        strongest = (
            flagged.group_by(plot.GROUP_FIELD)
            .agg(pl.col("ratio").log().abs().max().alias("s"))
            .sort("s", descending=True)[plot.GROUP_FIELD]
            .to_list()
        )
        shown = (strongest + [g for g in order if g not in strongest])[:max_panels]
        notes.append(
            f"The latency chart shows {max_panels} of {len(order)} groups (those with the "
            "strongest anomalies first); the heatmap shows them all."
        )
    return ChartSection(
        "latency",
        f"{y} by {x}",
        "Faint points: trials. Line and band: median and its bootstrap CI. Dashed: the "
        "smooth trend. Shaded: significant anomalies, labelled with their ratio over the "
        "trend and its CI. Orange rules: change points.",
        plot.latency_chart(regimes, trials, groups=shown),
    )


# --------------------------------------------------------------------------- formatting


def _labelled(
    frame: pl.DataFrame | None, group_columns: Sequence[str], labels: pl.DataFrame
) -> pl.DataFrame:
    """``frame`` with the chart's group label of each row (labels from the full curve)."""
    if frame is None or frame.height == 0:
        return pl.DataFrame(
            {plot.GROUP_FIELD: [], "ratio": []},
            schema={plot.GROUP_FIELD: pl.String, "ratio": pl.Float64},
        )
    keys = [c for c in group_columns if c in frame.columns]
    if not keys:
        return frame.with_columns(pl.lit("all").alias(plot.GROUP_FIELD))
    return frame.join(
        labels.select([*keys, plot.GROUP_FIELD]), on=keys, how="left", nulls_equal=True
    )


def _level(result: Any) -> str:
    """``95%``: the confidence level a result's intervals were computed at."""
    params = getattr(result, "params", None) or {}
    level = params.get("level", getattr(result, "level", 0.95))
    return f"{100 * float(level):g}%"


def _span(row: dict[str, Any]) -> str:
    return str(row["start"]) if row["start"] == row["end"] else f"{row['start']}–{row['end']}"


def _recovery(row: dict[str, Any]) -> str:
    recovered = row.get("recovered")
    if recovered is None:
        return ""
    return ", recovers after it" if recovered else ", stays up (a step)"


def result_summary(regimes: Any) -> str:
    """``regimes.summary()`` as text, a polars table printed in full."""
    summary = regimes.summary() if hasattr(regimes, "summary") else ""
    if isinstance(summary, pl.DataFrame):
        with pl.Config(tbl_rows=-1, tbl_cols=-1, tbl_width_chars=160):
            return str(summary)
    return str(summary)


def _anomaly_table(frame: pl.DataFrame | None, group_columns: Sequence[str]) -> str:
    if frame is None or frame.height == 0:
        return "<p>None significant.</p>"
    keys = [c for c in group_columns if c in frame.columns]
    shown = frame.with_columns(ratio_label("ratio", "ratio_low", "ratio_high").alias("ratio [CI]"))
    leading = [*keys, "start", "end", "ratio [CI]"]
    rest = [
        c
        for c in shown.columns
        if c not in leading and c not in ("ratio", "ratio_low", "ratio_high")
    ]
    return _html_table(shown.select([*leading, *rest]))


def _html_table(frame: pl.DataFrame) -> str:
    """A plain HTML table; floats to four significant digits, long tables cut."""
    if frame.width == 0 or frame.height == 0:
        return "<p>None.</p>"
    shown = frame.head(_MAX_TABLE_ROWS)
    text = shown.select(
        [
            (pl.col(c).fill_nan(None).round_sig_figs(4) if t.is_float() else pl.col(c))
            .cast(pl.String)
            .fill_null("")
            .alias(c)
            if t.is_numeric() or t in (pl.String, pl.Boolean)
            else pl.col(c)
            .map_elements(lambda v: json.dumps(v, default=str), return_dtype=pl.String)
            .alias(c)
            for c, t in shown.schema.items()
        ]
    )
    numeric = {c for c, t in shown.schema.items() if t.is_numeric()}
    head = "".join(f"<th>{_e(c)}</th>" for c in text.columns)
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td class='num'>{_e(v)}</td>" if c in numeric else f"<td>{_e(v)}</td>"
            for c, v in zip(text.columns, row)
        )
        + "</tr>"
        for row in text.iter_rows()
    )
    more = (
        f"<p class='more'>{frame.height - _MAX_TABLE_ROWS} more row(s) not shown.</p>"
        if frame.height > _MAX_TABLE_ROWS
        else ""
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>{more}"


def _flatten(meta: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for key, value in meta.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flatten(value, f"{name}.")
        elif isinstance(value, (list, tuple)):
            out.append((name, json.dumps(value, default=str)))
        else:
            out.append((name, "" if value is None else str(value)))
    return out


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _script_safe(text: str) -> str:
    """Text that cannot end the ``<script>`` element it is inlined in."""
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE).replace("<!--", "<\\!--")


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _version() -> str:
    from regimes import __version__

    return __version__


_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto;
       max-width: 1500px; padding: 0 1rem; color: #222; }
h1 { margin-bottom: 0.2rem; } .sub { color: #666; margin-top: 0; }
section { margin: 2rem 0; } figure { margin: 2rem 0; }
figcaption { color: #555; font-size: 0.9rem; max-width: 60rem; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0; }
th, td { border-bottom: 1px solid #ddd; padding: 0.2rem 0.6rem; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f6f6; padding: 0.8rem; overflow-x: auto; font-size: 0.8rem; }
.headlines li { margin: 0.2rem 0; } .notes { color: #8a5a00; }
.chart-error { color: #b00020; font-weight: bold; }
"""

_LOADER = """
(function () {
  var specs = JSON.parse(document.getElementById("regimes-specs").textContent);
  var jobs = Object.keys(specs).map(function (id) {
    var el = document.getElementById(id);
    return vegaEmbed(el, specs[id], {renderer: "svg",
        actions: {export: true, source: false, compiled: false, editor: false}})
      .then(function () { el.dataset.rendered = "ok"; })
      .catch(function (err) {
        el.dataset.rendered = "error";
        el.innerHTML = "<p class='chart-error'>This chart failed to render.</p>";
        console.error("chart " + id + " failed: " + err);
      });
  });
  Promise.all(jobs).then(function () { document.body.dataset.charts = "done"; });
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style>
<script>{bundle}</script>
</head>
<body>
{body}
<script type="application/json" id="regimes-specs">{specs}</script>
<script>{loader}</script>
</body>
</html>
"""
