"""What a server says about itself: its identity for ``meta.json`` and for sessions.

Each engine tells a different part: every OpenAI-compatible server lists its models at
``GET /v1/models``; most send a ``server`` header (uvicorn, llama.cpp); vLLM and SGLang
answer ``GET /version``, llama.cpp ``GET /props`` (its build), TGI ``GET /info``, Ollama
``GET /api/version``; servers exporting Prometheus metrics give their process's start
time (``process_start_time_seconds`` at ``GET /metrics``). :func:`server_identity` asks
each, on the configured host only, and keeps what is stable; its :func:`fingerprint`
changes when the server process does, as far as the server lets the client tell (a
restart of the same build without a start time looks the same).

Headers are recorded with every value that may carry a secret redacted.
"""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from ._client import EndpointClient, EndpointError

__all__ = ["fingerprint", "redacted_headers", "server_identity", "server_label"]

_SECRET = re.compile(r"auth|key|token|secret|cookie|session|signature|credential", re.I)

_EXTRA_SOURCES: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "version": ("/version", None),
    "props": ("/props", ("build_info", "model_path", "total_slots", "model_alias")),
    "info": ("/info", ("model_id", "model_sha", "model_dtype", "version", "sha", "docker_label")),
    "ollama": ("/api/version", None),
}
"""Identity sources beyond the models list: name -> (path on the host, kept fields)."""

_MODEL_FIELDS = ("id", "owned_by", "root", "parent", "max_model_len")
"""Stable fields of a models-list entry (``created`` is the time of the request on some)."""

_START = re.compile(r"^process_start_time_seconds(?:\{[^}]*\})?\s+([0-9.eE+]+)\s*$", re.M)


def redacted_headers(headers: httpx.Headers) -> dict[str, str]:
    """Return the headers with every value that may carry a secret replaced.

    Examples
    --------
    >>> redacted_headers(httpx.Headers({"server": "uvicorn", "set-cookie": "s=1"}))
    {'server': 'uvicorn', 'set-cookie': '[redacted]'}
    """
    return {k: "[redacted]" if _SECRET.search(k) else v for k, v in headers.items()}


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    if response.status_code != 200:
        return None
    try:
        value = response.json()
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _models(client: EndpointClient) -> tuple[list[dict[str, Any]], httpx.Response]:
    """Read the server's models list; anything but an OpenAI list is one clear error."""
    e = client.endpoint
    response = client.get(e.path("models"))
    data = _json_object(response)
    listed = data.get("data") if data else None
    if not isinstance(listed, list):
        kind = response.headers.get("content-type", "none")
        raise EndpointError(
            f"{e.url} is not an OpenAI-compatible API: GET {e.path('models')} answered HTTP "
            f"{response.status_code} ({kind}) without a models list; endpoint.url must be "
            "the API's base URL, e.g. http://127.0.0.1:8000/v1"
        )
    entries = [m for m in listed if isinstance(m, dict)]
    names = [str(m.get("id")) for m in entries]
    if e.model not in names:
        raise EndpointError(
            f"the server at {e.url} serves {names}, not {e.model!r}; set endpoint.model to one "
            "of them"
        )
    return entries, response


def _start_time(client: EndpointClient) -> float | None:
    response = client.get("/metrics")
    if response.status_code != 200:
        return None
    found = _START.search(response.text)
    return float(found.group(1)) if found else None


def server_identity(client: EndpointClient, sources: tuple[str, ...] | None = None) -> dict:
    """Ask the server who it is (see the module docstring).

    Parameters
    ----------
    client : EndpointClient
        The endpoint's client.
    sources : tuple of str, optional
        Only these extra sources (the ones that answered before); default all.

    Returns
    -------
    dict
        ``model`` (the served model's entry), ``models`` (every name listed),
        ``server`` (the ``server`` header), ``headers`` (redacted), one key per extra
        source that answered, ``process_start_time`` where metrics give it, and
        ``sources``: the extra sources that answered.

    Raises
    ------
    ServerUnavailable
        The server cannot be reached.
    EndpointError
        It is not an OpenAI-compatible API, or does not serve the endpoint's model.
    """
    entries, response = _models(client)
    model = next(m for m in entries if str(m.get("id")) == client.endpoint.model)
    identity: dict[str, Any] = {
        "model": {k: model[k] for k in _MODEL_FIELDS if k in model},
        "models": [str(m.get("id")) for m in entries],
        "server": response.headers.get("server"),
        "headers": redacted_headers(response.headers),
    }
    answered = []
    for name, (path, keep) in _EXTRA_SOURCES.items():
        if sources is not None and name not in sources:
            continue
        data = _json_object(client.get(path))
        if data is not None:
            identity[name] = {k: data[k] for k in keep if k in data} if keep else data
            answered.append(name)
    if sources is None or "metrics" in sources:
        start = _start_time(client)
        if start is not None:
            identity["process_start_time"] = start
            answered.append("metrics")
    identity["sources"] = answered
    return identity


def fingerprint(identity: dict[str, Any]) -> str:
    """Return the parts of an identity that name one server process, as canonical JSON."""
    stable = {k: v for k, v in identity.items() if k not in ("headers", "sources")}
    return json.dumps(stable, sort_keys=True, default=str)


def server_label(identity: dict[str, Any]) -> str:
    """Name the server shortly for the trial table's ``device`` column.

    Examples
    --------
    >>> server_label({"model": {"owned_by": "vllm"}, "version": {"version": "0.6.3"},
    ...               "server": "uvicorn"})
    'vllm 0.6.3 (uvicorn)'
    """
    parts = [str(identity.get("model", {}).get("owned_by") or "")]
    for name in ("version", "ollama", "info"):
        version = (identity.get(name) or {}).get("version")
        if version:
            parts.append(str(version))
            break
    build = (identity.get("props") or {}).get("build_info")
    if build:
        parts.append(str(build))
    label = " ".join(p for p in parts if p) or "server"
    server = identity.get("server")
    return f"{label} ({server})" if server else label
