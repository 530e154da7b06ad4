"""Whether an anomaly's boundaries follow the decoding budget or the total length.

With several prompt lengths ``P`` a boundary (the onset of an anomaly, or its recovery)
can line up across prompts in the budget ``B`` or in the total length ``T = P + B``. The
published gpt2-medium MPS case suggests the onset follows ``T`` while the recovery follows
``B``; this module says which, per boundary, with the evidence.

A boundary found on a grid is only known to a bracket. The onset lies in ``(b_prev,
b_first]``, between the last normal budget before the anomaly and its first anomalous
one; the recovery lies in ``(b_last, b_next]``, between its last anomalous budget and the
first normal one after it (when there is none the anomaly is a step, and the recovery
bracket is open above). In total-length coordinates the same bracket is shifted by ``P``.
A boundary *lines up* in a coordinate when one position is inside every prompt's bracket,
i.e. ``max(lower) < min(upper)``; the answer is

``budget``        lines up in the budget and not in the total length;
``total_tokens``  lines up in the total length and not in the budget;
``either``        lines up in both: the prompts differ by less than the grid resolves;
``neither``       lines up in neither (the boundary moves with something else, or the
                  detection differs across prompts by more than ``tolerance`` steps).

``tolerance`` widens every bracket by that many grid steps on each side, for grids where
the detected boundary may be off by a step. Anomalies of different prompts are matched
into one *episode* when their intervals overlap in either coordinate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from regimes._deprecation import renamed
from regimes._labels import text_label
from regimes._result import AnalysisResult, native_library, untested_frame
from regimes._summary import Summary
from regimes.data.schema import RegimesInputError, validate_trials
from regimes.explain._anomalies import AnomalyInput, frame_columns
from regimes.explain._source import anomaly_source

__all__ = ["AlignmentResult", "align_boundaries"]

_AXES = ("budget", "total_tokens")


@dataclass(frozen=True, repr=False)
class AlignmentResult(AnalysisResult):
    """Result of :func:`align_boundaries`: what each anomaly boundary follows.

    Attributes
    ----------
    boundaries : polars.DataFrame
        One row per case (group columns without ``prompt_tokens``), episode and boundary
        (``onset``, ``recovery``) with ``n_prompts``, ``budget_spread`` and
        ``total_spread`` (range across prompts of the boundary's grid position in each
        coordinate), ``budget_aligned``, ``total_aligned`` and ``follows``.
    positions : polars.DataFrame
        The evidence, one row per case, episode, boundary and prompt length: ``budget``
        and ``total_tokens`` (first anomalous point for an onset, first normal point
        after it for a recovery; null when the grid ends first) and the bracket
        ``budget_low`` < boundary <= ``budget_high`` (null for an open side).
    untested : polars.DataFrame
        Boundaries found at a single prompt length (case columns, ``episode``,
        ``boundary``, ``reason``): nothing to line up.
    params : dict
        The call's arguments (``tolerance`` and the detection's options).
    case_columns : tuple of str
        The columns that identify a case.
    """

    boundaries: pl.DataFrame
    positions: pl.DataFrame
    untested: pl.DataFrame
    params: dict[str, Any]
    case_columns: tuple[str, ...]

    _tables = ("boundaries", "positions")
    _title = "Boundary alignment"
    _explanation = True

    @property
    def tolerance(self) -> int:
        """Grid steps every bracket was widened by (``params["tolerance"]``)."""
        return int(self.params["tolerance"])

    def _summary(self) -> Summary:
        """One line per boundary: where it sits per prompt and what it follows."""
        head = "Boundary alignment across prompt lengths"
        if self.params["tolerance"]:
            head += f" (brackets widened by {self.params['tolerance']} grid step(s))"
        return Summary().add_listing(
            head,
            self.boundaries,
            self._line,
            empty="no anomaly is found at more than one prompt length",
            untested=self.untested,
        )

    def _line(self, row: dict[str, Any]) -> str:
        keys = [*self.case_columns, "episode", "boundary"]
        where = self.positions.filter(
            pl.all_horizontal([pl.col(k).eq_missing(row[k]) for k in keys])
        ).sort("prompt_tokens")
        per_prompt = "; ".join(
            f"P={p}: B={_show(b)}, T={_show(t)}"
            for p, b, t in where.select("prompt_tokens", "budget", "total_tokens").iter_rows()
        )
        return (
            f"{text_label(row, self.case_columns)} episode {row['episode']} "
            f"{row['boundary']}: {per_prompt} | spread B {_show(row['budget_spread'])}, "
            f"T {_show(row['total_spread'])} -> follows {row['follows']}"
        )


_RENAMED = {"BoundaryAlignment": "AlignmentResult"}
"""Former names, answered with a :class:`DeprecationWarning` until release 0.2."""


def __getattr__(name: str) -> Any:
    return renamed(__name__, _RENAMED, name)


def _show(value: Any) -> str:
    return "-" if value is None else f"{value:g}"


def align_boundaries(
    df: Any,
    report: Any = None,
    *,
    x: str | None = None,
    y: str | None = None,
    by: str | Sequence[str] | None = None,
    alpha: float | None = None,
    level: float | None = None,
    n_boot: int | None = None,
    seed: int | None = None,
    session: str | None = None,
    tolerance: int = 0,
) -> AlignmentResult:
    """Say for each anomaly boundary whether it follows the budget or the total length.

    Parameters
    ----------
    df : polars.DataFrame or pandas.DataFrame
        A trial table with at least two prompt lengths (``prompt_tokens``).
    report : RegimeResult, optional
        Anomalies grouped by ``prompt_tokens`` (as :func:`regimes.detect_regimes` does by
        default) on ``x="budget"`` or ``x="total_tokens"``; when None they are detected
        here with ``x`` (default ``"budget"``), ``y``, ``by``, ``alpha``, ``level``,
        ``n_boot``, ``seed`` and ``session``.
    x, y : str, optional
        The axis and the time; default the report's. Given with a report, they must be
        the report's.
    by : str or sequence of str, optional
        Group columns, ``prompt_tokens`` among them; default the report's.
    alpha, level, n_boot, seed, session : optional
        Options of the detection (:func:`regimes.detect_regimes`'s defaults when None);
        only when ``report`` is None.
    tolerance : int, default 0
        Grid steps by which every bracket is widened on each side, for grids where the
        detected boundary may be off by a step.

    Returns
    -------
    AlignmentResult
        ``boundaries`` (the verdict per boundary), ``positions`` (the evidence per
        prompt length) and ``untested`` (boundaries seen at one prompt length only).

    Raises
    ------
    RegimesInputError
        With a single prompt length, without a ``prompt_tokens`` column, with a report
        not grouped by prompt length, with detection options next to a report, or a
        negative or fractional ``tolerance``.

    See Also
    --------
    regimes.detect_regimes : finds the anomalies whose boundaries are lined up here.

    Examples
    --------
    >>> import numpy as np, polars as pl, regimes
    >>> grid = np.repeat(np.arange(400, 737, 16), 5)
    >>> rng = np.random.default_rng(4)
    >>> def prompt(p):  # onset at total length 577, recovery at budget 640 (synthetic)
    ...     spike = (grid + p >= 577) & (grid < 640)
    ...     return pl.DataFrame({"backend": "synthetic", "model": "synthetic",
    ...         "use_cache": True, "prompt_tokens": p, "budget": grid,
    ...         "latency_s": 0.017 * grid * np.where(spike, 10.0, 1.0)
    ...         * rng.lognormal(0, 0.1, grid.size)})
    >>> res = regimes.align_boundaries(pl.concat([prompt(3), prompt(65)]), n_boot=200)
    >>> res.boundaries.select("boundary", "follows").rows()
    [('onset', 'total_tokens'), ('recovery', 'budget')]
    """
    frame = _prompt_frame(df, tolerance)
    detection: dict[str, Any] = {"alpha": alpha, "level": level, "n_boot": n_boot}
    detection |= {"seed": seed, "session": session}
    source = anomaly_source(
        frame, report, x=x, y=y, by=by, detection=detection, detection_only=list(detection)
    )
    if source.x not in _AXES:
        raise RegimesInputError(f"the report's x must be one of {_AXES}, got {source.x!r}")
    if "prompt_tokens" not in source.group_columns:
        raise RegimesInputError(
            "the report is not grouped by 'prompt_tokens'; detect per prompt length "
            "(detect_regimes groups by every case column present, prompt_tokens included)"
        )
    case_columns = [c for c in source.group_columns if c != "prompt_tokens"]
    grids = frame.group_by([*case_columns, "prompt_tokens"]).agg(
        pl.col("budget").unique().sort().alias("grid")
    )
    brackets = _brackets(_in_budget(source), grids, case_columns, tolerance)
    positions = _episodes(brackets, case_columns)
    boundaries, untested = _verdicts(positions, case_columns)
    keys = [*case_columns, "episode", "boundary"]
    return AlignmentResult(
        boundaries=boundaries,
        positions=positions.select(
            [*keys, "prompt_tokens", "budget", "total_tokens", "budget_low", "budget_high"]
        ).sort([*keys, "prompt_tokens"]),
        untested=untested_frame(untested, keys),
        params={"x": source.x, "y": source.y, "by": source.group_columns}
        | detection
        | {"tolerance": int(tolerance)},
        case_columns=tuple(case_columns),
        native=native_library(df),
    )


def _prompt_frame(df: Any, tolerance: Any) -> pl.DataFrame:
    """Check the arguments that need no report and validate the trials."""
    if tolerance < 0 or int(tolerance) != tolerance:
        raise RegimesInputError(
            f"tolerance must be a whole number of grid steps >= 0, got {tolerance}"
        )
    if "prompt_tokens" not in frame_columns(df):
        raise RegimesInputError(
            "boundary alignment needs the 'prompt_tokens' column: it compares the same "
            "case measured at several prompt lengths"
        )
    frame = validate_trials(df, x="budget", required=["prompt_tokens"])
    if frame.get_column("prompt_tokens").null_count():
        raise RegimesInputError("column 'prompt_tokens' has null values")
    prompts = frame.get_column("prompt_tokens").unique().sort().to_list()
    if len(prompts) < 2:
        raise RegimesInputError(
            f"boundary alignment needs at least two prompt lengths; the table has only "
            f"prompt_tokens={prompts[0]} (measure the sweep again with another prompt length)"
        )
    return frame


def _in_budget(source: AnomalyInput) -> pl.DataFrame:
    """Return the anomalies with ``start`` and ``end`` in budget (the prompt taken off)."""
    if source.x != "total_tokens":
        return source.anomalies
    return source.anomalies.with_columns(
        (pl.col("start") - pl.col("prompt_tokens")).alias("start"),
        (pl.col("end") - pl.col("prompt_tokens")).alias("end"),
    )


def _brackets(
    anomalies: pl.DataFrame, grids: pl.DataFrame, case_columns: list[str], tolerance: int
) -> pl.DataFrame:
    """Onset and recovery brackets (in budget) of every anomaly, one row per boundary."""
    keys = [*case_columns, "prompt_tokens"]
    joined = anomalies.select([*keys, "anomaly", "start", "end"]).join(
        grids, on=keys, how="left", nulls_equal=True
    )
    rows = []
    for row in joined.iter_rows(named=True):
        grid = np.asarray(row["grid"], dtype=np.int64)
        first = int(np.searchsorted(grid, row["start"], side="left"))
        last = int(np.searchsorted(grid, row["end"], side="right")) - 1
        common = {k: row[k] for k in keys} | {
            "anomaly": row["anomaly"],
            "start": row["start"],
            "end": row["end"],
        }
        onset_low = _grid_at(grid, first - 1 - tolerance)
        onset_high = _grid_at(grid, first + tolerance)
        rows.append(
            common
            | {
                "boundary": "onset",
                "budget": _grid_at(grid, first),
                "budget_low": onset_low,
                "budget_high": onset_high,
            }
        )
        recovery_low = _grid_at(grid, last - tolerance)
        rows.append(
            common
            | {
                "boundary": "recovery",
                "budget": _grid_at(grid, last + 1),
                "budget_low": recovery_low,
                "budget_high": _grid_at(grid, last + 1 + tolerance),
            }
        )
    schema = {c: anomalies.schema[c] for c in keys} | {
        "anomaly": pl.Int64,
        "start": pl.Int64,
        "end": pl.Int64,
        "boundary": pl.String,
        "budget": pl.Int64,
        "budget_low": pl.Int64,
        "budget_high": pl.Int64,
    }
    return pl.DataFrame(rows, schema=schema, orient="row").with_columns(
        (pl.col("budget") + pl.col("prompt_tokens")).alias("total_tokens")
    )


def _grid_at(grid: np.ndarray, index: int) -> int | None:
    """Return the grid value at ``index``; None (an open bracket side) off either end."""
    return int(grid[index]) if 0 <= index < grid.size else None


def _episodes(brackets: pl.DataFrame, case_columns: list[str]) -> pl.DataFrame:
    """Label anomalies of one case that overlap across prompts (in B or T) as one episode.

    Connected components over the overlap graph: a handful of anomalies per case, so a
    plain union-find is simpler and clearer than any frame formulation.
    """
    intervals = brackets.unique(subset=["anomaly"], keep="first").sort("anomaly")
    parent = {a: a for a in intervals.get_column("anomaly").to_list()}

    def find(a: int) -> int:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    parts = (
        intervals.partition_by(case_columns, maintain_order=True) if case_columns else [intervals]
    )
    episode_of: dict[int, int] = {}
    for part in parts:
        items = part.select("anomaly", "prompt_tokens", "start", "end").rows()
        for i, (a, p, s, e) in enumerate(items):
            for b, q, s2, e2 in items[i + 1 :]:
                if p == q:
                    continue
                in_budget = s <= e2 and s2 <= e
                in_total = s + p <= e2 + q and s2 + q <= e + p
                if in_budget or in_total:
                    parent[find(a)] = find(b)
        roots: dict[int, int] = {}
        for a, *_ in items:
            episode_of[a] = roots.setdefault(find(a), len(roots))
    labelled = brackets.with_columns(
        pl.col("anomaly").replace_strict(episode_of, return_dtype=pl.Int64).alias("episode")
    )
    # Two anomalies of one prompt in one episode: keep the outer boundaries of the pair.
    keys = [*case_columns, "episode", "boundary", "prompt_tokens"]
    onsets = labelled.filter(pl.col("boundary") == "onset").sort("start")
    recoveries = labelled.filter(pl.col("boundary") == "recovery").sort("end")
    return pl.concat(
        [
            onsets.unique(subset=keys, keep="first", maintain_order=True),
            recoveries.unique(subset=keys, keep="last", maintain_order=True),
        ]
    )


def _verdicts(
    positions: pl.DataFrame, case_columns: list[str]
) -> tuple[pl.DataFrame, list[dict[str, Any]]]:
    """Judge each episode's boundaries: spreads, whether brackets intersect, the verdict.

    Boundaries seen at a single prompt length have nothing to line up; they come back
    apart, as rows of the result's ``untested`` table.
    """
    keys = [*case_columns, "episode", "boundary"]
    shifted_low = pl.col("budget_low") + pl.col("prompt_tokens")
    shifted_high = pl.col("budget_high") + pl.col("prompt_tokens")

    def aligned(low: pl.Expr, high: pl.Expr) -> pl.Expr:
        # Open sides are null and drop out of max/min; fully open means anything fits.
        lowest_high = high.min()
        highest_low = low.max()
        return lowest_high.is_null() | highest_low.is_null() | (highest_low < lowest_high)

    table = positions.group_by(keys, maintain_order=True).agg(
        pl.col("prompt_tokens").n_unique().alias("n_prompts"),
        (pl.col("budget").max() - pl.col("budget").min()).alias("budget_spread"),
        (pl.col("total_tokens").max() - pl.col("total_tokens").min()).alias("total_spread"),
        aligned(pl.col("budget_low"), pl.col("budget_high")).alias("budget_aligned"),
        aligned(shifted_low, shifted_high).alias("total_aligned"),
        pl.col("prompt_tokens").first().alias("_prompt"),
    )
    single = table.filter(pl.col("n_prompts") < 2).sort(keys)
    untested = [
        {k: row[k] for k in keys}
        | {"reason": f"found at prompt_tokens={row['_prompt']} only: nothing to line up"}
        for row in single.iter_rows(named=True)
    ]
    table = table.filter(pl.col("n_prompts") >= 2).drop("_prompt")
    follows = (
        pl.when(pl.col("budget_aligned") & pl.col("total_aligned"))
        .then(pl.lit("either"))
        .when(pl.col("budget_aligned"))
        .then(pl.lit("budget"))
        .when(pl.col("total_aligned"))
        .then(pl.lit("total_tokens"))
        .otherwise(pl.lit("neither"))
    )
    return table.with_columns(follows.alias("follows")).sort(keys), untested
