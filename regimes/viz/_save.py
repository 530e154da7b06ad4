"""Writing charts to files, offline (vl-convert: no browser, no network)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import altair as alt

from regimes.errors import RegimesInputError
from regimes.viz import _page
from regimes.viz._layout import ZOOM_HINT

_WRITERS = (".html", ".png", ".svg", ".json")


def vegalite_version() -> str | None:
    """Return the Vega-Lite version Altair writes, as vl-convert names it (``"6.4"``).

    Returns
    -------
    str or None
        ``None`` when the installed vl-convert does not ship that version, in which
        case vl-convert uses its newest one.
    """
    import vl_convert as vlc

    wanted = alt.SCHEMA_VERSION.lstrip("v").rsplit(".", 1)[0]
    return wanted if wanted in vlc.get_vegalite_versions() else None


def save(chart: alt.TopLevelMixin, path: str | Path, *, scale: float = 2.0) -> Path:
    """Write a chart by the suffix of ``path``: ``.html``, ``.png``, ``.svg`` or ``.json``.

    Everything happens offline: vl-convert renders PNG and SVG without a browser,
    and the HTML inlines the Vega, Vega-Lite and vega-embed libraries, so it opens
    with no network. The HTML is a page like the report's (:func:`html_page`): the
    chart is fitted to the window's width when it opens, its panels one under another
    on a phone.

    Parameters
    ----------
    chart : altair.TopLevelMixin
        Any Altair chart.
    path : str or pathlib.Path
        The file to write; its parent folders are created.
    scale : float, default 2.0
        Multiplies the PNG resolution.

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    RegimesInputError
        For another suffix, or when the file cannot be written.

    Examples
    --------
    >>> import tempfile, pathlib, regimes
    >>> trials = regimes.simulate_sweep(1, trials=3, seed=0).trials
    >>> chart = regimes.plot.latency_chart(regimes.detect_regimes(trials, n_boot=200))
    >>> out = regimes.plot.save(chart, pathlib.Path(tempfile.mkdtemp()) / "latency.svg")
    >>> out.read_text().lstrip().startswith("<svg")
    True
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in _WRITERS:
        raise RegimesInputError(
            f"cannot save a chart as {target.name!r}: use one of {sorted(_WRITERS)}"
        )
    payload = _render(chart.to_dict(), suffix, scale)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(payload, bytes):
            target.write_bytes(payload)
        else:
            target.write_text(payload, encoding="utf-8")
    except OSError as exc:
        raise RegimesInputError(f"cannot write {str(target)!r}: {exc.strerror}") from None
    return target


def static_spec(spec: Any) -> Any:
    """Return ``spec`` for a picture: without the zoom hint, since a PNG cannot be dragged.

    Examples
    --------
    >>> static_spec({"vconcat": [{"title": {"text": ZOOM_HINT}, "mark": "line"}]})
    {'vconcat': [{'mark': 'line'}]}
    """
    if isinstance(spec, dict):
        return {
            key: static_spec(value)
            for key, value in spec.items()
            if not (key == "title" and isinstance(value, dict) and value.get("text") == ZOOM_HINT)
        }
    if isinstance(spec, list):
        return [static_spec(value) for value in spec]
    return spec


def static_svg(spec: dict) -> str:
    """Render a chart's spec as an SVG picture (offline, without the zoom hint)."""
    import vl_convert as vlc

    return str(vlc.vegalite_to_svg(static_spec(spec), vl_version=vegalite_version()))


def _render(spec: dict, suffix: str, scale: float) -> bytes | str:
    import vl_convert as vlc

    version = vegalite_version()
    if suffix == ".png":
        return bytes(vlc.vegalite_to_png(static_spec(spec), vl_version=version, scale=scale))
    if suffix == ".svg":
        return static_svg(spec)
    if suffix == ".html":
        return html_page(_title(spec), [_page.figure("chart")], {"chart-chart": spec})
    return json.dumps(spec, indent=1)


def html_page(title: str, body: Sequence[str], specs: dict[str, Any]) -> str:
    """Return one self-contained HTML page: ``body``, then each chart drawn into its figure.

    ``specs`` maps the id of each figure's chart (``chart-<key>``, see
    :func:`regimes.viz._page.figure`) to its Vega-Lite spec. The page inlines the
    Vega, Vega-Lite and vega-embed libraries and names the viewport, and its loader
    fits every chart to the width of its column before drawing it, so that a
    two-panel chart stacks its panels on a phone instead of shrinking them.
    """
    import vl_convert as vlc

    bundle = vlc.javascript_bundle(vl_version=vegalite_version())  # type: ignore[call-arg]
    return _page.PAGE.format(
        title=_page.escape(title),
        style=_page.STYLE,
        bundle=_page.script_safe(bundle),
        body="\n".join(body),
        specs=_page.json_script_safe(json.dumps(specs, separators=(",", ":"), allow_nan=False)),
        loader=_page.LOADER,
    )


def _title(spec: dict) -> str:
    """Return a chart's page title: its own title, else its description."""
    title = spec.get("title")
    text = title.get("text") if isinstance(title, dict) else title
    if isinstance(text, list):
        text = " ".join(map(str, text))
    return str(text or spec.get("description") or "regimes chart")


_RENDERER = "regimes"


def _vegalite_and_png(spec: dict, **metadata: object) -> dict[str, object]:
    """Return a notebook output of both kinds: the interactive spec and a PNG copy."""
    import base64

    import vl_convert as vlc

    major = alt.SCHEMA_VERSION.lstrip("v").split(".", 1)[0]
    # the PNG stands in where the chart cannot be dragged (GitHub's preview)
    png = vlc.vegalite_to_png(static_spec(spec), vl_version=vegalite_version(), scale=1.0)
    return {
        f"application/vnd.vegalite.v{major}+json": spec,
        "image/png": base64.b64encode(png).decode("ascii"),
        "text/plain": f"<{spec.get('description', 'a regimes chart')}>",
    }


def enable_notebook() -> None:
    """Show charts in notebooks as Vega-Lite, with a PNG copy for viewers without it.

    Jupyter and VS Code draw the interactive chart (tooltips, brush, group menu); a
    viewer that cannot run Vega-Lite, such as GitHub's notebook preview, shows the
    PNG. The PNG is rendered offline by vl-convert when the chart is displayed.

    Examples
    --------
    >>> import altair as alt, regimes
    >>> regimes.plot.enable_notebook()
    >>> alt.renderers.active
    'regimes'
    >>> _ = alt.renderers.enable("default")
    """
    if _RENDERER not in alt.renderers.names():
        alt.renderers.register(_RENDERER, _vegalite_and_png)
    alt.renderers.enable(_RENDERER)
