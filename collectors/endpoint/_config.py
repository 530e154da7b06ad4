"""The spec's ``endpoint`` table: which server, which model, which API, which key.

``endpoint = { url = "http://127.0.0.1:8000/v1", model = "NAME", api = "completions" }``
replaces ``backends``. Keys:

``url``
    The API's base URL, up to and including ``/v1``. It may hold no credentials
    (``user:password@``) and no query string: the spec is stored in ``meta.json``.
``model``
    The model name the server serves (its ``/v1/models`` list must hold it); the trial
    table's ``model``.
``api``
    ``"completions"`` (``POST /v1/completions``, a text prompt) or ``"chat"``
    (``POST /v1/chat/completions``, one user message: the server's chat template adds its
    own tokens, which the prompt's calibration counts).
``api_key_env``
    The name of an environment variable holding the API key, sent as a bearer token;
    the key itself is never stored.
``ignore_eos``
    Ask the server not to stop at the end-of-sequence token (``ignore_eos``, which vLLM,
    SGLang and llama.cpp honour), default true. A server that refuses the field is asked
    again without it, which is said once and recorded; its early stops are then recorded
    as short generations (never analysed).
``body``
    Extra fields sent in every generation request (a server's own equivalent of
    ``ignore_eos``, sampling options).
``timeout_s``, ``max_retries``
    Seconds to wait for a response or a token (default 300), and how many times an HTTP
    429 or 503 is retried with exponential backoff (default 5).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .._spec_checks import SpecError, int_value, suggest, type_name

__all__ = ["APIS", "BACKEND", "Endpoint", "check_endpoint"]

APIS: tuple[str, ...] = ("completions", "chat")

BACKEND = "endpoint"
"""The trial table's ``backend`` of every generation served by an endpoint."""

_KEYS = ("url", "model", "api", "api_key_env", "ignore_eos", "body", "timeout_s", "max_retries")


@dataclass(frozen=True)
class Endpoint:
    """A validated ``endpoint`` table (see the module docstring).

    Attributes
    ----------
    url : str
        The API's base URL without a trailing slash, free of credentials.
    model, api : str
        The served model's name, and ``"completions"`` or ``"chat"``.
    api_key_env : str or None
        The environment variable holding the API key.
    ignore_eos : bool
        Whether to send ``ignore_eos``.
    body : str
        Extra request fields, as canonical JSON (so that the spec stays hashable).
    timeout_s : float
        Seconds to wait for a response or a token.
    max_retries : int
        Retries of an HTTP 429 or 503.

    Examples
    --------
    >>> e = Endpoint.from_table({"url": "http://127.0.0.1:8000/v1/", "model": "m"})
    >>> e.url, e.api, e.origin, e.path("completions")
    ('http://127.0.0.1:8000/v1', 'completions', 'http://127.0.0.1:8000', '/v1/completions')
    """

    url: str
    model: str
    api: str = "completions"
    api_key_env: str | None = None
    ignore_eos: bool = True
    body: str = "{}"
    timeout_s: float = 300.0
    max_retries: int = 5

    @classmethod
    def from_table(cls, value: Any) -> Endpoint:
        """Validate the TOML table; raise :class:`SpecError` naming what is wrong."""
        if not isinstance(value, Mapping):
            raise SpecError(
                f"'endpoint' must be a table {{url, model, api}}, got {value!r} "
                f"({type_name(value)})"
            )
        for name in value:
            if name not in _KEYS:
                raise SpecError(f"unknown key {name!r} in 'endpoint'{suggest(str(name), _KEYS)}")
        for name in ("url", "model"):
            if not isinstance(value.get(name), str) or not value[name].strip():
                raise SpecError(f"'endpoint.{name}' must be a non-empty string")
        return cls(
            url=_url(value["url"]),
            model=value["model"],
            api=_api(value.get("api", "completions")),
            api_key_env=_key_env(value.get("api_key_env")),
            ignore_eos=_flag("endpoint.ignore_eos", value.get("ignore_eos", True)),
            body=_body(value.get("body", {})),
            timeout_s=_timeout(value.get("timeout_s", 300.0)),
            max_retries=int_value("endpoint.max_retries", value.get("max_retries", 5), minimum=0),
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the table as the TOML that specifies it (no key, only its variable)."""
        table: dict[str, Any] = {
            "url": self.url,
            "model": self.model,
            "api": self.api,
            "ignore_eos": self.ignore_eos,
            "body": json.loads(self.body),
            "timeout_s": self.timeout_s,
            "max_retries": self.max_retries,
        }
        if self.api_key_env is not None:
            table["api_key_env"] = self.api_key_env
        return table

    @property
    def origin(self) -> str:
        """``scheme://host:port``: the only place requests go to."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    def path(self, name: str) -> str:
        """Return the path of an API route under the base URL (``models``, ...)."""
        return f"{urlsplit(self.url).path}/{name}"

    @property
    def generate_route(self) -> str:
        """The generation route of :attr:`api`."""
        return "completions" if self.api == "completions" else "chat/completions"

    def extra_body(self) -> dict[str, Any]:
        """Return the extra request fields (:attr:`body`) as a dict."""
        return dict(json.loads(self.body))

    def api_key(self) -> str | None:
        """Read the API key from :attr:`api_key_env`; ``None`` when no variable is named.

        Raises
        ------
        SpecError
            The variable is not set.
        """
        if self.api_key_env is None:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise SpecError(
                f"endpoint.api_key_env names {self.api_key_env}, which is not set here; "
                f"export {self.api_key_env}=YOUR_KEY (the key is read from it, never stored)"
            )
        return key


def _url(value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SpecError(
            f"'endpoint.url' must be an http(s) URL such as http://127.0.0.1:8000/v1, got {value!r}"
        )
    if parts.username is not None or parts.password is not None:
        raise SpecError(
            "'endpoint.url' holds credentials (user:password@); the spec is stored with the run, "
            "so put the key in an environment variable and name it in endpoint.api_key_env"
        )
    if parts.query or parts.fragment:
        raise SpecError(
            f"'endpoint.url' must not hold a query or fragment ({value!r}): give the API's base "
            "URL, e.g. http://127.0.0.1:8000/v1 (a key goes in endpoint.api_key_env)"
        )
    try:
        parts.port  # noqa: B018 - a port out of range raises here
    except ValueError:
        raise SpecError(f"'endpoint.url' has an invalid port: {value!r}") from None
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"


def _api(value: Any) -> str:
    if value not in APIS:
        raise SpecError(
            f"unknown endpoint.api {value!r}{suggest(str(value), APIS)}; "
            f"expected one of {list(APIS)}"
        )
    return str(value)


def _key_env(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.replace("_", "").isalnum():
        raise SpecError(
            "'endpoint.api_key_env' must name an environment variable (letters, digits, _), "
            f"got {value!r}; never put the key itself in the spec"
        )
    return value


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"{key!r} must be true or false, got {value!r}")
    return value


_OWN_FIELDS = ("model", "prompt", "messages", "max_tokens", "stream", "stream_options")


def _body(value: Any) -> str:
    if not isinstance(value, Mapping):
        raise SpecError(f"'endpoint.body' must be a table of request fields, got {value!r}")
    clash = sorted(k for k in value if k in _OWN_FIELDS)
    if clash:
        raise SpecError(
            f"'endpoint.body' sets {clash}, which every request sets itself "
            "(the budget is max_tokens); remove them"
        )
    try:
        return json.dumps(dict(value), sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise SpecError(f"'endpoint.body' cannot be sent as JSON: {exc}") from None


def _timeout(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"'endpoint.timeout_s' must be a number of seconds, got {value!r}")
    if not (value > 0 and math.isfinite(value)):
        raise SpecError(f"'endpoint.timeout_s' must be positive and finite, got {value!r}")
    return float(value)


def check_endpoint(key: str, value: Any, known: Mapping[str, Any]) -> Endpoint | None:
    """Check the spec key ``endpoint``: ``None`` or a validated :class:`Endpoint`.

    With ``check_available``, the key variable must be set here.
    """
    if value is None or isinstance(value, Endpoint):
        endpoint = value
    else:
        endpoint = Endpoint.from_table(value)
    if endpoint is not None and known.get("check_available"):
        endpoint.api_key()
    return endpoint
