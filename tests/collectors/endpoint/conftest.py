"""Servers on loopback for the endpoint tests: a scriptable fake and `transformers serve`."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("httpx_sse")
uvicorn = pytest.importorskip("uvicorn")
starlette = pytest.importorskip("starlette")

from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import JSONResponse, Response, StreamingResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Behaviour:
    """What the fake server does; each test sets what it needs."""

    stream: bool = True
    statuses: list[int] = field(default_factory=list)  # answered first, one per request
    stop_at: int | None = None  # stops there unless ignore_eos is honoured
    honour_ignore_eos: bool = True
    refuse: tuple[str, ...] = ()  # fields answered with a 422
    extra_tokens: int = 0  # generates max_tokens + this (ignores max_tokens)
    version: str = "1.0"
    chat_overhead: int = 3
    models_status: int = 200
    tokens_per_event: int = 1
    restart_after: int | None = None  # generations before the version changes (a restart)
    on_generate: Any = None  # called with the number of generations so far


class FakeServer:
    """A tiny OpenAI-compatible server (completions and chat, streamed) on loopback."""

    def __init__(self) -> None:
        self.behaviour = Behaviour()
        self.requests: list[tuple[str, str, dict[str, Any]]] = []
        self.app = Starlette(
            routes=[
                Route("/v1/models", self.models),
                Route("/version", self.version),
                Route("/v1/completions", self.generate, methods=["POST"]),
                Route("/v1/chat/completions", self.generate, methods=["POST"]),
            ]
        )

    async def models(self, request: Request) -> Response:
        self.requests.append(("GET", request.url.path, {}))
        if self.behaviour.models_status != 200:
            return Response("<html>no</html>", self.behaviour.models_status, media_type="text/html")
        return JSONResponse({"object": "list", "data": [{"id": "fake", "owned_by": "fake"}]})

    async def version(self, request: Request) -> Response:
        return JSONResponse({"version": self.behaviour.version})

    def _counts(self, body: dict[str, Any]) -> tuple[int, int]:
        b = self.behaviour
        if "messages" in body:
            prompt = len(body["messages"][0]["content"].split()) + b.chat_overhead
        else:
            prompt = len(body["prompt"].split())
        n = int(body["max_tokens"]) + b.extra_tokens
        if b.stop_at is not None and not (b.honour_ignore_eos and body.get("ignore_eos")):
            n = min(n, b.stop_at)
        return prompt, n

    async def generate(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(("POST", request.url.path, body))
        b = self.behaviour
        if b.on_generate is not None:
            b.on_generate(len(self.requests))
        if b.restart_after is not None and len(self.requests) > b.restart_after:
            b.version, b.restart_after = b.version + "-restarted", None
        if b.statuses:
            status = b.statuses.pop(0)
            return JSONResponse({"error": "busy"}, status, headers={"retry-after": "0"})
        refused = [name for name in b.refuse if name in body]
        if refused:
            return JSONResponse({"detail": f"Unexpected fields in the request: {refused}"}, 422)
        prompt, n = self._counts(body)
        usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        chat = "messages" in body
        if not (b.stream and body.get("stream")):
            text = " the" * n
            choice = {"message": {"content": text}} if chat else {"text": text}
            return JSONResponse(
                {"choices": [{**choice, "finish_reason": "length"}], "usage": usage}
            )
        return StreamingResponse(self._events(n, usage, chat), media_type="text/event-stream")

    async def _events(self, n: int, usage: dict[str, int], chat: bool) -> Any:
        per = self.behaviour.tokens_per_event
        for i in range(0, n, per):
            await asyncio.sleep(0.001)
            text = " the" * min(per, n - i)
            choice = {"delta": {"content": text}} if chat else {"text": text}
            yield f"data: {json.dumps({'choices': [{'index': 0, **choice}]})}\n\n"
        yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
        yield "data: [DONE]\n\n"


class LoopbackServer:
    """Run an ASGI app with uvicorn in a thread, on a free loopback port."""

    def __init__(self, app: Any, port: int = 0):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="error", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=lambda: asyncio.run(self.server.serve(sockets=[self.sock])), daemon=True
        )

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture(scope="session")
def _fake_server():
    fake = FakeServer()
    with LoopbackServer(fake.app) as server:
        fake.url = server.url  # type: ignore[attr-defined]
        yield fake


@pytest.fixture
def fake_server(_fake_server):
    """The fake server, its behaviour reset for each test."""
    _fake_server.behaviour = Behaviour()
    _fake_server.requests.clear()
    return _fake_server


@pytest.fixture
def endpoint_spec(fake_server):
    """A spec dict for the fake server (budgets 4 and 8, 2 trials, 1 warm-up)."""
    return {
        "endpoint": {"url": fake_server.url, "model": "fake", "max_retries": 2},
        "budgets": [4, 8],
        "prompt_tokens": [6],
        "trials": 2,
        "warmup": 1,
    }


def _load_builder() -> Any:
    path = ROOT / "examples" / "tiny_served_model.py"
    spec = importlib.util.spec_from_file_location("tiny_served_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def transformers_server(tmp_path_factory):
    """`transformers serve` with a tiny random model, on a loopback port; yields its URL."""
    pytest.importorskip("fastapi")
    pytest.importorskip("openai")
    folder = _load_builder().build(tmp_path_factory.mktemp("served") / "tiny")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "transformers.cli.transformers", "serve", str(folder)]
    command += ["--device", "cpu", "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"transformers serve exited: {process.stderr.read().decode()[-800:]}")
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        yield url, str(folder)
    finally:
        process.terminate()
        process.wait(timeout=10)
