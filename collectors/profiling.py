"""Profiled generations: per-operator self times under :func:`torch.profiler.profile`.

A profiled generation (spec key ``profile``) runs exactly as a timed one, inside the
PyTorch profiler. Its events give one row per operator (``aten::mm``,
``aten::_scaled_dot_product_flash_attention_for_cpu``, ...) and *scope*, the outermost
operator it ran inside (``aten::transpose`` inside ``aten::scaled_dot_product_attention``
is scoped to the attention; called from the model's own code, to itself):
``self_host_s``, the time spent in the operator itself and not in the operators it
called, on the host; ``self_device_s``, the same on the device for backends whose
profiler reports device activity (CUDA, through Kineto: its kernels are rows of their
own, ``device_type`` ``"cuda"``, scoped to the operator that launched them, and each
kernel's time is on its own row only), null elsewhere (the CPU; Apple's MPS, whose operators
the generic profiler sees on the host only); ``calls``. The profiler's own cost makes
these generations slower than timed ones, which is why they are trials of their own.

``slow_attention`` (:func:`slowed_attention`) computes every call of
:func:`torch.nn.functional.scaled_dot_product_attention` ``factor`` times: a real,
operator-specific slowdown for tests and benchmarks.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import torch
from torch.profiler import ProfilerActivity, profile

__all__ = ["DEVICE_ACTIVITY", "operator_rows", "profiled", "slowed_attention"]

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
    return out, operator_rows(prof.events(), device_times=device is not None)


def _root(event: Any) -> Any:
    while getattr(event, "cpu_parent", None) is not None:
        event = event.cpu_parent
    return event


def operator_rows(events: Iterable[Any], *, device_times: bool) -> list[dict[str, Any]]:
    """Sum a profile's events into one row per (scope, operator, device type).

    A host event's scope is its outermost enclosing operator. A device event (a CUDA
    kernel, a memcpy) has no host parent of its own: its scope is that of the operator
    that launched it, found through the profiler's correlation id (its own name where
    none is linked). With device times recorded, a kernel's time is counted once, on
    the kernel's row: the host operators' rows carry the device time of no kernel
    (their ``self_device_s`` is 0), so that sums over rows are not counted twice.

    Parameters
    ----------
    events : iterable
        :class:`torch.autograd.profiler_util.FunctionEvent` objects (``prof.events()``).
    device_times : bool
        Whether the backend's profiler recorded device activity.

    Returns
    -------
    list of dict
        ``scope``, ``operator``, ``device_type``, ``self_host_s``, ``self_device_s``
        (None without device times) and ``calls``.
    """
    events = list(events)
    kinds = [str(event.device_type).rsplit(".", 1)[-1].lower() for event in events]
    launched = {
        event.id: _root(event).name
        for event, kind in zip(events, kinds, strict=True)
        if kind == "cpu" and getattr(event, "id", None) is not None
    }
    totals: dict[tuple[str, str, str], list[float]] = {}
    for event, kind in zip(events, kinds, strict=True):
        if kind == "cpu":
            scope = _root(event).name
            on_device = 0.0
        else:
            linked = getattr(event, "linked_correlation_id", 0)
            scope = launched.get(linked, event.name) if linked else event.name
            on_device = event.self_device_time_total
        entry = totals.setdefault((scope, event.name, kind), [0.0, 0.0, 0])
        entry[0] += event.self_cpu_time_total if kind == "cpu" else 0.0
        entry[1] += on_device
        entry[2] += 1
    rows = []
    for (scope, operator, kind), (host, on_device, calls) in totals.items():
        rows.append(
            {
                "scope": scope,
                "operator": operator,
                "device_type": kind,
                "self_host_s": host / 1e6,
                "self_device_s": on_device / 1e6 if device_times else None,
                "calls": int(calls),
            }
        )
    return rows


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
