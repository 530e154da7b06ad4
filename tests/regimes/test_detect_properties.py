"""Property tests: detect_regimes on random valid trial tables never crashes."""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regimes import RegimesInputError, RegimesWarning, detect_regimes


@st.composite
def trial_tables(draw) -> pl.DataFrame:
    """Random synthetic trial tables: groups, uneven grids, sessions, ties, outliers."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    rows = []
    for group in range(draw(st.integers(1, 3))):
        n_budgets = draw(st.integers(1, 14))
        budgets = np.unique(rng.integers(1, 2000, n_budgets))
        sessions = draw(st.integers(1, 3))
        scale = 10.0 ** draw(st.floats(-6, 4))
        shape = draw(st.sampled_from(["flat", "linear", "spike", "ties", "wild"]))
        for b_index, budget in enumerate(budgets):
            for session in range(sessions):
                for trial in range(int(rng.integers(1, 6))):
                    base = scale * (1.0 + (budget / 100.0 if shape != "flat" else 0.0))
                    if shape == "spike" and b_index == len(budgets) // 2:
                        base *= 5.0
                    noise = 1.0 if shape == "ties" else float(rng.lognormal(0.0, 0.1))
                    if shape == "wild":
                        noise = float(rng.lognormal(0.0, 2.0))
                    rows.append(
                        dict(
                            model=f"synthetic-{group}",
                            backend="synthetic",
                            use_cache=bool(group % 2),
                            session=session,
                            trial=trial,
                            budget=int(budget),
                            latency_s=base * noise,
                        )
                    )
    return pl.DataFrame(rows)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trial_tables(), st.sampled_from(["up", "down", "both"]))
def test_random_tables_give_a_report_or_a_clear_error(table: pl.DataFrame, direction: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RegimesWarning)
        try:
            rep = detect_regimes(table, direction=direction, n_boot=100)
        except RegimesInputError:
            return
    cells = table.select("model", "use_cache", "budget").unique().height
    assert rep.curve.height <= cells
    assert rep.curve["n"].min() >= 2
    assert (rep.curve["ci_low"] <= rep.curve["median"]).all()
    assert (rep.curve["median"] <= rep.curve["ci_high"]).all()
    a = rep.anomalies
    if a.height:
        assert ((a["start"] <= a["peak_x"]) & (a["peak_x"] <= a["end"])).all()
        assert ((a["ratio_low"] <= a["ratio"]) & (a["ratio"] <= a["ratio_high"])).all()
        assert (a["q_value"] < 0.05).all() and (a["q_value"] >= a["p_value"] - 1e-12).all()
        for _, part in a.group_by("model", "use_cache"):
            part = part.sort("start")
            assert (part["start"][1:] > part["end"][:-1]).all()  # never overlapping
    cp = rep.change_points
    if cp.height:
        assert (cp["x_before"] < cp["x_after"]).all()
        assert cp["p_value"].is_between(0.0, 1.0).all()
    rep.summary()
