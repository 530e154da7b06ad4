"""The HTTP client of an endpoint: one streamed generation at a time, timed on arrival.

The client is ``httpx`` with ``httpx-sse`` rather than the ``openai`` SDK. The SDK
retries 429 and 5xx answers itself (hidden from the caller, which must record each
retry), validates every streamed chunk into a pydantic model before handing it over
(a cost inside the timed region that grows with the budget), and does not expose the
response headers of a stream by default; httpx gives the raw event stream, the
headers, a transport that can refuse any other host, and a mock transport for tests.
``bench/endpoint_overhead.py`` measures what the client adds over a bare request loop.

Timing. ``time.perf_counter`` (monotonic) starts just before the request is sent; each
server-sent event with content is time-stamped as it is parsed; the clock stops when the
stream ends. ``prefill_s`` is the time to the first token, ``decode_s`` the rest, and,
when the server sends one event per token (as ``usage`` or the stream count says), the
steps are the inter-arrival times, the last one running to the end of the stream so
that they add up to ``latency_s`` as the in-process engines' steps do.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import httpx
from httpx_sse import EventSource

from regimes.data.schema import RegimesInputError

from ._config import Endpoint

__all__ = [
    "CaseFailure",
    "EndpointClient",
    "EndpointError",
    "Reply",
    "ServerUnavailable",
]

_RETRIED = (429, 502, 503, 504)
"""Answers that mean "not now": retried with backoff, each retry recorded."""

_OPTIONAL = ("ignore_eos", "stream_options")
"""Fields a server may refuse; it is then asked again without them, said once."""

_BACKOFF_S, _BACKOFF_CAP_S = 0.5, 30.0


class EndpointError(RegimesInputError):
    """The endpoint cannot be measured as configured (the message says what to fix)."""


class ServerUnavailable(EndpointError):
    """The server is down, refusing or overloaded: every trial so far is kept, resume later."""


class CaseFailure(RuntimeError):
    """A generation the server refused or answered wrongly: recorded against its case."""


class _Retry(Exception):
    def __init__(self, status: int, retry_after: float | None):
        self.status, self.retry_after = status, retry_after


class _Refused(Exception):
    def __init__(self, name: str, detail: str):
        self.name, self.detail = name, detail


@dataclass
class Reply:
    """One timed generation (see the module docstring for what the times mean)."""

    latency_s: float
    prefill_s: float | None
    decode_s: float | None
    step_s: list[float] | None
    new_tokens: int | None
    prompt_tokens: int | None
    finish_reason: str | None
    streamed: bool
    events: int = 0
    retries: list[dict[str, Any]] = field(default_factory=list)


def _steps(start: float, arrivals: list[float], end: float) -> list[float]:
    bounds = [start, *arrivals[:-1], end]
    return [b - a for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


class _OnlyOrigin(httpx.BaseTransport):
    """A transport that refuses every request to another scheme, host or port."""

    def __init__(self, inner: httpx.BaseTransport, origin: str):
        self.inner, self.origin = inner, httpx.URL(origin)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url, origin = request.url, self.origin
        if (url.scheme, url.host, url.port) != (origin.scheme, origin.host, origin.port):
            raise EndpointError(
                f"refused a request to {url.scheme}://{url.host}: only the configured "
                f"endpoint {origin} is ever contacted"
            )
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def _detail(response: httpx.Response) -> str:
    text = response.read().decode("utf-8", "replace")
    return " ".join(text.split())[:200]


class EndpointClient:
    """Talk to one OpenAI-compatible server: GETs for provenance, timed generations.

    Parameters
    ----------
    endpoint : Endpoint
        The spec's endpoint table.
    transport : httpx.BaseTransport, optional
        The transport to wrap (tests pass an ``httpx.MockTransport``).
    sleep : callable, default time.sleep
        How to wait between retries.

    Raises
    ------
    SpecError
        The key variable the endpoint names is not set.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.endpoint = endpoint
        key = endpoint.api_key()
        headers = {"authorization": f"Bearer {key}"} if key else {}
        inner = transport if transport is not None else httpx.HTTPTransport()
        self.http = httpx.Client(
            base_url=endpoint.origin,
            headers=headers,
            timeout=httpx.Timeout(endpoint.timeout_s, connect=min(10.0, endpoint.timeout_s)),
            follow_redirects=False,
            trust_env=False,  # no proxy or netrc from the environment: this host only
            transport=_OnlyOrigin(inner, endpoint.origin),
        )
        self.sleep = sleep
        self.refused: dict[str, str] = {}
        """Optional fields the server refused, with its words."""
        self.streams: bool | None = None
        """Whether the server streamed its last answer (``None`` before any)."""

    def close(self) -> None:
        """Close the connection pool."""
        self.http.close()

    def __enter__(self) -> EndpointClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def unavailable(self, exc: Exception) -> ServerUnavailable:
        """Build the one-line error of a server that cannot be reached."""
        reason = " ".join(str(exc).split()) or type(exc).__name__
        return ServerUnavailable(
            f"cannot reach the server at {self.endpoint.url} ({reason}); every trial written "
            "before it is kept: start the server (or correct endpoint.url) and rerun the "
            "same command to resume"
        )

    def get(self, path: str) -> httpx.Response:
        """GET ``path`` on the endpoint's host (the body read); a dead server raises."""
        try:
            return self.http.get(path)
        except EndpointError:
            raise
        except httpx.TransportError as exc:
            raise self.unavailable(exc) from None

    def body(self, prompt: str, budget: int) -> dict[str, Any]:
        """Build the generation request for ``prompt`` and a budget of ``budget`` tokens."""
        e = self.endpoint
        content: dict[str, Any] = (
            {"prompt": prompt}
            if e.api == "completions"
            else {"messages": [{"role": "user", "content": prompt}]}
        )
        body: dict[str, Any] = {
            "model": e.model,
            **content,
            "max_tokens": budget,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            **e.extra_body(),
        }
        if e.ignore_eos:
            body["ignore_eos"] = True
        for name in self.refused:
            body.pop(name, None)
        return body

    def generate(self, prompt: str, budget: int) -> Reply:
        """Send one generation and time it; retry 429/503 with backoff, bounded.

        Raises
        ------
        ServerUnavailable
            The server cannot be reached, or still answers 429/503 after the retries.
        EndpointError
            The URL is not an OpenAI-compatible API, or the key is refused.
        CaseFailure
            The server refused this generation (recorded against its case).
        """
        retries: list[dict[str, Any]] = []
        while True:
            try:
                reply = self._attempt(self.body(prompt, budget))
            except _Refused as refused:
                self.refused[refused.name] = refused.detail
                continue
            except _Retry as answer:
                if len(retries) >= self.endpoint.max_retries:
                    raise self._overloaded(answer.status, retries) from None
                wait = self._backoff(len(retries), answer.retry_after)
                retries.append({"status": answer.status, "wait_s": wait})
                self.sleep(wait)
                continue
            reply.retries = retries
            return reply

    def _overloaded(self, status: int, retries: list[dict[str, Any]]) -> ServerUnavailable:
        waited = sum(r["wait_s"] for r in retries)
        return ServerUnavailable(
            f"the server at {self.endpoint.url} still answers HTTP {status} after "
            f"{len(retries)} retries over {waited:.0f} s; every trial written before it is "
            "kept: rerun the same command later to resume (endpoint.max_retries sets the bound)"
        )

    @staticmethod
    def _backoff(attempt: int, retry_after: float | None) -> float:
        wait = _BACKOFF_S * 2.0**attempt if retry_after is None else retry_after
        return float(min(max(wait, 0.0), _BACKOFF_CAP_S))

    @contextmanager
    def _stream(self, body: dict[str, Any]) -> Iterator[tuple[httpx.Response, float]]:
        path = self.endpoint.path(self.endpoint.generate_route)
        try:
            start = perf_counter()
            with self.http.stream("POST", path, json=body) as response:
                yield response, start
        except (EndpointError, CaseFailure, _Retry, _Refused):
            raise
        except httpx.TransportError as exc:
            raise self.unavailable(exc) from None

    def _attempt(self, body: dict[str, Any]) -> Reply:
        with self._stream(body) as (response, start):
            self._check_status(response, body)
            kind = response.headers.get("content-type", "")
            if kind.startswith("text/event-stream"):
                self.streams = True
                return self._read_stream(response, start)
            if "json" in kind:
                data = _json(response.read(), self.endpoint)
                end = perf_counter()
                self.streams = False
                return self._whole(data, end - start)
        raise self._not_openai(f"answered a generation with content-type {kind or 'none'!r}")

    def _not_openai(self, what: str) -> EndpointError:
        e = self.endpoint
        return EndpointError(
            f"{e.url} is not an OpenAI-compatible API: POST {e.path(e.generate_route)} {what}; "
            "endpoint.url must be the API's base URL (ending in /v1) and endpoint.api its kind"
        )

    def _check_status(self, response: httpx.Response, body: dict[str, Any]) -> None:
        status = response.status_code
        if status < 300:
            return
        if status in _RETRIED:
            response.read()
            raise _Retry(status, _retry_after(response))
        if 300 <= status < 400:
            raise EndpointError(
                f"the server redirected to {response.headers.get('location')!r}; only the "
                f"configured endpoint is contacted: set endpoint.url to the API's own address"
            )
        detail = _detail(response)
        if status in (401, 403):
            hint = (
                f"check the key in ${self.endpoint.api_key_env}"
                if self.endpoint.api_key_env
                else "name the variable holding the key in endpoint.api_key_env"
            )
            raise EndpointError(f"the server refused the request (HTTP {status}: {detail}); {hint}")
        if status in (404, 405):
            raise self._not_openai(f"answered HTTP {status} ({detail})")
        if status in (400, 422):
            for name in _OPTIONAL:
                if name in body and name in detail:
                    raise _Refused(name, detail)
        raise CaseFailure(f"the server refused the generation: HTTP {status}: {detail}")

    def _read_stream(self, response: httpx.Response, start: float) -> Reply:
        arrivals: list[float] = []
        usage: dict[str, Any] = {}
        finish: str | None = None
        events = 0
        text_of = _text if self.endpoint.api == "completions" else _delta
        for event in EventSource(response).iter_sse():
            now = perf_counter()
            if event.data.strip() == "[DONE]":
                break
            chunk = _json(event.data.encode(), self.endpoint)
            if "error" in chunk:
                raise CaseFailure(f"the server reported an error mid-stream: {chunk['error']}")
            events += 1
            for choice in chunk.get("choices") or ():
                if text_of(choice):
                    arrivals.append(now)
                finish = choice.get("finish_reason") or finish
            usage = chunk.get("usage") or usage
        end = perf_counter()
        new_tokens = usage.get("completion_tokens", len(arrivals))
        per_token = bool(arrivals) and len(arrivals) == new_tokens
        first = arrivals[0] - start if arrivals else None
        return Reply(
            latency_s=end - start,
            prefill_s=first,
            decode_s=(end - start) - first if first is not None else None,
            step_s=_steps(start, arrivals, end) if per_token else None,
            new_tokens=new_tokens,
            prompt_tokens=usage.get("prompt_tokens"),
            finish_reason=finish,
            streamed=True,
            events=len(arrivals),
        )

    def _whole(self, data: dict[str, Any], latency: float) -> Reply:
        usage = data.get("usage") or {}
        choices = data.get("choices") or [{}]
        return Reply(
            latency_s=latency,
            prefill_s=None,
            decode_s=None,
            step_s=None,
            new_tokens=usage.get("completion_tokens"),
            prompt_tokens=usage.get("prompt_tokens"),
            finish_reason=choices[0].get("finish_reason"),
            streamed=False,
        )


def _text(choice: dict[str, Any]) -> bool:
    return bool(choice.get("text"))


def _delta(choice: dict[str, Any]) -> bool:
    delta = choice.get("delta") or {}
    return bool(delta.get("content") or delta.get("reasoning_content"))


def _json(raw: bytes, endpoint: Endpoint) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise EndpointError(
            f"{endpoint.url} is not an OpenAI-compatible API: its answer is not a JSON object "
            f"({raw[:60]!r}); endpoint.url must be the API's base URL, ending in /v1"
        )
    return value


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None
