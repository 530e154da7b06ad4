"""The HTML report, opened in a real headless Chromium with the network off.

Chromium is driven over the DevTools protocol through ``--remote-debugging-pipe``
(commands on fd 3, events and replies on fd 4, NUL-separated JSON), which needs no
driver binary and no Python package. The page is loaded from a file:// URL with every
host unresolvable and a dead proxy, at a laptop width (1366 px) and a phone width
(390 px); the tests assert that each chart drew marks, that the console and the page
report no error, that no request left the file, that the page fits the phone's width,
and that the overview brush and the group menu work. Full-page screenshots are kept
(their folder is printed; set REGIMES_SCREENSHOTS to choose it).
Installing the browser is not the tests' business: ``.ci/run`` installs Debian's
``chromium`` package. Without a browser the tests skip, saying why, except in CI
(``REGIMES_CI`` set, as ``.ci/run`` does), where they fail.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
"""Names a Chromium is found under on PATH; ``REGIMES_CHROMIUM`` may name a binary instead."""
RENDER_TIMEOUT_S = 90.0
LAPTOP = (1366, 800)
PHONE = (390, 844)


def find_browser() -> str | None:
    """The Chromium binary to drive, or None when there is none."""
    named = os.environ.get("REGIMES_CHROMIUM")
    if named:
        return shutil.which(named)
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def require_browser() -> str:
    """The Chromium binary; without one, skip, or fail in CI (``REGIMES_CI`` set)."""
    binary = find_browser()
    if binary is not None:
        return binary
    reason = (
        f"no Chromium to drive: none of {', '.join(BROWSERS)} is on PATH and "
        "REGIMES_CHROMIUM does not name one"
    )
    if os.environ.get("REGIMES_CI"):
        pytest.fail(f"{reason} (.ci/run installs Debian's chromium package)", pytrace=False)
    pytest.skip(f"{reason}; install Chromium to run the browser tests")


def _above_stdio(fd: int) -> int:
    """A close-on-exec duplicate of ``fd`` numbered 10 or more; ``fd`` is closed."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class DevTools:
    """A minimal DevTools-protocol client over Chromium's debugging pipe."""

    def __init__(self, binary: str, profile: Path):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child's ends move above fd 10 first: were one of them fd 3 or 4 already,
        # dup2 onto itself would keep its close-on-exec flag and Chromium would lose it.
        to_browser_r, from_browser_w = (_above_stdio(to_browser_r), _above_stdio(from_browser_w))

        def wire_fds() -> None:  # runs in the child before exec: fd 3 in, fd 4 out
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        flags = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            # Network off: no proxy answers and no host name resolves.
            "--proxy-server=127.0.0.1:9",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "about:blank",
        ]
        self.process = subprocess.Popen(  # noqa: S603 - fixed binary and flags
            [binary, *flags],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            close_fds=False,
            preexec_fn=wire_fds,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._from_browser, 1 << 16):
            buffer += chunk
            *whole, buffer = buffer.split(b"\0")
            for raw in whole:
                self._messages.put(json.loads(raw))
        self._messages.put(None)

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        timeout: float = 30.0,
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while self._next_id not in self._replies:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no reply to {method} within {timeout} s")
            try:
                incoming = self._messages.get(timeout=remaining)
            except queue.Empty:
                continue
            if incoming is None:
                stderr = self.process.stderr.read().decode(errors="replace")[-3000:]
                raise RuntimeError(f"chromium closed the pipe during {method}:\n{stderr}")
            if "id" in incoming:
                self._replies[incoming["id"]] = incoming
            else:
                self.events.append(incoming)
        reply = self._replies.pop(self._next_id)
        if "error" in reply:
            raise RuntimeError(f"{method} failed: {reply['error']}")
        return reply.get("result", {})

    def evaluate(self, session: str, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)


_CHART_STATE = """
Array.from(document.querySelectorAll('.chart')).map(function (el) {
  var box = el.getBoundingClientRect();
  var svg = el.querySelector('svg.marks');
  return {key: el.dataset.chart, rendered: el.dataset.rendered || null,
          svgs: el.querySelectorAll('svg').length,
          marks: el.querySelectorAll('svg .role-mark > path, svg .role-mark > rect, '
                                     + 'svg .role-mark > line, svg .role-mark > text').length,
          svg_width: svg ? svg.getBoundingClientRect().width : 0,
          columns: (function () {
            // Panels in one column sit one under another: as many rows as panels.
            var cells = el.querySelectorAll('svg .role-scope.concat_0_cell > g');
            var tops = new Set(Array.from(cells).map(function (c) {
              return Math.round(c.getBoundingClientRect().top); }));
            return tops.size ? Math.ceil(cells.length / tops.size) : 0;
          })(),
          x: box.left + window.scrollX, y: box.top + window.scrollY,
          width: box.width, height: box.height};
})
"""


def navigate(tools: DevTools, page: Path, size: tuple[int, int]) -> str:
    """Attach to the browser's page, set its viewport to ``size`` and load ``page``.

    Returns the session id; the runtime, log, network and page events are on.
    """
    target = next(t for t in tools.send("Target.getTargets")["targetInfos"] if t["type"] == "page")
    session: str = tools.send(
        "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
    )["sessionId"]
    for domain in ("Runtime", "Log", "Network", "Page"):
        tools.send(f"{domain}.enable", session=session)
    width, height = size
    tools.send(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
        session,
    )
    tools.send("Page.navigate", {"url": page.resolve().as_uri()}, session)
    return session


def open_report(
    binary: str,
    page: Path,
    profile: Path,
    screenshot_dir: Path,
    size: tuple[int, int] = LAPTOP,
    interact: Any = None,
) -> dict[str, Any]:
    """Load ``page`` at ``size``, wait until every chart settled, and report what it showed.

    ``interact(tools, session)``, when given, runs after the charts have drawn and its
    return value comes back under ``"interaction"``.
    """
    tools = DevTools(binary, profile)
    try:
        started = time.monotonic()
        session = navigate(tools, page, size)
        width = size[0]
        deadline = time.monotonic() + RENDER_TIMEOUT_S
        while tools.evaluate(session, "document.body && document.body.dataset.charts") != "done":
            if time.monotonic() > deadline:
                pytest.fail(f"charts did not finish rendering within {RENDER_TIMEOUT_S} s")
            time.sleep(0.1)
        render_s = time.monotonic() - started
        charts = tools.evaluate(session, _CHART_STATE)
        layout = tools.evaluate(session, _LAYOUT)
        shot = screenshot_dir / f"report-{width}px.png"
        full = {"x": 0, "y": 0, "width": width, "height": layout["height"], "scale": 1}
        image = tools.send(
            "Page.captureScreenshot",
            {"format": "png", "clip": full, "captureBeyondViewport": True},
            session,
        )
        shot.write_bytes(base64.b64decode(image["data"]))
        interaction = interact(tools, session) if interact else None
        # Events that arrived while the page rendered are in tools.events by now; one
        # more round trip flushes any still in flight.
        tools.evaluate(session, "1")
        return {
            "charts": charts,
            "layout": layout,
            "events": list(tools.events),
            "screenshot": shot,
            "render_s": render_s,
            "interaction": interaction,
        }
    finally:
        tools.close()


_LAYOUT = """
({width: document.documentElement.clientWidth,
  scrollWidth: document.documentElement.scrollWidth,
  height: document.documentElement.scrollHeight,
  content: document.querySelector('#findings').getBoundingClientRect().width})
"""


def _problems(events: list[dict[str, Any]]) -> list[str]:
    problems = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            problems.append("console." + params["type"] + ": " + json.dumps(params.get("args")))
        elif method == "Runtime.exceptionThrown":
            problems.append("exception: " + json.dumps(params.get("exceptionDetails")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            problems.append("log: " + params["entry"].get("text", ""))
    return problems


def _network_requests(events: list[dict[str, Any]]) -> list[str]:
    urls = [
        e["params"]["request"]["url"]
        for e in events
        if e.get("method") == "Network.requestWillBeSent"
    ]
    return [u for u in urls if not u.startswith(("file:", "data:", "blob:", "about:"))]


@pytest.fixture(scope="module")
def chromium() -> str:
    return require_browser()


@pytest.fixture(scope="module")
def report_page(synthetic_run, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    from regimes.analysis import analyze
    from regimes.viz.html import build_report

    run = synthetic_run.write(tmp_path_factory.mktemp("run") / "run")
    report = build_report(analyze(run, n_boot=200))
    page = report.write(tmp_path_factory.mktemp("report") / "report.html")
    return page, [key for key, _ in report.figures()]


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = os.environ.get("REGIMES_SCREENSHOTS")
    folder = Path(chosen) if chosen else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _assert_drawn(seen: dict[str, Any], expected: list[str]) -> None:
    charts = {c["key"]: c for c in seen["charts"]}
    assert sorted(charts) == sorted(expected)
    for key, chart in charts.items():
        assert chart["rendered"] == "ok", f"chart {key} did not render: {chart}"
        assert chart["svgs"] >= 1, f"chart {key} has no svg"
        # An explanation's interval plot draws a few marks per anomaly; the rest, dozens.
        least = 8 if key.startswith("explain-") else 20
        assert chart["marks"] >= least, f"chart {key} drew only {chart['marks']} marks"
        assert chart["width"] > 200 and chart["height"] > 100, f"chart {key} is tiny: {chart}"
    assert _problems(seen["events"]) == []
    assert _network_requests(seen["events"]) == []
    data = seen["screenshot"].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000, "empty screenshot"


def test_report_renders_every_chart_offline_on_a_laptop(
    chromium, report_page, tmp_path, screenshots
):
    page, expected = report_page
    seen = open_report(chromium, page, tmp_path / "profile", screenshots, LAPTOP)
    _assert_drawn(seen, expected)
    assert {"latency", "heatmap", "speedup", "phases"} <= {c["key"] for c in seen["charts"]}
    content = seen["layout"]["content"]
    wide = {c["key"]: c["svg_width"] for c in seen["charts"]}
    for key in ("latency", "heatmap", "speedup", "phases"):
        assert wide[key] >= 0.85 * content, f"chart {key} is {wide[key]} px of {content}"
    print(f"rendered {len(wide)} charts in {seen['render_s']:.2f} s; {seen['screenshot']}")


def test_report_fits_a_phone(chromium, report_page, tmp_path, screenshots):
    page, expected = report_page
    seen = open_report(chromium, page, tmp_path / "profile", screenshots, PHONE)
    _assert_drawn(seen, expected)
    layout = seen["layout"]
    assert layout["scrollWidth"] <= layout["width"], f"the page scrolls sideways: {layout}"
    for chart in seen["charts"]:
        assert chart["svg_width"] <= layout["width"], f"{chart['key']} overflows: {chart}"
    latency = next(c for c in seen["charts"] if c["key"] == "latency")
    assert latency["columns"] == 1  # small multiples one under another
    print(f"phone screenshot: {seen['screenshot']}")


_X_LABELS = """
(function () {
  var svg = document.querySelector('#chart-latency svg.marks');
  return Array.from(svg.querySelectorAll('.role-axis-label')).map(function (g) {
    return Array.from(g.querySelectorAll('text')).map(function (t) { return t.textContent; });
  });
})()
"""

_STRIP = """
(function () {
  // The overview strip's plot area: the background of the group its brush lives in.
  var brush = document.querySelector('#chart-latency svg .zoom_x_brush_bg');
  var area = brush.parentNode.parentNode.querySelector(':scope > path.background');
  area.scrollIntoView({block: 'center'});
  var box = area.getBoundingClientRect();
  return {x: box.left, y: box.top, width: box.width, height: box.height};
})()
"""

_PANELS = """
document.querySelectorAll('#chart-latency svg .role-scope.concat_0_cell > g').length
"""


def _drag_across_the_strip(tools: DevTools, session: str) -> dict[str, Any]:
    before = tools.evaluate(session, _X_LABELS)
    strip = tools.evaluate(session, _STRIP)
    y = strip["y"] + strip["height"] / 2
    start, end = strip["x"] + 0.45 * strip["width"], strip["x"] + 0.6 * strip["width"]
    for kind, x in (
        ("mouseMoved", start),
        ("mousePressed", start),
        ("mouseMoved", (start + end) / 2),
        ("mouseMoved", end),
        ("mouseReleased", end),
    ):
        held = 0 if kind == "mouseReleased" else 1
        tools.send(
            "Input.dispatchMouseEvent",
            {"type": kind, "x": x, "y": y, "button": "left", "buttons": held, "clickCount": 1},
            session,
        )
    time.sleep(0.5)
    after = tools.evaluate(session, _X_LABELS)
    panels_before = tools.evaluate(session, _PANELS)
    pick = """
    (function () {
      var menu = document.querySelector('#chart-latency select');
      menu.value = menu.options[2].value;
      menu.dispatchEvent(new Event('change'));
      menu.dispatchEvent(new Event('input'));
      return menu.value;
    })()
    """
    picked = tools.evaluate(session, pick)
    time.sleep(0.5)
    return {
        "before": before,
        "after": after,
        "panels_before": panels_before,
        "panels_after": tools.evaluate(session, _PANELS),
        "picked": picked,
    }


def _numbers(labels: list[str]) -> list[float]:
    return [float(t.replace(",", "").replace("\u2212", "-")) for t in labels if t]


def test_brush_zooms_the_panels_and_the_menu_picks_a_group(chromium, report_page, tmp_path):
    page, _ = report_page
    seen = open_report(
        chromium, page, tmp_path / "profile", tmp_path, LAPTOP, interact=_drag_across_the_strip
    )
    moved = seen["interaction"]
    # The first panel's x axis: before the drag it starts at the grid's first budget.
    # The grid runs 16..256 and no panel's latency reaches 200 s.
    first_x = next(
        i for i, labels in enumerate(moved["before"]) if labels and max(_numbers(labels)) >= 200
    )
    before, after = _numbers(moved["before"][first_x]), _numbers(moved["after"][first_x])
    assert min(after) > min(before) and max(after) < max(before), (before, after)
    assert moved["panels_before"] == 4 and moved["panels_after"] == 1, moved
    assert _problems(seen["events"]) == []


def test_broken_chart_is_caught(chromium, report_page, tmp_path):
    """The checks above can fail: a chart that cannot render leaves a console error."""
    page, _ = report_page
    text = page.read_text(encoding="utf-8")
    specs_at = text.index('id="regimes-specs"')
    broken = text[:specs_at] + text[specs_at:].replace(
        '"mark":{"type":"rect"', '"mark":{"type":"no-such-mark"', 1
    )
    assert broken != text
    (tmp_path / "broken.html").write_text(broken, encoding="utf-8")
    seen = open_report(chromium, tmp_path / "broken.html", tmp_path / "profile", tmp_path)
    states = {c["key"]: c["rendered"] for c in seen["charts"]}
    assert "error" in states.values()
    assert any("failed" in p for p in _problems(seen["events"]))


def test_missing_browser_skips_outside_ci_and_fails_in_ci(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("REGIMES_CHROMIUM", raising=False)
    monkeypatch.delenv("REGIMES_CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Chromium to drive"):
        require_browser()
    monkeypatch.setenv("REGIMES_CI", "1")
    with pytest.raises(pytest.fail.Exception, match="no Chromium to drive"):
        require_browser()


def test_regimes_chromium_names_the_binary(monkeypatch, tmp_path):
    binary = tmp_path / "my-chromium"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("REGIMES_CHROMIUM", str(binary))
    assert require_browser() == str(binary)


def test_labels_holding_markup_still_render_every_chart(chromium, tmp_path, screenshots):
    import polars as pl

    from regimes.analysis import analyze
    from regimes.data.simulate import simulate_sweep
    from regimes.viz.html import build_report

    label = 'gpt2 <!-- </script><script>alert(1)</script> & "q"'
    trials = simulate_sweep(1, n_budgets=8, trials=3, seed=2).trials.drop("source")
    trials = trials.with_columns(pl.lit(label).alias("model"), pl.lit(label).alias("device"))
    report = build_report(analyze(trials, n_boot=100), title=label)
    page = report.write(tmp_path / "report.html")
    seen = open_report(chromium, page, tmp_path / "profile", screenshots, LAPTOP)
    _assert_drawn(seen, [key for key, _ in report.figures()])


# --------------------------------------------------------------------------- chart details

_DETAILS = """
(function () {
  function visible(node) {
    var op = node.getAttribute('opacity'), sop = node.getAttribute('stroke-opacity');
    return !(op !== null && +op === 0) && !(sop !== null && +sop === 0);
  }
  return Array.from(document.querySelectorAll('.chart')).map(function (el) {
    var key = el.dataset.chart, svg = el.querySelector('svg.marks');
    // Facet headers: title texts of the panels (the chart's own title has a subtitle).
    var heads = Array.from(svg.querySelectorAll('.role-title-text')).map(function (t) {
      var b = t.getBoundingClientRect();
      return {text: t.textContent, top: b.top, bottom: b.bottom};
    });
    // Horizontal gridlines of each panel that are drawn, by their y.
    var grids = Array.from(svg.querySelectorAll('.role-axis-grid')).map(function (g) {
      return Array.from(g.querySelectorAll('line')).filter(function (l) {
        return +(l.getAttribute('x2') || 0) !== 0 && visible(l);
      }).map(function (l) { return l.getBoundingClientRect().top; });
    }).filter(function (ys) { return ys.length; });
    var xLabels = Array.from(svg.querySelectorAll('.role-axis-label')).map(function (g) {
      return Array.from(g.querySelectorAll('text')).map(function (t) { return t.textContent; });
    });
    var rects = Array.from(svg.querySelectorAll('.role-mark path, .role-mark rect'))
      .filter(function (p) { return (p.getAttribute('fill') || '').toLowerCase() === '#cc79a7'; })
      .map(function (p) { return p.getBoundingClientRect().height; });
    // Every interval label, and whether a change-point rule crossing it is drawn over it.
    var rules = Array.from(svg.querySelectorAll('.role-mark line')).filter(function (l) {
      return (l.getAttribute('stroke') || '').toLowerCase() === '#e69f00';
    });
    var labels = Array.from(svg.querySelectorAll('.role-mark text')).filter(function (t) {
      return t.textContent.indexOf('\\u00d7') === 0 && (t.getAttribute('fill') || '') !== '#ffffff';
    }).map(function (t) {
      t.scrollIntoView({block: 'center'});
      var b = t.getBoundingClientRect(), crossings = [];
      rules.forEach(function (r) {
        var rb = r.getBoundingClientRect(), x = rb.left + rb.width / 2;
        if (x > b.left + 1 && x < b.right - 1 && rb.top <= b.top && rb.bottom >= b.bottom) {
          var top = document.elementFromPoint(x, b.top + b.height / 2);
          crossings.push(top ? top.tagName.toLowerCase() : null);
        }
      });
      return {text: t.textContent, crossings: crossings};
    });
    // The overview strip: the panel that holds the brush.
    var brush = svg.querySelector('.zoom_x_brush_bg');
    var strip = brush ? brush.closest('g.mark-group') : null;
    var strokes = strip ? Array.from(strip.querySelectorAll('.mark-line path')).map(
      function (p) { return (p.getAttribute('stroke') || '').toLowerCase(); }) : [];
    var legends = Array.from(svg.querySelectorAll('.role-legend-label')).map(function (t) {
      return t.textContent;
    });
    return {key: key, heads: heads, grids: grids, x_labels: xLabels, prefill: rects,
            labels: labels, strip_strokes: strokes, legends: legends};
  });
})()
"""


@pytest.fixture(scope="module")
def instrumented_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of the committed instrumented H200 run: prefill ~10 ms, decode seconds."""
    from regimes.analysis import analyze
    from regimes.viz.html import build_report

    run = Path(__file__).resolve().parents[3] / "examples" / "data" / "cuda-h200-instrumented"
    report = build_report(analyze(run, n_boot=200))
    return report.write(tmp_path_factory.mktemp("instrumented") / "report.html")


def _details(chromium: str, page: Path, profile: Path, size: tuple[int, int]) -> dict[str, Any]:
    seen = open_report(
        chromium,
        page,
        profile,
        profile.parent,
        size,
        interact=lambda tools, session: tools.evaluate(session, _DETAILS),
    )
    assert _problems(seen["events"]) == []
    return {chart["key"]: chart for chart in seen["interaction"]}


def _rows(heads: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Headers side by side: within 20 px of each other's top."""
    rows: list[list[dict[str, Any]]] = []
    for head in sorted(heads, key=lambda h: h["top"]):
        if rows and abs(head["top"] - rows[-1][0]["top"]) < 20:
            rows[-1].append(head)
        else:
            rows.append([head])
    return rows


@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1366px", "390px"])
def test_panel_headers_gridlines_and_labels_read_cleanly(
    chromium, report_page, instrumented_page, tmp_path, size
):
    """Headers of a row at one height; log axes without stripes; labels over the rules."""
    for name, page in (("synthetic", report_page[0]), ("instrumented", instrumented_page)):
        charts = _details(chromium, page, tmp_path / f"profile-{name}", size)
        for key in ("latency", "phases", "speedup"):
            for row in _rows(charts[key]["heads"]):
                bottoms = [round(h["bottom"], 1) for h in row]
                # within a pixel: the stroke of a tick at a panel's top edge
                assert max(bottoms) - min(bottoms) <= 1.0, (name, key, size, row)
            for ys in charts[key]["grids"]:
                gaps = [b - a for a, b in zip(sorted(ys), sorted(ys)[1:], strict=False)]
                assert not gaps or min(gaps) >= 6, (name, key, size, sorted(ys))
        for key, chart in charts.items():  # no axis reads 40 as "4e+1"
            exponents = [t for axis in chart["x_labels"] for t in axis if re.search(r"e[+-]", t)]
            assert not exponents, (name, key, size, exponents)
        crossings = [c for label in charts["latency"]["labels"] for c in label["crossings"]]
        assert all(c == "text" for c in crossings), (name, size, charts["latency"]["labels"])
        if name == "synthetic" and size == PHONE:
            assert crossings, "the narrow panel's label crosses no rule: nothing was checked"


@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1366px", "390px"])
def test_phase_bars_show_the_prefill_on_the_budgets_and_the_strip_names_its_groups(
    chromium, instrumented_page, tmp_path, size
):
    charts = _details(chromium, instrumented_page, tmp_path / "profile", size)
    phases = charts["phases"]
    assert len(phases["prefill"]) == 16 and min(phases["prefill"]) >= 3, phases["prefill"]
    budgets = {str(b) for b in range(64, 513, 64)}
    # The panels' x axes start at the first budget; the overview strip's at a round one.
    panels = [set(labels) for labels in phases["x_labels"] if "64" in labels]
    assert panels and all(labels == budgets for labels in panels), phases["x_labels"]
    latency = charts["latency"]
    assert len(set(latency["strip_strokes"])) == 2, latency["strip_strokes"]
    assert {"cache off", "cache on"} <= set(latency["legends"]), latency["legends"]


_STRIP_TITLE = """
Array.from(document.querySelectorAll('.chart')).filter(function (el) {
  return el.querySelector('svg .zoom_x_brush_bg');
}).map(function (el) {
  // The overview strip: the group its brush lives in, its plot area and its y title.
  var strip = el.querySelector('svg .zoom_x_brush_bg').closest('g.mark-group');
  var area = strip.querySelector('path.background').getBoundingClientRect();
  var titles = Array.from(strip.querySelectorAll('.role-axis-title text')).map(function (t) {
    var b = t.getBoundingClientRect();
    return {text: t.textContent, top: b.top, bottom: b.bottom, tall: b.height > b.width};
  }).filter(function (t) { return t.tall; });
  return {key: el.dataset.chart, top: area.top, bottom: area.bottom, titles: titles};
})
"""


@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1366px", "390px"])
def test_the_strips_value_title_is_no_taller_than_the_strip(
    chromium, instrumented_page, tmp_path, size
):
    seen = open_report(
        chromium,
        instrumented_page,
        tmp_path / "profile",
        tmp_path,
        size,
        interact=lambda tools, session: tools.evaluate(session, _STRIP_TITLE),
    )
    strips = {strip["key"]: strip for strip in seen["interaction"]}
    assert {"latency", "phases", "speedup"} <= set(strips), sorted(strips)
    for key, strip in strips.items():
        (title,) = strip["titles"]
        assert not title["text"].endswith("\u2026"), (key, title)  # not cut short
        # within a pixel: the text's box rounds out
        assert title["top"] >= strip["top"] - 1 and title["bottom"] <= strip["bottom"] + 1, (
            key,
            strip,
        )


# --------------------------------------------------------------------------- text on a phone

_TEXT_FIT = """
(function () {
  // Numbers broken over two lines, and text running past the page's right edge.
  var wrapped = Array.from(document.querySelectorAll('td.num')).filter(function (td) {
    var range = document.createRange();
    range.selectNodeContents(td);
    var tops = new Set(Array.from(range.getClientRects()).map(function (r) {
      return Math.round(r.top); }));
    return tops.size > 1;
  }).map(function (td) { return td.textContent; });
  return {wrapped: wrapped, width: document.documentElement.clientWidth,
          scrollWidth: document.documentElement.scrollWidth};
})()
"""

LONG_NAME = "aten::_scaled_dot_product_flash_attention_for_cpu::backward_of_the_kernel"
"""A name like an operator's: one word wider than a phone's column of text."""


def _text_fit(chromium: str, page: Path, profile: Path, size: tuple[int, int]) -> dict[str, Any]:
    """Open ``page`` at ``size``, wait for its charts if it has any, and measure its text."""
    tools = DevTools(chromium, profile)
    try:
        session = navigate(tools, page, size)
        ready = (
            "document.readyState === 'complete' && (!document.querySelector('.chart')"
            " || document.body.dataset.charts === 'done')"
        )
        deadline = time.monotonic() + RENDER_TIMEOUT_S
        while not tools.evaluate(session, ready):
            if time.monotonic() > deadline:
                pytest.fail(f"{page.name} did not finish rendering within {RENDER_TIMEOUT_S} s")
            time.sleep(0.1)
        fit: dict[str, Any] = tools.evaluate(session, _TEXT_FIT)
        return fit
    finally:
        tools.close()


@pytest.fixture(scope="module")
def long_named_spike():
    """A spike in a model with a name no line can break, and q-values like 9.3e-11."""
    import polars as pl

    import regimes

    trials = regimes.simulate_sweep(1, anomaly="spike", ratio=3.0, trials=4, seed=4).trials
    return trials.with_columns(pl.lit(LONG_NAME).alias("model"))


@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1366px", "390px"])
def test_the_notebook_view_keeps_numbers_whole_and_fits_a_phone(
    chromium, long_named_spike, tmp_path, size
):
    import regimes

    view = regimes.detect_regimes(long_named_spike, n_boot=200)._repr_html_()
    assert LONG_NAME in view
    page = tmp_path / "view.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' "
        "content='width=device-width, initial-scale=1'></head>"
        f"<body>{view}</body></html>",
        encoding="utf-8",
    )
    fit = _text_fit(chromium, page, tmp_path / "profile", size)
    assert fit["wrapped"] == [], f"numbers broken over two lines: {fit['wrapped']}"
    assert fit["scrollWidth"] <= fit["width"], f"the view scrolls sideways: {fit}"


def test_the_report_keeps_numbers_whole_and_fits_a_phone(chromium, long_named_spike, tmp_path):
    from regimes.analysis import analyze
    from regimes.viz.html import build_report

    page = build_report(analyze(long_named_spike, n_boot=200)).write(tmp_path / "report.html")
    fit = _text_fit(chromium, page, tmp_path / "profile", PHONE)
    assert fit["wrapped"] == [], f"numbers broken over two lines: {fit['wrapped']}"
    assert fit["scrollWidth"] <= fit["width"], f"the page scrolls sideways: {fit}"


# --------------------------------------------------------------------------- a saved chart

_DRAWN = """
!!document.querySelector('svg.marks')
  && (!document.querySelector('.chart') || document.body.dataset.charts === 'done')
"""

_PANELS_FIT = """
(function () {
  var svg = document.querySelector('svg.marks');
  var cells = Array.from(svg.querySelectorAll('g.role-scope[class*="cell"] > g'));
  return {lefts: cells.map(function (c) { return Math.round(c.getBoundingClientRect().left); }),
          widths: cells.map(function (c) { return c.getBoundingClientRect().width; }),
          width: document.documentElement.clientWidth,
          scrollWidth: document.documentElement.scrollWidth};
})()
"""


@pytest.fixture(scope="module")
def saved_two_panel_charts(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two-panel charts saved as HTML: the H200 run's latency (cache off, cache on), and
    where two boundaries sit in budget and in total tokens (synthetic, two prompts).
    """
    import polars as pl

    import regimes

    folder = tmp_path_factory.mktemp("saved")
    run = Path(__file__).resolve().parents[3] / "examples" / "data" / "cuda-h200-gpt2"
    latency = regimes.detect_regimes(regimes.load(run), n_boot=200).chart()
    sweep = regimes.simulate_sweep(1, anomaly="spike", width=3, ratio=5.0, trials=3, seed=4)
    prompts = pl.concat(
        [sweep.trials.with_columns(pl.lit(p).alias("prompt_tokens")) for p in (16, 64)]
    )
    alignment = regimes.align_boundaries(prompts, n_boot=200).chart()
    return [
        regimes.plot.save(latency, folder / "latency.html"),
        regimes.plot.save(alignment, folder / "alignment.html"),
    ]


@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1366px", "390px"])
def test_a_saved_two_panel_chart_fills_the_width_and_stacks_on_a_phone(
    chromium, saved_two_panel_charts, tmp_path, size
):
    for page in saved_two_panel_charts:
        tools = DevTools(chromium, tmp_path / f"profile-{page.stem}")
        try:
            session = navigate(tools, page, size)
            deadline = time.monotonic() + RENDER_TIMEOUT_S
            while not tools.evaluate(session, _DRAWN):
                if time.monotonic() > deadline:
                    pytest.fail(f"{page.name} did not draw within {RENDER_TIMEOUT_S} s")
                time.sleep(0.1)
            fit = tools.evaluate(session, _PANELS_FIT)
        finally:
            tools.close()
        assert fit["scrollWidth"] <= fit["width"] == size[0], (page.name, fit)
        assert len(fit["lefts"]) == 2, (page.name, fit)
        columns = len(set(fit["lefts"]))
        assert columns == (1 if size == PHONE else 2), (page.name, fit)
        # each panel takes its share of the width, less room for its axis
        assert min(fit["widths"]) >= 0.55 * fit["width"] / columns, (page.name, fit)
