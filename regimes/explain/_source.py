"""The anomalies an explanation explains: a given detection's, or one it runs itself.

Apart from :mod:`regimes.explain._anomalies` because it is the explanations' one edge
down to :mod:`regimes.detect`: the detection reads its own history note through
:mod:`regimes.explain.history`, which reads reports with ``_anomalies``, so that module
must never import the detection back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from regimes.data.schema import RegimesInputError
from regimes.explain._anomalies import AnomalyInput, frame_columns, read_report

__all__ = ["anomaly_source"]


def anomaly_source(
    df: Any,
    report: Any,
    *,
    x: str | None,
    y: str | None,
    by: str | Sequence[str] | None,
    detection: Mapping[str, Any],
    detection_only: Sequence[str] = (),
) -> AnomalyInput:
    """Read the anomalies to explain from ``report``, or detect them when it is None.

    ``x``, ``y`` and ``by`` default to the report's; given with a report they must agree
    with it. Without a report, :func:`regimes.detect_regimes` runs on ``df`` with them
    (``x="budget"``, ``y="latency_s"`` when None) and with the non-None ``detection``
    options (``alpha``, ``level``, ``n_boot``, ``seed``, ``session``). Options named in
    ``detection_only`` steer nothing but the detection, so giving them together with a
    report is an error rather than silently ignored.
    """
    if report is None:
        from regimes.detect import detect_regimes

        options = {k: v for k, v in detection.items() if v is not None}
        report = detect_regimes(df, x=x or "budget", y=y or "latency_s", by=by, **options)
    else:
        unused = sorted(k for k in detection_only if detection.get(k) is not None)
        if unused:
            raise RegimesInputError(
                f"detection options {unused} apply only when no report is given; "
                "pass them to detect_regimes instead"
            )
    source = read_report(report, frame_columns(df))
    _check_agrees(source, x, y, by)
    return source


def _check_agrees(
    source: AnomalyInput, x: str | None, y: str | None, by: str | Sequence[str] | None
) -> None:
    for name, given, used in (("x", x, source.x), ("y", y, source.y)):
        if given is not None and given != used:
            raise RegimesInputError(
                f"{name}={given!r} but the report was computed with {name}={used!r}; "
                f"omit {name} or detect again with {name}={given!r}"
            )
    if by is not None:
        wanted = [by] if isinstance(by, str) else [str(c) for c in by]
        if wanted != source.group_columns:
            raise RegimesInputError(
                f"by={wanted} but the report groups by {source.group_columns}; omit by or "
                "detect again with the same by"
            )
