"""The tables of a comparison, typed, from the rows its tests produced."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl

from regimes._compare.sides import ENV_KEYS, Side
from regimes._result import untested_frame

__all__ = ["build_tables"]

_F = pl.Float64

CHANGES: dict[str, Any] = {
    "start": "x",
    "end": "x",
    "status": pl.String,
    "found_in": pl.String,
    "start_base": "x",
    "end_base": "x",
    "start_new": "x",
    "end_new": "x",
    "start_shift": "x",
    "end_shift": "x",
    **dict.fromkeys(("ratio_base", "ratio_new", "ratio_of_ratios", "ratio_low"), _F),
    **dict.fromkeys(("ratio_high", "p_value", "q_value", "boundary_p", "boundary_q"), _F),
    **dict.fromkeys(("presence_p", "presence_q", "power"), _F),
    "note": pl.String,
}
"""Columns of ``changes`` after the group columns; ``"x"`` takes the type of ``x``."""

SHIFT: dict[str, Any] = {
    "n_budgets": pl.Int64,
    **dict.fromkeys(("shift", "shift_low", "shift_high", "df", "p_value", "q_value"), _F),
    "change": pl.String,
    "note": pl.String,
}

BUDGETS: dict[str, Any] = {
    "x": "x",
    **dict.fromkeys(("level_base", "level_new", "ratio", "ratio_low", "ratio_high"), _F),
    **dict.fromkeys(("vs_shift", "p_value", "q_value"), _F),
    "differs": pl.Boolean,
    "in_anomaly": pl.Boolean,
}

UNMATCHED: dict[str, Any] = {"run": pl.String, "n_budgets": pl.Int64}


def build_tables(
    sides: tuple[Side, Side],
    rows: dict[str, list[dict[str, Any]]],
    group_columns: Sequence[str],
    x: str,
) -> dict[str, pl.DataFrame]:
    """Build ``changes``, ``shift``, ``budgets``, ``unmatched``, ``environment``, ``untested``."""
    schema = sides[0].report.curve.schema
    x_type = schema.get(x, pl.Float64)
    groups = {
        c: schema.get(c, sides[1].report.curve.schema.get(c, pl.String)) for c in group_columns
    }
    for row in rows["changes"]:
        for bound in ("start", "end"):
            if row.get(f"{bound}_base") is not None and row.get(f"{bound}_new") is not None:
                row[f"{bound}_shift"] = row[f"{bound}_new"] - row[f"{bound}_base"]
    for row in rows["budgets"]:
        row[x] = row.pop("x")

    def frame(name: str, columns: dict[str, Any], order: Sequence[str]) -> pl.DataFrame:
        names = [x if c == "x" else c for c in columns]
        x_like = {n for n, t in zip(names, columns.values(), strict=True) if isinstance(t, str)}
        final = groups | {
            n: (x_type if n in x_like else t) for n, t in zip(names, columns.values(), strict=True)
        }
        raw = {c: (_F if c in x_like else t) for c, t in final.items()}
        table = pl.DataFrame([{c: r.get(c) for c in final} for r in rows[name]], schema=raw)
        table = table.with_columns(pl.col(c).cast(final[c]) for c in x_like)
        return table.sort([*group_columns, *order], nulls_last=True) if table.height else table

    return {
        "changes": frame("changes", CHANGES, ["start"]),
        "shift": frame("shift", SHIFT, []),
        "budgets": frame("budgets", BUDGETS, [x]),
        "unmatched": frame("unmatched", UNMATCHED, ["run"]),
        "environment": environment_table(sides),
        "untested": untested_frame(rows["untested"], list(group_columns)),
    }


def environment_table(sides: tuple[Side, Side]) -> pl.DataFrame:
    """``key``, ``base``, ``new``, ``same`` for each of :data:`ENV_KEYS`."""
    base, new = (side.environment for side in sides)
    return pl.DataFrame(
        {
            "key": list(ENV_KEYS),
            "base": [base[k] for k in ENV_KEYS],
            "new": [new[k] for k in ENV_KEYS],
            "same": [base[k] == new[k] for k in ENV_KEYS],
        },
        schema={"key": pl.String, "base": pl.String, "new": pl.String, "same": pl.Boolean},
    )
