"""Charts (Altair) and the offline HTML report.

``regimes.viz.charts`` (also ``regimes.plot``) holds the chart functions, one module
per chart behind it; ``regimes.viz.html`` (also ``regimes.report``) builds the report.
:func:`result_chart` draws any analysis result; every result's ``chart()`` calls it.
"""

from regimes.viz._dispatch import result_chart

__all__ = ["result_chart"]

result_chart.__module__ = __name__  # documented, and its example run, where users find it
