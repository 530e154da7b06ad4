"""The endpoint client against httpx's MockTransport: timing, counts and every fault."""

from __future__ import annotations

import json

import httpx
import pytest

from collectors.endpoint._client import (
    CaseFailure,
    EndpointClient,
    EndpointError,
    ServerUnavailable,
)
from collectors.endpoint._config import Endpoint
from collectors.endpoint._probe import redacted_headers, server_identity
from collectors.spec import SpecError

URL = "http://127.0.0.1:8000/v1"


def _stream(n: int, *, usage: bool = True, per_event: int = 1) -> bytes:
    events = [
        f"data: {json.dumps({'choices': [{'index': 0, 'text': ' a' * per_event}]})}\n\n"
        for _ in range(n // per_event)
    ]
    if usage:
        tail = {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n}
        events.append(f"data: {json.dumps({'choices': [], 'usage': tail})}\n\n")
    return ("".join(events) + "data: [DONE]\n\n").encode()


def _client(handler, **table) -> tuple[EndpointClient, list[httpx.Request], list[float]]:
    seen: list[httpx.Request] = []
    waits: list[float] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    endpoint = Endpoint.from_table({"url": URL, "model": "m", **table})
    client = EndpointClient(endpoint, transport=httpx.MockTransport(record), sleep=waits.append)
    return client, seen, waits


def _sse(body: bytes, status: int = 200) -> httpx.Response:
    return httpx.Response(status, content=body, headers={"content-type": "text/event-stream"})


def test_a_streamed_generation_is_timed_per_token_and_counted_from_usage():
    client, seen, _ = _client(lambda r: _sse(_stream(8)))
    reply = client.generate("a b c", 8)
    assert (reply.new_tokens, reply.prompt_tokens, reply.streamed) == (8, 5, True)
    assert len(reply.step_s) == 8
    assert sum(reply.step_s) == pytest.approx(reply.latency_s)
    assert reply.prefill_s + reply.decode_s == pytest.approx(reply.latency_s)
    body = json.loads(seen[0].content)
    assert body["max_tokens"] == 8 and body["ignore_eos"] is True and body["stream"] is True
    assert body["temperature"] == 0 and seen[0].url.path == "/v1/completions"


def test_without_usage_the_stream_counts_the_tokens():
    reply = _client(lambda r: _sse(_stream(6, usage=False)))[0].generate("x", 6)
    assert reply.new_tokens == 6 and reply.prompt_tokens is None


def test_events_of_several_tokens_keep_the_phases_but_no_steps():
    reply = _client(lambda r: _sse(_stream(8, per_event=2)))[0].generate("x", 8)
    assert reply.new_tokens == 8 and reply.step_s is None and reply.prefill_s is not None


def test_429_and_503_are_retried_with_backoff_and_each_retry_recorded():
    answers = [429, 503]

    def handler(request):
        if answers:
            return httpx.Response(answers.pop(0), json={"error": "busy"})
        return _sse(_stream(4))

    client, _, waits = _client(handler)
    reply = client.generate("x", 4)
    assert [r["status"] for r in reply.retries] == [429, 503]
    assert waits == [0.5, 1.0]


def test_retries_are_bounded_and_end_in_one_line_saying_resume_later():
    client, seen, waits = _client(
        lambda r: httpx.Response(503, headers={"retry-after": "2"}), max_retries=3
    )
    with pytest.raises(
        ServerUnavailable, match="still answers HTTP 503 after 3 retries.*resume"
    ) as info:
        client.generate("x", 4)
    assert "\n" not in str(info.value) and waits == [2.0, 2.0, 2.0] and len(seen) == 4


def test_a_server_that_is_down_says_start_it_and_resume():
    def handler(request):
        raise httpx.ConnectError("connection refused")

    client = _client(handler)[0]
    with pytest.raises(ServerUnavailable, match="cannot reach the server.*rerun the same command"):
        client.generate("x", 4)
    with pytest.raises(ServerUnavailable):
        server_identity(client)


def test_a_refused_ignore_eos_is_dropped_and_remembered():
    def handler(request):
        if "ignore_eos" in json.loads(request.content):
            return httpx.Response(422, json={"detail": "Unexpected fields: {'ignore_eos'}"})
        return _sse(_stream(4))

    client, seen, _ = _client(handler)
    assert client.generate("x", 4).new_tokens == 4
    assert "ignore_eos" in client.refused and len(seen) == 2
    client.generate("x", 4)
    assert len(seen) == 3  # not asked again with it


def test_a_server_that_does_not_stream_gives_end_to_end_latency_only():
    usage = {"prompt_tokens": 5, "completion_tokens": 4}
    client = _client(lambda r: httpx.Response(200, json={"choices": [{}], "usage": usage}))[0]
    reply = client.generate("x", 4)
    assert (reply.streamed, reply.prefill_s, reply.step_s, reply.new_tokens) == (
        False,
        None,
        None,
        4,
    )
    assert client.streams is False


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(404, text="<html>Not Found</html>", headers={"content-type": "text/html"}),
        httpx.Response(200, text="<html>hello</html>", headers={"content-type": "text/html"}),
        httpx.Response(200, text="not json", headers={"content-type": "application/json"}),
    ],
)
def test_a_url_that_is_not_an_openai_api_is_one_clear_line(response):
    client = _client(lambda r: response)[0]
    with pytest.raises(EndpointError, match="not an OpenAI-compatible API") as info:
        client.generate("x", 4)
    assert "\n" not in str(info.value)


def test_the_models_list_must_exist_and_hold_the_model():
    html = httpx.Response(200, text="<html/>", headers={"content-type": "text/html"})
    with pytest.raises(EndpointError, match="not an OpenAI-compatible API.*ending|base URL"):
        server_identity(_client(lambda r: html)[0])
    other = httpx.Response(200, json={"object": "list", "data": [{"id": "other"}]})
    with pytest.raises(EndpointError, match=r"serves \['other'\], not 'm'"):
        server_identity(_client(lambda r: other)[0])


def test_a_refused_generation_fails_its_case_only():
    client = _client(lambda r: httpx.Response(400, json={"detail": "context too long"}))[0]
    with pytest.raises(CaseFailure, match="HTTP 400.*context too long"):
        client.generate("x", 4)


def test_a_refused_key_names_its_variable(monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-secret")
    client, seen, _ = _client(
        lambda r: httpx.Response(401, json={"error": "bad key"}), api_key_env="MY_KEY"
    )
    with pytest.raises(EndpointError, match=r"HTTP 401.*\$MY_KEY"):
        client.generate("x", 4)
    assert seen[0].headers["authorization"] == "Bearer sk-secret"


def test_a_missing_key_variable_is_one_line_before_any_request(monkeypatch):
    monkeypatch.delenv("MY_KEY", raising=False)
    with pytest.raises(SpecError, match="MY_KEY, which is not set here; export MY_KEY"):
        _client(lambda r: _sse(_stream(1)), api_key_env="MY_KEY")


def test_only_the_configured_host_is_contacted():
    redirect = httpx.Response(307, headers={"location": "http://evil.example/v1/completions"})
    client, seen, _ = _client(lambda r: redirect)
    with pytest.raises(EndpointError, match="redirected.*only the configured endpoint"):
        client.generate("x", 4)
    assert [r.url.host for r in seen] == ["127.0.0.1"]
    with pytest.raises(EndpointError, match="only the configured endpoint"):
        client.http.get("http://evil.example/v1/models")
    with pytest.raises(EndpointError, match="only the configured endpoint"):
        client.http.get("http://127.0.0.1:9999/v1/models")  # another port is another server
    assert len(seen) == 1


def test_identity_headers_are_redacted_and_sources_that_answer_are_kept():
    def handler(request):
        if request.url.path == "/v1/models":
            headers = {"server": "uvicorn", "set-cookie": "session=abc", "x-api-key": "k"}
            return httpx.Response(200, json={"data": [{"id": "m", "created": 1}]}, headers=headers)
        if request.url.path == "/version":
            return httpx.Response(200, json={"version": "0.9"})
        if request.url.path == "/metrics":
            return httpx.Response(200, text="# HELP x\nprocess_start_time_seconds 1.7e9\n")
        return httpx.Response(404)

    identity = server_identity(_client(handler)[0])
    assert identity["headers"]["set-cookie"] == "[redacted]"
    assert identity["headers"]["x-api-key"] == "[redacted]"
    assert identity["version"] == {"version": "0.9"} and identity["process_start_time"] == 1.7e9
    assert identity["sources"] == ["version", "metrics"] and "created" not in identity["model"]
    assert redacted_headers(httpx.Headers({"Authorization": "Bearer x"})) == {
        "authorization": "[redacted]"
    }
