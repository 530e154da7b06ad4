"""The page of a report or of one saved chart: template, style, contents, chart loader.

The loader fits each chart to the width of its column before drawing it: the small
multiples take as many columns as fit (one on a phone) and share the width between
them, and single views take the width less room for their labels. Each chart records
its state in ``data-rendered`` (``ok`` or ``error``) and the body ``data-charts="done"``
once all have settled, so that automated checks know when the page has drawn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from regimes.viz._tables import escape


def script_safe(text: str) -> str:
    """Text that cannot end the ``<script>`` element it is inlined in."""
    return re.sub(r"</(script)", r"<\\/\1", text, flags=re.IGNORECASE).replace("<!--", "<\\!--")


def json_script_safe(text: str) -> str:
    r"""JSON text that an HTML parser cannot end early, and that stays valid JSON.

    ``<``, ``>`` and ``&`` become ``\u003c``, ``\u003e`` and ``\u0026``: JSON allows
    them only inside strings, where these escapes mean the same characters, so
    ``JSON.parse`` returns exactly the labels that were written, and no ``</script>``
    or ``<!--`` (which would make the parser swallow the rest of the page) is left. The
    ``<\!--`` of :func:`script_safe` is fine in JavaScript code but not in JSON, which
    has no ``\!`` escape: a label holding ``<!--`` left every chart undrawn.
    """
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def contents(sections: Sequence[tuple[str, str, Sequence[tuple[str, str]]]]) -> str:
    """Build the table of contents from ``(anchor, title, children)`` sections."""
    items = []
    for anchor, title, children in sections:
        sub = "".join(f"<li><a href='#{escape(a)}'>{escape(t)}</a></li>" for a, t in children)
        items.append(
            f"<li><a href='#{escape(anchor)}'>{escape(title)}</a>"
            + (f"<ol>{sub}</ol>" if sub else "")
            + "</li>"
        )
    return (
        "<nav class='toc' aria-label='Contents'><h2>Contents</h2><ol>"
        + "".join(items)
        + "</ol></nav>"
    )


def figure(key: str, title: str = "", caption: str = "", heading: str = "h3") -> str:
    """Return the place of one chart on a page: the loader draws spec ``chart-<key>`` there."""
    head = f"<{heading}>{escape(title)}</{heading}>" if title else ""
    cap = f"<figcaption>{escape(caption)}</figcaption>" if caption else ""
    return (
        f"<figure id='figure-{escape(key)}'>{head}<div class='chart' id='chart-{escape(key)}' "
        f"data-chart='{escape(key)}'></div>{cap}</figure>"
    )


STYLE = """
:root { --ink: #1d1d1f; --muted: #5f6368; --rule: #dde1e6; --accent: #0072B2; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto;
       max-width: 1400px; padding: 1rem clamp(0.75rem, 3vw, 2.5rem) 3rem; color: var(--ink);
       line-height: 1.45; }
h1 { margin: 0.5rem 0 0.2rem; font-size: clamp(1.4rem, 4vw, 2rem); }
h2 { margin-top: 2.2rem; border-bottom: 1px solid var(--rule); padding-bottom: 0.2rem; }
.sub { color: var(--muted); margin-top: 0; }
a { color: var(--accent); }
.findings { background: #f3f8fc; border-left: 4px solid var(--accent); padding: 0.6rem 1rem;
            border-radius: 4px; }
.findings ol { margin: 0.3rem 0; padding-left: 1.3rem; }
.findings li { margin: 0.35rem 0; font-size: 1.05rem; }
.notes { color: #8a5a00; }
.toc ol { margin: 0.2rem 0; padding-left: 1.3rem; }
.toc h2 { border: none; margin: 1rem 0 0.2rem; font-size: 1.1rem; }
figure { margin: 1.5rem 0; }
.chart { width: 100%; overflow-x: auto; }
.chart svg { max-width: 100%; height: auto; }
.vega-embed { width: 100%; }
.vega-bindings { margin: 0.4rem 0; font-size: 0.9rem; }
figcaption { color: var(--muted); font-size: 0.92rem; max-width: 70rem; }
.table { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0; }
caption { text-align: left; color: var(--muted); padding: 0.2rem 0; }
th, td { border-bottom: 1px solid var(--rule); padding: 0.25rem 0.6rem; text-align: left;
         vertical-align: top; }
thead th { background: #f6f7f9; }
.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
p, li { overflow-wrap: break-word; }
table.kv th { font-weight: 600; white-space: nowrap; }
details { margin: 0.6rem 0; } summary { cursor: pointer; font-weight: 600; }
pre { background: #f6f7f9; padding: 0.8rem; overflow-x: auto; font-size: 0.8rem; }
.chart-error { color: #b00020; font-weight: bold; }
"""

LOADER = """
(function () {
  var specs = JSON.parse(document.getElementById("regimes-specs").textContent);
  var AXES = 95, LABELS = 340;
  function fitGrid(views, grid, width) {
    var cols = Math.max(1, Math.min(grid.columns, Math.floor(width / 380)));
    var panel = Math.max(180, Math.floor(width / cols) - AXES);
    grid.columns = cols;
    grid.spec.width = panel;
    views.forEach(function (v) {
      if (v !== grid && typeof v.width === "number") { v.width = cols * (panel + AXES) - AXES; }
    });
    // A height in steps (one per row of a band axis) is already as tall as it needs.
    if (typeof grid.spec.height !== "number") { return; }
    // Wide panels get taller, so that a curve keeps its slope readable; labels set at
    // the foot of a panel (a fixed y in pixels) move down with it.
    var taller = Math.max(grid.spec.height, Math.min(360, Math.round(panel * 0.38)));
    var moved = taller - grid.spec.height;
    grid.spec.height = taller;
    (grid.spec.layer || []).forEach(function (layer) {
      var y = layer.encoding && layer.encoding.y;
      if (y && typeof y.value === "number" && y.value > 3) { y.value += moved; }
    });
  }
  function fit(spec, width) {
    var views = spec.vconcat || [spec];
    var grid = views.filter(function (v) { return v.facet && v.spec && v.columns; })[0];
    if (grid) { fitGrid(views, grid, width); return spec; }
    if (typeof spec.width === "number") {
      spec.width = Math.max(180, width - LABELS);
    }
    return spec;
  }
  var jobs = Object.keys(specs).map(function (id) {
    var el = document.getElementById(id);
    return vegaEmbed(el, fit(specs[id], el.clientWidth), {renderer: "svg",
        actions: {export: true, source: false, compiled: false, editor: false}})
      .then(function (result) { el.vegaView = result.view; el.dataset.rendered = "ok"; })
      .catch(function (err) {
        el.dataset.rendered = "error";
        el.innerHTML = "<p class='chart-error'>This chart failed to render.</p>";
        console.error("chart " + id + " failed: " + err);
      });
  });
  Promise.all(jobs).then(function () { document.body.dataset.charts = "done"; });
})();
"""

VIEWPORT = '<meta name="viewport" content="width=device-width, initial-scale=1">'
"""Without it a phone lays a page out at a desktop width (980 px) and shrinks it."""

PAGE = (
    """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
"""
    + VIEWPORT
    + """
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
)
