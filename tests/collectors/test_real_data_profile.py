"""The committed H200 profile of cuDNN SDPA's first visits to KV lengths.

`examples/data/cuda-h200-profile-firstvisit`: gpt2 float16 SDPA, no warm-ups, fresh
processes, profiled generations at budgets 32 and 64 run before the measured trials
(`profile.first`). Budget 64 came first in round 0 of both sessions, so that generation
met every KV length it used for the first time; round 1 repeated it with all of them
visited. The excess of the first over the second is cuDNN's plan building, on the host.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import regimes
from collectors._schedule import _iter_groups
from collectors.spec import SweepSpec

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "examples" / "data" / "cuda-h200-profile-firstvisit"
CUDNN = "aten::_cudnn_attention_forward"


@pytest.fixture(scope="module")
def ops() -> pl.DataFrame:
    return regimes.load(RUN, table="ops")


def _host(ops: pl.DataFrame, budget: int, trial: int, operator: str | None = None) -> list[float]:
    """Per session, the host self time of one profiled generation (of one operator)."""
    kept = ops.filter(
        pl.col("device_type") == "cpu", pl.col("budget") == budget, pl.col("trial") == trial
    )
    if operator is not None:
        kept = kept.filter(pl.col("operator") == operator)
    sums = kept.group_by("session").agg(pl.col("self_host_s").sum()).sort("session")
    return sums["self_host_s"].to_list()


def test_budget_64_is_each_process_s_first_generation() -> None:
    spec = SweepSpec.from_toml(
        ROOT / "examples" / "sweeps" / "cuda-h200-profile-firstvisit.toml", check_available=False
    )
    for session in range(spec.sessions):
        first = next(_iter_groups(spec, session, profiled=True))
        assert (first.case.budget, first.trial, first.profiled) == (64, 0, True)


def test_the_cudnn_forward_carries_the_first_visit_excess_on_the_host(ops: pl.DataFrame) -> None:
    total = [a - b for a, b in zip(_host(ops, 64, 0), _host(ops, 64, 1), strict=True)]
    cudnn = [a - b for a, b in zip(_host(ops, 64, 0, CUDNN), _host(ops, 64, 1, CUDNN), strict=True)]
    assert len(total) == 2
    for whole, part in zip(total, cudnn, strict=True):
        assert whole > 2.0  # seconds: the first generation pays several seconds more
        assert part / whole > 0.75  # most of it in the cuDNN attention forward
    # and the visited lengths (round 1) cost it 100 times less
    assert max(_host(ops, 64, 1, CUDNN)) * 100 < min(_host(ops, 64, 0, CUDNN))


def test_the_cudnn_kernels_take_the_same_device_time_in_both_rounds(ops: pl.DataFrame) -> None:
    kernels = ops.filter(pl.col("operator").str.starts_with("cudnn_generated_fort_native_sdpa"))
    assert kernels.height > 0 and (kernels["device_type"] == "cuda").all()
    per = kernels.group_by("session", "trial", "budget").agg(pl.col("self_device_s").sum())
    wide = per.pivot(on="trial", index=["session", "budget"], values="self_device_s")
    ratio = wide["0"] / wide["1"]
    assert ratio.is_between(0.98, 1.02).all(), ratio.to_list()


def test_a_generation_that_meets_no_new_length_pays_nothing(ops: pl.DataFrame) -> None:
    # budget 32 ran second in round 0: budget 64 had already visited all its lengths
    first, second = _host(ops, 32, 0, CUDNN), _host(ops, 32, 1, CUDNN)
    assert max(first) < 3 * max(second)
    assert max(first) < 0.05 * min(_host(ops, 64, 0, CUDNN))
