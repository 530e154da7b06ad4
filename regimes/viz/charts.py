"""Charts of latency regimes: Altair objects built from polars frames.

Every function returns an Altair chart, so a notebook renders it and :func:`save`
writes it to HTML, PNG or SVG offline (through vl-convert, no browser, no network).
Reachable as ``regimes.plot``. Each chart lives in its own module behind this one:

- :func:`latency_chart`: latency per group with trials, CI band, trend, change points
  and labelled anomalies (the chart of :func:`regimes.detect_regimes`);
- :func:`speedup_chart`: the KV-cache speedup and its collapses;
- :func:`phase_chart`: prefill and decode stacked per budget;
- :func:`overview_heatmap`: every group at a glance;
- :func:`comparison_chart`: two runs, their regimes and what changed between them;
- :func:`history_chart`, :func:`backends_chart`, :func:`memory_chart`,
  :func:`phase_excess_chart`, :func:`alignment_chart`: the explanations;
- :func:`refine_chart`: each refined boundary, its probes and its bracket to the
  token (the chart of :func:`regimes.refine_boundaries`);
- :func:`result_chart`: the chart of any analysis result (what ``result.chart()``
  returns), including the explanations' charts.

The charts against x share one layout: small multiples (one panel per group, each
with its own y scale), a drop-down to show one group, and an overview strip whose x
brush zooms every panel; colours come from a colour-blind-safe palette, axis titles
carry units, and each chart has a Vega-Lite ``description``.
"""

from __future__ import annotations

from regimes.viz._compare_chart import comparison_chart
from regimes.viz._dispatch import result_chart
from regimes.viz._explain import (
    alignment_chart,
    backends_chart,
    memory_chart,
    phase_excess_chart,
    phases_result_chart,
)
from regimes.viz._frames import GROUP_FIELD, NOISY_SPREAD, group_labels, report_axes
from regimes.viz._history_chart import history_chart
from regimes.viz._latency import latency_chart
from regimes.viz._overview import overview_heatmap
from regimes.viz._phases import phase_chart
from regimes.viz._refine_chart import refine_chart
from regimes.viz._save import enable_notebook, save, vegalite_version
from regimes.viz._speedup import speedup_chart

__all__ = [
    "GROUP_FIELD",
    "NOISY_SPREAD",
    "alignment_chart",
    "backends_chart",
    "comparison_chart",
    "enable_notebook",
    "group_labels",
    "history_chart",
    "latency_chart",
    "memory_chart",
    "overview_heatmap",
    "phase_chart",
    "phase_excess_chart",
    "phases_result_chart",
    "refine_chart",
    "report_axes",
    "result_chart",
    "save",
    "speedup_chart",
    "vegalite_version",
]

# The functions live in one private module per chart; they are documented, and their
# examples run, as members of this module, where users find them.
for _name in __all__:
    _member = globals()[_name]
    if callable(_member) and getattr(_member, "__module__", "").startswith("regimes.viz._"):
        if _name != "result_chart":
            _member.__module__ = __name__
