"""The analyses whose outputs must stay bit-for-bit identical across refactors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import polars as pl

import regimes

DATA = Path(__file__).resolve().parents[2] / "examples" / "data"
RUNS = (
    "cpu-distilgpt2",
    "cuda-h200-gpt2",
    "cuda-h200-opt125m",
    "cuda-h200-instrumented",
    "cuda-h200-gpt2-medium-window",
)


def _frames(
    prefix: str, result: object, names: tuple[str, ...]
) -> Iterator[tuple[str, pl.DataFrame]]:
    for name in names:
        frame = getattr(result, name)
        if isinstance(frame, pl.DataFrame):
            yield f"{prefix}--{name}", frame


def golden_cases() -> Iterator[tuple[str, pl.DataFrame]]:
    """Yield ``(name, frame)`` for every golden output."""
    detect_frames = ("curve", "change_points", "anomalies")
    for run in RUNS:
        df = regimes.load(DATA / run)
        yield from _frames(f"{run}--detect", regimes.detect_regimes(df), detect_frames)
        if df["use_cache"].n_unique() == 2:
            sp = regimes.cache_speedup(df)
            yield from _frames(f"{run}--speedup", sp, ("speedup", "collapses"))
    instrumented = regimes.load(DATA / "cuda-h200-instrumented")
    yield from _frames(
        "instrumented--decode", regimes.detect_regimes(instrumented, y="decode_s"), detect_frames
    )
    sims = {
        "spike": dict(anomaly="spike", n_curves=6, seed=1),
        "plateau": dict(anomaly="plateau", n_curves=6, seed=2),
        "step": dict(anomaly="step", n_curves=6, seed=3),
        "sessions": dict(anomaly="spike", n_curves=6, sessions=3, trials=4, seed=4),
        "none": dict(anomaly="none", n_curves=6, seed=5),
    }
    for name, kwargs in sims.items():
        sweep = regimes.simulate_sweep(**kwargs)
        yield from _frames(
            f"sim-{name}--detect", regimes.detect_regimes(sweep.trials), detect_frames
        )
    published = regimes.simulate.published_gpt2_medium(trials=5, cv=0.10, seed=0).trials
    rep = regimes.detect_regimes(published)
    yield from _frames("published--detect", rep, detect_frames)
    cache = regimes.simulate.published_gpt2_medium_cache(trials=5, cv=0.10, seed=0)
    yield from _frames(
        "published-cache--speedup", regimes.cache_speedup(cache), ("speedup", "collapses")
    )
