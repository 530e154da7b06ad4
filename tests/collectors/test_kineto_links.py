"""Kernels scoped to their launching operator, on a real CUDA profile replayed.

`data/kineto-gpt2-cuda-h200.json` holds the events of one profiled generation on an H200
(torch 2.11.0+cu130, cuDNN 9.19): gpt2 with random weights, float16, SDPA attention, a
16-token prompt and 2 greedy tokens. For each function event (``prof.events()``) it
keeps what the linking reads (name, device type, correlation id, its parent, times,
thread); for each Kineto event (``prof.profiler.kineto_results.events()``) its
correlation id and linked correlation id. Function events of torch 2.11 carry no link
of their own (``linked_correlation_id`` came in 2.12): it is read from the Kineto events.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from collectors.profiling import kineto_links, operator_rows

FIXTURE = Path(__file__).resolve().parent / "data" / "kineto-gpt2-cuda-h200.json"
SDPA = "aten::scaled_dot_product_attention"


def _method(value: Any) -> Callable[[], Any]:
    return lambda: value


@pytest.fixture(scope="module")
def profile() -> dict[str, Any]:
    """The fixture's function events (as torch 2.11 has them) and its Kineto links."""
    data = json.loads(FIXTURE.read_text())
    names = data["names"]
    events = []
    for name, kind, id_, _, _, start, end, thread, host, device in data["events"]:
        events.append(
            SimpleNamespace(
                name=names[name],
                device_type=f"DeviceType.{kind}",
                id=id_,
                cpu_parent=None,
                time_range=SimpleNamespace(start=start, end=end),
                thread=thread,
                self_cpu_time_total=host,
                self_device_time_total=device,
            )
        )
    for event, row in zip(events, data["events"], strict=True):
        event.cpu_parent = None if row[4] is None else events[row[4]]
    kineto = [
        SimpleNamespace(
            name=_method(names[name]),
            correlation_id=_method(corr),
            linked_correlation_id=_method(linked),
        )
        for name, _, corr, linked, *_ in data["kineto"]
    ]
    return {"events": events, "links": kineto_links(kineto), "data": data}


def _device_rows(profile: dict[str, Any], **links: Any) -> list[dict[str, Any]]:
    rows = operator_rows(profile["events"], device_times=True, **links)
    return [r for r in rows if r["device_type"] == "cuda"]


def test_the_fixture_is_a_real_h200_profile(profile: dict[str, Any]) -> None:
    data = profile["data"]
    assert (data["torch"], data["device"]) == ("2.11.0+cu130", "NVIDIA H200")
    kernels = [e for e in profile["events"] if e.device_type == "DeviceType.CUDA"]
    assert len(kernels) == 622
    assert all((e.id, e.name) in profile["links"] for e in kernels)


def test_every_kernel_is_scoped_to_the_operator_that_launched_it(profile: dict[str, Any]) -> None:
    rows = _device_rows(profile, links=profile["links"])
    assert rows and all(r["scope"].startswith("aten::") for r in rows)
    scope = {r["operator"]: r["scope"] for r in rows}
    attention = [k for k in scope if k.startswith("cudnn_generated_fort_native_sdpa")]
    assert attention and {scope[k] for k in attention} == {SDPA}
    assert scope["Memset (Device)"] == SDPA  # cuDNN clears its workspace
    assert {scope[k] for k in scope if k.startswith("nvjet_")} <= {"aten::addmm", "aten::linear"}
    # aten::sum called inside aten::sum is merged into its parent by the profiler: the
    # kernel linked to the inner one is scoped through its cudaLaunchKernel call
    reduce = [r for r in rows if r["operator"].startswith("void at::native::reduce_kernel")]
    assert "aten::sum" in {r["scope"] for r in reduce}


def test_kernel_time_is_counted_once_and_kept_whole(profile: dict[str, Any]) -> None:
    rows = operator_rows(profile["events"], device_times=True, links=profile["links"])
    kernels = [e for e in profile["events"] if e.device_type == "DeviceType.CUDA"]
    device = sum(r["self_device_s"] for r in rows)
    assert device == pytest.approx(sum(e.self_device_time_total for e in kernels) / 1e6)
    assert sum(r["calls"] for r in rows if r["device_type"] == "cuda") == len(kernels)
    assert all(r["self_device_s"] == 0 for r in rows if r["device_type"] == "cpu")


def test_without_the_kineto_links_no_kernel_is_linked(profile: dict[str, Any]) -> None:
    # what the committed H200 run of torch 2.11 shows: each kernel scoped to itself
    rows = _device_rows(profile)
    assert all(r["scope"] == r["operator"] for r in rows)
