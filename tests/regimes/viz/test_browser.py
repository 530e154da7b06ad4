"""The HTML report, opened in a real headless Chromium with the network off.

Chromium is driven over the DevTools protocol through ``--remote-debugging-pipe``
(commands on fd 3, events and replies on fd 4, NUL-separated JSON), which needs no
driver binary and no Python package. The page is loaded from a file:// URL with every
host unresolvable and a dead proxy, and the test asserts that each chart drew marks,
that the console and the page report no error, and that no request left the file.
Chromium comes from Debian's ``chromium`` package, installed by the fixture when
missing; a failed install fails the test.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
RENDER_TIMEOUT_S = 90.0


def _install_chromium() -> str:
    if Path(CHROMIUM).exists():
        return CHROMIUM
    if shutil.which("apt-get") is None:
        pytest.fail("chromium is missing and apt-get is not available to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
        if done.returncode != 0:
            pytest.fail(
                f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )
    if not Path(CHROMIUM).exists():
        pytest.fail(f"apt-get installed chromium but {CHROMIUM} does not exist")
    return CHROMIUM


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
  return {key: el.dataset.chart, rendered: el.dataset.rendered || null,
          svgs: el.querySelectorAll('svg').length,
          marks: el.querySelectorAll('svg .role-mark > path, svg .role-mark > rect, '
                                     + 'svg .role-mark > line, svg .role-mark > text').length,
          x: box.left + window.scrollX, y: box.top + window.scrollY,
          width: box.width, height: box.height};
})
"""


def open_report(binary: str, page: Path, profile: Path, screenshot_dir: Path) -> dict[str, Any]:
    """Load ``page``, wait until every chart settled, and return what the page showed."""
    tools = DevTools(binary, profile)
    try:
        started = time.monotonic()
        target = next(
            t for t in tools.send("Target.getTargets")["targetInfos"] if t["type"] == "page"
        )
        session = tools.send(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            tools.send(f"{domain}.enable", session=session)
        tools.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1600, "height": 1200, "deviceScaleFactor": 1, "mobile": False},
            session,
        )
        tools.send("Page.navigate", {"url": page.resolve().as_uri()}, session)
        deadline = time.monotonic() + RENDER_TIMEOUT_S
        while tools.evaluate(session, "document.body && document.body.dataset.charts") != "done":
            if time.monotonic() > deadline:
                pytest.fail(f"charts did not finish rendering within {RENDER_TIMEOUT_S} s")
            time.sleep(0.1)
        render_s = time.monotonic() - started
        charts = tools.evaluate(session, _CHART_STATE)
        shots = {}
        for chart in charts:
            clip = {k: chart[k] for k in ("x", "y", "width", "height")} | {"scale": 1}
            shot = tools.send(
                "Page.captureScreenshot",
                {"format": "png", "clip": clip, "captureBeyondViewport": True},
                session,
            )
            shots[chart["key"]] = screenshot_dir / f"browser-{chart['key']}.png"
            shots[chart["key"]].write_bytes(base64.b64decode(shot["data"]))
        # Events that arrived while the page rendered are in tools.events by now; one
        # more round trip flushes any still in flight.
        tools.evaluate(session, "1")
        return {
            "charts": charts,
            "events": list(tools.events),
            "screenshots": shots,
            "render_s": render_s,
        }
    finally:
        tools.close()


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
    return _install_chromium()


@pytest.fixture(scope="module")
def report_page(synthetic_run, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    from regimes.viz.html import build_report

    report = build_report(synthetic_run.write(tmp_path_factory.mktemp("run") / "run"), n_boot=200)
    page = report.write(tmp_path_factory.mktemp("report") / "report.html")
    return page, [s.key for s in report.charts]


def test_report_renders_every_chart_offline(chromium, report_page, tmp_path):
    page, expected = report_page
    seen = open_report(chromium, page, tmp_path / "profile", tmp_path)
    charts = {c["key"]: c for c in seen["charts"]}
    assert sorted(charts) == sorted(expected)
    assert {"latency", "heatmap", "speedup", "phases"} <= set(charts)
    for key, chart in charts.items():
        assert chart["rendered"] == "ok", f"chart {key} did not render: {chart}"
        assert chart["svgs"] >= 1, f"chart {key} has no svg"
        assert chart["marks"] >= 20, f"chart {key} drew only {chart['marks']} marks"
        assert chart["width"] > 200 and chart["height"] > 100, f"chart {key} is tiny: {chart}"
    assert _problems(seen["events"]) == []
    assert _network_requests(seen["events"]) == []
    for key, shot in seen["screenshots"].items():
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000, f"empty screenshot {key}"
    print(f"rendered {len(charts)} charts in {seen['render_s']:.2f} s; screenshots in {tmp_path}")


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
