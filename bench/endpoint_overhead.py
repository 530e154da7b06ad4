"""Measure what the endpoint client adds to a streamed generation over a bare request loop.

Two arms send the same streamed completion request to the same server, interleaved
(the arm that goes first alternates from pair to pair, so drift hits both equally):

* ``bare``: ``httpx.Client.stream`` and ``iter_lines`` until ``data: [DONE]``, timed
  with ``perf_counter`` around the request: the least a client can do.
* ``client``: :meth:`collectors.endpoint._client.EndpointClient.generate`, its reported
  ``latency_s`` (server-sent events parsed, each chunk decoded and time-stamped, the
  usage read).

The server is, by default, a stand-in started in a subprocess that streams
``budget`` one-token events as fast as it can (so the client's cost is as large a
share of the latency as it can ever be); ``--url`` and ``--model`` point both arms at a
real server instead. For each budget the table shows the median latency of each arm,
the median of the per-pair ratios (client / bare) with its interquartile range, and the
client's extra time per token. ``--json`` writes the rows and their provenance. Run::

    python bench/endpoint_overhead.py --json bench/results/endpoint_overhead.json
    python bench/endpoint_overhead.py --url http://127.0.0.1:8000/v1 --model NAME
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from time import perf_counter

import httpx

from collectors.endpoint._client import EndpointClient
from collectors.endpoint._config import Endpoint


def _app():  # the stand-in server: one event per token, no delay
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    async def completions(request: Request):
        body = await request.json()
        n = int(body["max_tokens"])
        usage = {"prompt_tokens": 4, "completion_tokens": n, "total_tokens": 4 + n}
        event = 'data: {"choices":[{"index":0,"text":" a"}]}\n\n'

        async def events():
            for _ in range(n):
                yield event
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def models(request: Request):
        return JSONResponse({"object": "list", "data": [{"id": "stand-in"}]})

    return Starlette(
        routes=[
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/models", models),
        ]
    )


def _serve(port: int) -> None:
    import uvicorn

    uvicorn.run(_app(), host="127.0.0.1", port=port, log_level="error")


def _start_stand_in() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    url = f"http://127.0.0.1:{port}/v1"
    for _ in range(200):
        try:
            httpx.get(f"{url}/models", timeout=1)
            return process, url
        except httpx.TransportError:
            time.sleep(0.05)
    process.kill()
    raise SystemExit("the stand-in server did not start")


def _bare(http: httpx.Client, path: str, body: dict) -> float:
    start = perf_counter()
    with http.stream("POST", path, json=body) as response:
        for line in response.iter_lines():
            if line == "data: [DONE]":
                break
    return perf_counter() - start


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def measure(url: str, model: str, budgets: list[int], pairs: int) -> list[dict]:
    """Pair the two arms ``pairs`` times at each budget; return one row per budget."""
    endpoint = Endpoint.from_table({"url": url, "model": model, "ignore_eos": False})
    rows = []
    with EndpointClient(endpoint) as client, httpx.Client(base_url=endpoint.origin) as http:
        path = endpoint.path("completions")
        for budget in budgets:
            body = client.body("the of and to", budget)
            arms = {
                "bare": lambda body=body: _bare(http, path, body),
                "client": lambda n=budget: client.generate("the of and to", n).latency_s,
            }
            for arm in arms.values():  # warm both connections
                arm()
            times: dict[str, list[float]] = {"bare": [], "client": []}
            for k in range(pairs):
                for name in ("bare", "client") if k % 2 == 0 else ("client", "bare"):
                    times[name].append(arms[name]())
            ratios = [c / b for c, b in zip(times["client"], times["bare"], strict=True)]
            low, ratio, high = _quartiles(ratios)
            extra = statistics.median(times["client"]) - statistics.median(times["bare"])
            rows.append(
                {
                    "budget": budget,
                    "bare_s": statistics.median(times["bare"]),
                    "client_s": statistics.median(times["client"]),
                    "ratio": ratio,
                    "ratio_q1": low,
                    "ratio_q3": high,
                    "extra_us_per_token": 1e6 * extra / budget,
                    "pairs": pairs,
                }
            )
    return rows


def main() -> None:
    """Run the benchmark from the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=None, help="a real server's base URL (default: stand-in)")
    parser.add_argument("--model", default="stand-in")
    parser.add_argument("--budgets", type=int, nargs="+", default=[16, 128, 512])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None, help="write the rows here")
    parser.add_argument("--serve", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        _serve(args.serve)
        return
    process, url = (None, args.url) if args.url else _start_stand_in()
    started = time.monotonic()
    try:
        rows = measure(url, args.model, args.budgets, args.pairs)
    finally:
        if process is not None:
            process.terminate()
            process.wait()
    print(f"{'budget':>7} {'bare s':>10} {'client s':>10} {'ratio':>7} {'IQR':>15} {'us/token':>9}")
    for r in rows:
        print(
            f"{r['budget']:>7} {r['bare_s']:>10.5f} {r['client_s']:>10.5f} {r['ratio']:>7.3f} "
            f"[{r['ratio_q1']:.3f}, {r['ratio_q3']:.3f}] {r['extra_us_per_token']:>9.1f}"
        )
    if args.json is not None:
        meta = {
            "server": "stand-in (bench/endpoint_overhead.py, one event per token, no delay)"
            if args.url is None
            else args.url,
            "model": args.model,
            "machine": platform.platform(),
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "httpx": version("httpx"),
            "httpx-sse": version("httpx-sse"),
            "command": " ".join(["python", *sys.argv]),
            "seconds": round(time.monotonic() - started, 1),
        }
        args.json.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
