"""collectors: measure decode latency across decoding budgets.

The measurement side of ``regimes``: backends (``cpu``, ``cuda``, ``mps``) that know
how to synchronise, read memory and name the device; model presets built from configs
with random weights; two generation engines that produce exactly the requested number
of tokens and time them; the environment metadata stored with every run; sweep specs
and the sweep runner (:func:`run_sweep` for a spec, :func:`collect_budgets` for more
budgets in fresh sessions of an existing run, :func:`run_stored_session` for one
session as a unit of work).

torch and transformers are imported only when one of these names is first used, so
that importing the package (e.g. to register the ``collect`` command) stays cheap and
works without them.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_EXPORTS: dict[str, str] = {
    "BACKEND_NAMES": "backends",
    "Backend": "backends",
    "CpuBackend": "backends",
    "CudaBackend": "backends",
    "MpsBackend": "backends",
    "available_backends": "backends",
    "get_backend": "backends",
    "rss_bytes": "backends",
    "DTYPES": "models",
    "LoadedModel": "models",
    "ModelPreset": "models",
    "PRESETS": "models",
    "load_model": "models",
    "make_prompt": "models",
    "ENGINES": "engines",
    "BudgetMismatch": "engines",
    "TrialTiming": "engines",
    "run_generation": "engines",
    "environment_metadata": "environment",
    "Endpoint": "endpoint._config",
    "EndpointError": "endpoint._client",
    "Injection": "spec",
    "SpecError": "spec",
    "SweepSpec": "spec",
    "SweepResult": "sweep",
    "collect_budgets": "sweep",
    "run_stored_session": "sweep",
    "run_sweep": "sweep",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'collectors' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(_EXPORTS) | {name for name in globals() if name.startswith("__")})
