"""align_boundaries: onset and recovery follow the budget or the total length.

The sweeps here are synthetic (seeded): a spike whose onset sits at a fixed total length
or budget, and whose recovery sits at a fixed budget or total length, measured at two
or three prompt lengths on the published 16-token grid around gpt2-medium's spike.
"""

from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

import regimes
from regimes import RegimesInputError
from regimes.explain.alignment import align_boundaries

GRID = np.arange(480, 657, 16)
CASE = ["backend", "model", "use_cache"]


def spike_cells(
    prompt: int, onset: tuple[str, int], recovery: tuple[str, int], grid: np.ndarray = GRID
) -> np.ndarray:
    """Budgets of GRID inside the spike for one prompt length (ground truth).

    ``onset = ("total", 577)``: anomalous from total length 577 on;
    ``recovery = ("budget", 640)``: normal again from budget 640 on.
    """

    def position(kind: str, value: int) -> np.ndarray:
        return grid + prompt if kind == "total" else grid

    started = position(*onset) >= onset[1]
    recovered = position(*recovery) >= recovery[1]
    return grid[started & ~recovered]


def sweep_and_report(prompts, onset, recovery, seed=0, x="budget", grid=GRID):
    """Synthetic trials (10% lognormal noise, 10x spike) and the ground-truth report."""
    rng = np.random.default_rng(seed)
    frames, anomalies = [], []
    for prompt in prompts:
        cells = spike_cells(prompt, onset, recovery, grid)
        budget = np.repeat(grid, 5)
        level = 0.017 * budget * np.where(np.isin(budget, cells), 10.0, 1.0)
        frames.append(
            pl.DataFrame(
                {
                    "backend": "mps",
                    "model": "synthetic-gpt2-medium",
                    "use_cache": True,
                    "prompt_tokens": prompt,
                    "budget": budget,
                    "latency_s": level * np.exp(0.1 * rng.standard_normal(budget.size)),
                }
            )
        )
        shift = prompt if x == "total_tokens" else 0
        anomalies.append(
            {
                "backend": "mps",
                "model": "synthetic-gpt2-medium",
                "use_cache": True,
                "prompt_tokens": prompt,
                "start": int(cells.min()) + shift,
                "end": int(cells.max()) + shift,
            }
        )
    report = SimpleNamespace(
        anomalies=pl.DataFrame(anomalies),
        x=x,
        y="latency_s",
        group_columns=[*CASE, "prompt_tokens"],
    )
    return pl.concat(frames), report


def follows(result) -> dict[str, str]:
    return dict(result.boundaries.select("boundary", "follows").iter_rows())


def test_published_case_onset_follows_total_recovery_follows_budget():
    df, report = sweep_and_report([3, 65], ("total", 577), ("budget", 640))
    result = align_boundaries(df, report)
    assert follows(result) == {"onset": "total_tokens", "recovery": "budget"}
    onset = result.boundaries.filter(pl.col("boundary") == "onset").row(0, named=True)
    assert onset["total_spread"] < 16 <= onset["budget_spread"]
    evidence = result.positions.filter(pl.col("boundary") == "onset").sort("prompt_tokens")
    assert evidence["budget"].to_list() == [576, 512]
    assert evidence["total_tokens"].to_list() == [579, 577]
    text = result.summary()
    assert "follows total_tokens" in text and "follows budget" in text


def test_detected_end_to_end():
    # A grid with wider flanks than the published one, so detection finds both spikes.
    df, _ = sweep_and_report(
        [3, 65], ("total", 577), ("budget", 640), seed=4, grid=np.arange(400, 737, 16)
    )
    result = align_boundaries(df, n_boot=200)
    assert follows(result) == {"onset": "total_tokens", "recovery": "budget"}
    with pytest.raises(RegimesInputError, match="only when no report"):
        align_boundaries(df, SimpleNamespace(anomalies=pl.DataFrame()), n_boot=200)


def test_opposite_case_is_told_apart():
    df, report = sweep_and_report([3, 65], ("budget", 528), ("total", 673))
    assert follows(align_boundaries(df, report)) == {"onset": "budget", "recovery": "total_tokens"}


def test_report_on_total_tokens_gives_the_same_answer():
    df, by_budget = sweep_and_report([3, 40, 65], ("total", 577), ("budget", 640))
    _, by_total = sweep_and_report([3, 40, 65], ("total", 577), ("budget", 640), x="total_tokens")
    assert follows(align_boundaries(df, by_total)) == follows(align_boundaries(df, by_budget))
    assert align_boundaries(df, by_total).positions.equals(
        align_boundaries(df, by_budget).positions
    )


def test_prompts_closer_than_the_grid_cannot_tell():
    # Both onsets land on budget 528 and both recoveries on 640: nothing to tell apart.
    df, report = sweep_and_report([60, 65], ("total", 584), ("budget", 640))
    assert set(follows(align_boundaries(df, report)).values()) == {"either"}


def test_detection_off_by_one_step_is_neither_unless_tolerated():
    df, report = sweep_and_report([3, 65], ("total", 577), ("budget", 640))
    # The 3-token prompt's onset detected one grid step late.
    late = SimpleNamespace(
        **{
            **vars(report),
            "anomalies": report.anomalies.with_columns(
                pl.when(pl.col("prompt_tokens") == 3)
                .then(pl.col("start") + 16)
                .otherwise(pl.col("start"))
                .alias("start")
            ),
        }
    )
    assert follows(align_boundaries(df, late))["onset"] == "neither"
    assert follows(align_boundaries(df, late, tolerance=1))["onset"] == "total_tokens"


def test_step_without_recovery_leaves_recovery_open():
    df, report = sweep_and_report([3, 65], ("total", 577), ("budget", 10_000))
    result = align_boundaries(df, report)
    recovery = result.positions.filter(pl.col("boundary") == "recovery")
    assert recovery["budget"].null_count() == recovery.height == 2
    assert follows(result)["onset"] == "total_tokens"


def test_single_prompt_length_is_a_clear_error():
    df, report = sweep_and_report([65], ("total", 577), ("budget", 640))
    with pytest.raises(RegimesInputError, match="at least two prompt lengths"):
        align_boundaries(df, report)


def test_missing_prompt_column_is_a_clear_error():
    df, report = sweep_and_report([3, 65], ("total", 577), ("budget", 640))
    with pytest.raises(RegimesInputError, match="prompt_tokens"):
        align_boundaries(df.drop("prompt_tokens"), report)


def test_report_not_grouped_by_prompt_is_a_clear_error():
    df, report = sweep_and_report([3, 65], ("total", 577), ("budget", 640))
    pooled = SimpleNamespace(
        anomalies=report.anomalies.drop("prompt_tokens").head(1), x="budget", group_columns=CASE
    )
    with pytest.raises(RegimesInputError, match="not grouped by 'prompt_tokens'"):
        align_boundaries(df, pooled)


def test_public_name():
    assert regimes.align_boundaries is align_boundaries


def test_result_follows_the_protocol(result_protocol):
    df, report = sweep_and_report([3, 65], ("total", 577), ("budget", 640))
    result = align_boundaries(df, report)
    result_protocol(result, regimes.AlignmentResult, "BoundaryAlignment")
    assert result.params["tolerance"] == 0


def test_boundary_at_one_prompt_only_is_untested():
    df, report = sweep_and_report([3, 65], ("total", 577), ("budget", 640))
    one = SimpleNamespace(**{**vars(report), "anomalies": report.anomalies.head(1)})
    result = align_boundaries(df, one)
    assert result.boundaries.height == 0
    assert sorted(result.untested["boundary"].to_list()) == ["onset", "recovery"]
    assert "prompt_tokens=3 only" in result.untested["reason"][0]
    assert result.status.startswith("2 group(s) not testable here")
