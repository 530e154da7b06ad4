"""What ``meta.json`` records about an endpoint when a sweep (or a batch of it) begins."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ._client import EndpointClient
from ._config import Endpoint
from ._probe import server_identity, server_label

__all__ = ["endpoint_metadata"]


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def endpoint_metadata(endpoint: Endpoint) -> dict[str, Any]:
    """Describe the endpoint and the server behind it, for ``meta.json``.

    The URL is the spec's (it holds no credentials: the spec refuses them), the key is
    named by its variable only, and the server's headers are recorded redacted.

    Parameters
    ----------
    endpoint : Endpoint
        The spec's endpoint.

    Returns
    -------
    dict
        ``url``, ``model``, ``api``, ``api_key_env``, ``server`` (the label trials
        record as ``device``), ``identity`` (:func:`~collectors.endpoint._probe.
        server_identity`) and ``client`` (the versions of httpx and httpx-sse).

    Raises
    ------
    ServerUnavailable
        The server cannot be reached (nothing is written: start it and rerun).
    EndpointError
        The URL is not an OpenAI-compatible API, or it does not serve the model.
    """
    with EndpointClient(endpoint) as client:
        identity = server_identity(client)
    return {
        "url": endpoint.url,
        "model": endpoint.model,
        "api": endpoint.api,
        "api_key_env": endpoint.api_key_env,
        "server": server_label(identity),
        "identity": identity,
        "client": {"httpx": _version("httpx"), "httpx-sse": _version("httpx-sse")},
    }
