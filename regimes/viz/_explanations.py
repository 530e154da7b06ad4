"""The explanations a report runs on the anomalies found, each when the data allows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import altair as alt
import polars as pl

from regimes.errors import RegimesInputError
from regimes.viz import charts as plot
from regimes.viz._frames import report_axes


@dataclass(frozen=True)
class Explanation:
    """An explanation of the anomalies (phase, backend, memory, prompt length)."""

    key: str
    title: str
    result: Any
    table: pl.DataFrame
    chart: alt.TopLevelMixin | None = None


_MEMORY_COLUMNS = ("mem_driver_bytes", "mem_allocated_bytes", "rss_bytes")

_Plan = tuple[str, str, Callable[[], Any], str]


def _explanation_plans(
    trials_raw: pl.DataFrame, trials: pl.DataFrame, regimes: Any, detect_options: dict[str, Any]
) -> list[_Plan]:
    """Plan the explanations the data supports: ``(key, title, run, main table)``."""
    from regimes.explain.alignment import align_boundaries
    from regimes.explain.backends import compare_backends
    from regimes.explain.memory import memory_confound
    from regimes.explain.phases import attribute_phases

    group_columns = report_axes(regimes)[2]
    shared = {k: v for k, v in detect_options.items() if k in ("alpha", "level")}
    boot = {k: v for k, v in detect_options.items() if k in ("n_boot", "seed", "level")}
    plans: list[_Plan] = []
    run: Callable[[], Any]
    if is_instrumented(trials):
        title = "Prefill or decode: where the excess time goes"
        plans.append(
            ("phases", title, partial(attribute_phases, trials_raw, regimes, **boot), "phases")
        )
    if "backend" in group_columns and trials["backend"].n_unique() >= 2:
        title = "Is it specific to one backend?"
        run = partial(compare_backends, trials_raw, regimes, **shared)
        plans.append(("backends", title, run, "comparisons"))
    memory = next(
        (c for c in _MEMORY_COLUMNS if c in trials.columns and trials[c].drop_nulls().len() > 0),
        None,
    )
    if memory is not None:
        alpha = shared.get("alpha", 0.05)
        run = partial(memory_confound, trials_raw, regimes, memory, alpha=alpha)
        plans.append(("memory", f"Does memory ({memory}) explain it?", run, "effects"))
    if "prompt_tokens" in group_columns and trials["prompt_tokens"].n_unique() >= 2:
        title = "Does it follow the budget or the total length?"
        plans.append(
            ("alignment", title, partial(align_boundaries, trials_raw, regimes), "boundaries")
        )
    return plans


def run_explanations(
    trials_raw: pl.DataFrame,
    trials: pl.DataFrame,
    regimes: Any,
    detect_options: dict[str, Any],
    notes: list[str],
) -> list[Explanation]:
    """Run each explanation the data supports on the anomalies found.

    Phases need instrumented trials, backends two backends or more, memory a memory
    reading, alignment two prompt lengths or more. One that cannot run on this data
    leaves a note saying why instead of stopping the report.
    """
    if regimes.anomalies.height == 0:
        return []
    done = []
    for key, title, run, table in _explanation_plans(trials_raw, trials, regimes, detect_options):
        try:
            result = run()
        except RegimesInputError as exc:
            notes.append(f"{title} not analysed: {exc}")
            continue
        # The phases are drawn stacked per budget among the charts; here, their excess.
        chart = plot.phase_excess_chart(result) if key == "phases" else plot.result_chart(result)
        done.append(Explanation(key, title, result, getattr(result, table), chart))
    return done


def is_instrumented(trials: pl.DataFrame) -> bool:
    if not {"prefill_s", "decode_s"} <= set(trials.columns):
        return False
    both = pl.col("prefill_s").is_not_null() & pl.col("decode_s").is_not_null()
    return bool(trials.select(both.any()).item())
