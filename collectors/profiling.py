"""Profiled generations: per-operator self times under :func:`torch.profiler.profile`.

A profiled generation (spec key ``profile``) runs exactly as a timed one, inside the
PyTorch profiler. Its events give one row per operator (``aten::mm``,
``aten::_scaled_dot_product_flash_attention_for_cpu``, ...) and *scope*, the outermost
operator it ran inside (``aten::transpose`` inside ``aten::scaled_dot_product_attention``
is scoped to the attention; called from the model's own code, to itself):
``self_host_s``, the time spent in the operator itself and not in the operators it
called, on the host; ``self_device_s``, the same on the device for backends whose
profiler reports device activity (CUDA, through Kineto: its kernels are rows of their
own, ``device_type`` ``"cuda"``), null elsewhere (the CPU; Apple's MPS, whose operators
the generic profiler sees on the host only); ``calls``. The profiler's own cost makes
these generations slower than timed ones, which is why they are trials of their own.

``slow_attention`` (:func:`slowed_attention`) computes every call of
:func:`torch.nn.functional.scaled_dot_product_attention` ``factor`` times: a real,
operator-specific slowdown for tests and benchmarks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch
from torch.profiler import ProfilerActivity, profile

__all__ = ["DEVICE_ACTIVITY", "profiled", "slowed_attention"]

T = TypeVar("T")

DEVICE_ACTIVITY: dict[str, ProfilerActivity] = {"cuda": ProfilerActivity.CUDA}
"""Backends whose profiler reports device times, and the activity that records them."""


def profiled(run: Callable[[], T], backend: str) -> tuple[T, list[dict[str, Any]]]:
    """Run ``run()`` under the profiler; return its result and one row per operator.

    Parameters
    ----------
    run : callable
        The generation (it synchronises the device itself).
    backend : str
        ``"cpu"``, ``"cuda"`` or ``"mps"``: device times are recorded for those in
        :data:`DEVICE_ACTIVITY` only.

    Returns
    -------
    tuple
        ``run()``'s result and rows of ``scope``, ``operator``, ``device_type``,
        ``self_host_s``, ``self_device_s`` (None without device times) and ``calls``.

    Examples
    --------
    >>> import torch
    >>> x = torch.ones(8, 8)
    >>> out, rows = profiled(lambda: x @ x, "cpu")
    >>> any(r["operator"] == "aten::mm" and r["calls"] == 1 for r in rows)
    True
    """
    activities = [ProfilerActivity.CPU]
    device = DEVICE_ACTIVITY.get(backend)
    if device is not None:
        activities.append(device)
    with profile(activities=activities) as prof:
        out = run()
    totals: dict[tuple[str, str, str], list[float]] = {}
    for event in prof.events():
        root = event
        while getattr(root, "cpu_parent", None) is not None:
            root = root.cpu_parent
        kind = str(event.device_type).rsplit(".", 1)[-1].lower()
        entry = totals.setdefault((root.name, event.name, kind), [0.0, 0.0, 0])
        entry[0] += event.self_cpu_time_total
        entry[1] += event.self_device_time_total
        entry[2] += 1
    rows = []
    for (scope, operator, kind), (host, on_device, calls) in totals.items():
        rows.append(
            {
                "scope": scope,
                "operator": operator,
                "device_type": kind,
                "self_host_s": host / 1e6,
                "self_device_s": on_device / 1e6 if device is not None else None,
                "calls": int(calls),
            }
        )
    return out, rows


@contextlib.contextmanager
def slowed_attention(factor: int) -> Iterator[None]:
    """Compute every scaled-dot-product attention call ``factor`` times inside the block.

    The call's result is that of its last computation, so the tokens are unchanged.

    Examples
    --------
    >>> import torch
    >>> q = torch.ones(1, 1, 4, 8)
    >>> with slowed_attention(3):
    ...     out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    >>> tuple(out.shape)
    (1, 1, 4, 8)
    """
    if factor == 1:
        yield
        return
    original = torch.nn.functional.scaled_dot_product_attention

    def repeated(*args: Any, **kwargs: Any) -> torch.Tensor:
        for _ in range(factor - 1):
            original(*args, **kwargs)
        return original(*args, **kwargs)

    torch.nn.functional.scaled_dot_product_attention = repeated
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
