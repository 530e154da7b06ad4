"""Randomised sweep shapes with known truth: the designs real latency sweeps take.

Every curve draws its own design at random (nothing is a fixed family of values) and
is one synthetic trial table (``run_id`` starts with ``synthetic-``, ``device`` is
``synthetic``). Its log latency is

    log y = log(a + b x + c x^2  [+ a hinge]) + a(x) + u_session + v_process
            + drift(order) + first-trial cost + e

with ``x`` the budget, a smooth decode trend (``a`` the fixed cost, ``b`` the time of a
step, ``c`` the attention cost of long contexts), planted anomalies ``a(x)``, a session
effect ``u`` (0-5 %), a factor ``v`` per fresh process (0-3 %), drift over the execution
order, a slow first trial in every process, and trial noise ``e``.

The design space, drawn per curve:

* grid: 6-60 budgets, linear (step 1-64) or geometric (powers of two within 16..4096,
  a 1.25x-spaced grid, or a ratio of 1.1-2);
* 2-10 trials, 1-5 sessions; a fresh process per (budget, session) cell, or processes
  that span every budget;
* execution order shuffled (interleaved) or blocked by budget, written to ``order``;
  ``trial`` is the repetition index inside (budget, session) in that order;
* noise of 1-15 %: normal, Student t (df 2.5-5, scaled to the same interquartile range),
  normal with hiccups (1-5 % of trials 1.5-3x slower) or two-moded (each trial slow with
  probability 0.1-0.4, at 1.3-1.6x);
* drift: latency creeping up 5-20 % over the sweep, linearly or saturating;
* a slow first trial in every process (2-5x), not marked as a warm-up;
* curvature: a hinge (slope 2-4x steeper from a budget on, up to the last grid step)
  or a strong ``c x^2`` term.

Planted anomalies: spikes (1-4 budgets, 1.5-5x, interior), steps to the end of the grid
(1.3-3x) and dips (0.33-0.67x, analysed with ``direction="both"``).

:data:`FAMILIES` each force one shape and draw the rest; ``mixed`` draws everything.
:func:`make_family` returns the trial frames, the truth (curve, kind, start, end, ratio,
with ``start`` and ``end`` inclusive budgets), one row of drawn design per curve, and
the :class:`Shape` of every curve (for fresh draws of the same design: :func:`simulate`).
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

FAMILIES = ("two_moded", "first_trial", "short_geometric", "drift", "curvature", "mixed")
VARIANTS = ("null", "anomaly")
NOISES = ("normal", "t", "hiccups", "two_moded")
TRUTH_SCHEMA = {
    "curve": pl.String,
    "kind": pl.String,
    "start": pl.Int64,
    "end": pl.Int64,
    "ratio": pl.Float64,
}


@dataclass(frozen=True)
class Shape:
    """The drawn design of one curve: everything but the noise of its trials.

    ``processes`` is ``fresh`` (one process per (budget, session) cell) or ``shared``
    (a process per session, spanning every budget); ``order`` is ``shuffled`` or
    ``blocked``; ``first_ratio`` 1 means no slow first trial, ``drift`` 0 no drift and
    ``hinge_factor`` 1 no hinge.
    """

    family: str
    budgets: tuple[int, ...]
    spacing: str
    trials: int
    sessions: int
    processes: str
    order: str
    noise: str
    sigma: float
    a: float
    b: float
    c: float
    t_df: float = 3.0
    hiccup_rate: float = 0.0
    slow_share: float = 0.0
    slow_ratio: float = 1.0
    drift: float = 0.0
    drift_rate: float = 0.0
    first_ratio: float = 1.0
    hinge_at: int = 0
    hinge_factor: float = 1.0
    session_sd: float = 0.0
    process_sd: float = 0.0
    direction: str = "up"


@dataclass(frozen=True)
class Planted:
    """One planted anomaly: grid cells ``first`` to ``last`` (inclusive) times ``ratio``."""

    kind: str
    first: int
    last: int
    ratio: float


@dataclass(frozen=True)
class Batch:
    """The curves of one family and variant, with their truth and drawn designs."""

    frames: list[pl.DataFrame]
    truth: pl.DataFrame
    designs: pl.DataFrame
    shapes: list[Shape] = field(default_factory=list)


def _uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(rng.uniform(low, high))


def _integer(rng: np.random.Generator, low: int, high: int) -> int:
    """Return an integer drawn uniformly from ``low`` to ``high`` inclusive."""
    return int(rng.integers(low, high + 1))


def draw_grid(rng: np.random.Generator, spacing: str, short: bool = False) -> tuple[int, ...]:
    """Return a grid of budgets of one spacing (6-60 budgets; 6-10 when ``short``).

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    spacing : str
        ``linear``, ``pow2`` (powers of two within 16..4096), ``geom125`` (1.25x apart
        from 16 up) or ``geometric`` (a ratio of 1.1-2).
    short : bool, default False
        At most 10 budgets.

    Returns
    -------
    tuple of int
        Increasing budgets.
    """
    most = 10 if short else 60
    if spacing == "pow2":
        n = _integer(rng, 6, 9)
        first = _integer(rng, 4, 13 - n)
        return tuple(int(2**k) for k in range(first, first + n))
    if spacing == "linear":
        step = int(rng.choice([1, 2, 4, 8, 16, 32, 64]))
        n = _integer(rng, 6, most)
        start = step * _integer(rng, 1, 4)
        return tuple(start + step * k for k in range(n))
    ratio = 1.25 if spacing == "geom125" else _uniform(rng, 1.5 if short else 1.1, 2.0)
    x0 = 16.0 if spacing == "geom125" else _uniform(rng, 8.0, 64.0)
    fits = int(np.log(32768.0 / x0) / np.log(ratio)) + 1
    n = _integer(rng, 6, max(6, min(most, fits)))
    return tuple(int(round(x0 * ratio**k)) for k in range(n))


def _draw_spacing(rng: np.random.Generator) -> str:
    return str(rng.choice(["linear", "pow2", "geom125", "geometric"], p=[0.5, 0.15, 0.15, 0.2]))


def _base(rng: np.random.Generator, family: str) -> Shape:
    """Draw a plain design: grid, replication, order, normal noise and a decode trend."""
    budgets = draw_grid(rng, _draw_spacing(rng))
    b = float(np.exp(rng.uniform(np.log(0.003), np.log(0.05))))
    top = budgets[-1]
    quadratic = top >= 1024 and rng.random() < 0.5
    c = _uniform(rng, 0.05, 0.5) * b / top if quadratic else 0.0
    return Shape(
        family=family,
        budgets=budgets,
        spacing="",
        trials=_integer(rng, 2, 10),
        sessions=_integer(rng, 1, 5),
        processes=str(rng.choice(["fresh", "shared"])),
        order=str(rng.choice(["shuffled", "blocked"])),
        noise="normal",
        sigma=_uniform(rng, 0.01, 0.15),
        a=b * float(np.exp(rng.uniform(np.log(2.0), np.log(200.0)))),
        b=b,
        c=c,
        session_sd=_uniform(rng, 0.0, 0.05),
        process_sd=_uniform(rng, 0.0, 0.03),
    )


def _spacing_of(budgets: tuple[int, ...]) -> str:
    """Name a grid's spacing from its budgets."""
    steps = np.diff(np.asarray(budgets, dtype=float))
    if np.all(steps == steps[0]):
        return "linear"
    ratio = budgets[1] / budgets[0]
    return "pow2" if ratio == 2 and budgets[0] & (budgets[0] - 1) == 0 else f"geometric {ratio:.2f}"


def _with_noise(rng: np.random.Generator, shape: Shape, noise: str) -> Shape:
    """Give a design one kind of trial noise, with its parameters drawn."""
    if noise == "t":
        return replace(shape, noise=noise, t_df=_uniform(rng, 2.5, 5.0))
    if noise == "hiccups":
        return replace(shape, noise=noise, hiccup_rate=_uniform(rng, 0.01, 0.05))
    if noise == "two_moded":
        return replace(
            shape,
            noise=noise,
            slow_share=_uniform(rng, 0.1, 0.4),
            slow_ratio=_uniform(rng, 1.3, 1.6),
        )
    return replace(shape, noise="normal")


def _with_curvature(rng: np.random.Generator, shape: Shape) -> Shape:
    """Give a design a hinge (slope 2-4x steeper, from a third of the grid on) or a quadratic."""
    t = len(shape.budgets)
    if rng.random() < 0.5:
        at = _integer(rng, t // 3, t - 2)
        return replace(shape, hinge_at=at, hinge_factor=_uniform(rng, 2.0, 4.0))
    return replace(shape, c=_uniform(rng, 0.5, 3.0) * shape.b / shape.budgets[-1])


def _with_drift(rng: np.random.Generator, shape: Shape) -> Shape:
    """Let latency creep up 5-20 % over the sweep, linearly (rate 0) or saturating."""
    rate = 0.0 if rng.random() < 0.5 else _uniform(rng, 2.0, 6.0)
    return replace(shape, drift=_uniform(rng, 0.05, 0.2), drift_rate=rate)


def draw_shape(rng: np.random.Generator, family: str) -> Shape:
    """Draw one curve's design for a family.

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    family : str
        One of :data:`FAMILIES`: the family's own shape is forced on, every other
        parameter is drawn from the design space (``mixed`` draws every shape too).

    Returns
    -------
    Shape
        The drawn design.
    """
    shape = _base(rng, family)
    if family == "two_moded":
        shape = _with_noise(rng, shape, "two_moded")
    elif family == "first_trial":
        shape = replace(shape, first_ratio=_uniform(rng, 2.0, 5.0))
    elif family == "short_geometric":
        spacing = "pow2" if rng.random() < 0.5 else "geometric"
        shape = replace(shape, budgets=draw_grid(rng, spacing, short=True), c=0.0)
    elif family == "drift":
        shape = _with_drift(rng, shape)
    elif family == "curvature":
        shape = _with_curvature(rng, shape)
    elif family == "mixed":
        shape = _with_noise(rng, shape, str(rng.choice(NOISES)))
        if rng.random() < 0.5:
            shape = _with_drift(rng, shape)
        if rng.random() < 0.5:
            shape = replace(shape, first_ratio=_uniform(rng, 2.0, 5.0))
        if rng.random() < 0.5:
            shape = _with_curvature(rng, shape)
    else:
        raise ValueError(f"unknown family {family!r}; one of {FAMILIES}")
    return replace(shape, spacing=_spacing_of(shape.budgets))


def place(rng: np.random.Generator, t: int, kind: str, ratio: float, width: int = 1) -> Planted:
    """Place one anomaly on a grid of ``t`` cells.

    A spike or dip of ``width`` budgets sits in the interior, with two normal budgets on
    either side where the grid has room (one otherwise); a step starts in the middle of
    the grid and runs to its end, at least two budgets long.

    Parameters
    ----------
    rng : numpy.random.Generator
        The source of the draws.
    t : int
        Number of budgets.
    kind : str
        ``spike``, ``dip`` or ``step``.
    ratio : float
        Level over the trend.
    width : int, default 1
        Budgets of a spike or dip (clipped to what the grid holds).

    Returns
    -------
    Planted
        The anomaly, by cell index.
    """
    if kind == "step":
        first = _integer(rng, max(2, t // 3), max(2, t - 2))
        return Planted(kind, first, t - 1, ratio)
    margin = 2 if t >= width + 4 else 1
    width = max(1, min(width, t - 2 * margin))
    first = _integer(rng, margin, t - margin - width)
    return Planted(kind, first, first + width - 1, ratio)


def draw_anomaly(rng: np.random.Generator, shape: Shape) -> tuple[Shape, Planted]:
    """Draw the anomaly of a family's anomaly variant, and the direction to analyse.

    ``two_moded`` and ``first_trial``: a 2-3x spike of 1-4 budgets; ``short_geometric``:
    2-5x over 1-2 budgets; ``drift``: a 1.3-3x step; ``curvature``: a 1.5-5x spike of 1-4
    budgets or a 1.3-3x step; ``mixed``: a spike, step or dip (``direction="both"``).
    """
    t = len(shape.budgets)
    if shape.family in ("two_moded", "first_trial"):
        return shape, place(rng, t, "spike", _uniform(rng, 2.0, 3.0), _integer(rng, 1, 4))
    if shape.family == "short_geometric":
        return shape, place(rng, t, "spike", _uniform(rng, 2.0, 5.0), _integer(rng, 1, 2))
    if shape.family == "drift":
        return shape, place(rng, t, "step", _uniform(rng, 1.3, 3.0))
    kinds = ["spike", "step", "dip"] if shape.family == "mixed" else ["spike", "step"]
    kind = str(rng.choice(kinds))
    if kind == "step":
        return shape, place(rng, t, kind, _uniform(rng, 1.3, 3.0))
    if kind == "dip":
        dip = place(rng, t, kind, 1.0 / _uniform(rng, 1.5, 3.0), _integer(rng, 1, 4))
        return replace(shape, direction="both"), dip
    return shape, place(rng, t, kind, _uniform(rng, 1.5, 5.0), _integer(rng, 1, 4))


def log_trend(shape: Shape) -> np.ndarray:
    """Return the log of the smooth decode trend at every budget of a design."""
    x = np.asarray(shape.budgets, dtype=float)
    mu = shape.a + shape.b * x + shape.c * x * x
    if shape.hinge_factor != 1.0:
        at = x[shape.hinge_at]
        slope = shape.b + 2.0 * shape.c * at
        mu = mu + (shape.hinge_factor - 1.0) * slope * np.maximum(0.0, x - at)
    return np.log(mu)


def layout(shape: Shape, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Return the trials of a design in execution order.

    Returns
    -------
    dict of numpy.ndarray
        Per trial, in execution order: ``cell`` (budget index), ``process``, ``round``
        (the session index of the sweep), ``session`` (the process key written to the
        table: the round for shared processes, the process for fresh ones), ``trial``
        and ``first`` (the process's first trial).
    """
    t, s, k = len(shape.budgets), shape.sessions, shape.trials
    cell = np.tile(np.repeat(np.arange(t), k), s)
    rounds = np.repeat(np.arange(s), t * k)
    rep = np.tile(np.arange(k), t * s)
    if shape.processes == "shared":
        process = rounds
        within = cell if shape.order == "blocked" else rng.permutation(cell.size)
        keys: tuple[np.ndarray, ...] = (rep, within, process)
    else:
        process = rounds * t + cell
        rank = rng.permutation(s * t) if shape.order == "shuffled" else np.arange(s * t)
        keys = (rep, rank[process])
    run = np.lexsort(keys)
    cell, process, rounds = cell[run], process[run], rounds[run]
    pair = cell * (process.max() + 1) + process
    trial = np.zeros(cell.size, dtype=np.int64)
    first = np.zeros(cell.size, dtype=bool)
    seen: dict[int, int] = {}
    for i, key in enumerate(pair.tolist()):
        trial[i] = seen.get(key, 0)
        seen[key] = trial[i] + 1
    first[np.unique(process, return_index=True)[1]] = True
    session = rounds if shape.processes == "shared" else process
    return dict(cell=cell, process=process, round=rounds, session=session, trial=trial, first=first)


def _noise(shape: Shape, rng: np.random.Generator, size: int) -> np.ndarray:
    """Return the log-scale trial noise of a design."""
    if shape.noise == "t":
        # scaled so that its interquartile range matches a normal of this sigma
        q75 = float(np.quantile(rng.standard_t(shape.t_df, 20_000), 0.75))
        e = shape.sigma * 0.6745 / q75 * rng.standard_t(shape.t_df, size)
    else:
        e = rng.normal(0.0, shape.sigma, size)
    if shape.noise == "hiccups":
        hit = rng.random(size) < shape.hiccup_rate
        e = e + np.where(hit, np.log(rng.uniform(1.5, 3.0, size)), 0.0)
    if shape.noise == "two_moded":
        e = e + np.where(rng.random(size) < shape.slow_share, np.log(shape.slow_ratio), 0.0)
    return e


def _log_latency(
    shape: Shape, planted: list[Planted], rng: np.random.Generator, rows: dict[str, np.ndarray]
) -> np.ndarray:
    """Return every trial's log latency, in execution order."""
    level = log_trend(shape)
    for anomaly in planted:
        level[anomaly.first : anomaly.last + 1] += np.log(anomaly.ratio)
    n = rows["cell"].size
    log_y = level[rows["cell"]] + rng.normal(0.0, shape.session_sd, shape.sessions)[rows["round"]]
    if shape.processes == "fresh":
        processes = int(rows["process"].max()) + 1
        log_y = log_y + rng.normal(0.0, shape.process_sd, processes)[rows["process"]]
    tau = np.arange(n) / max(1, n - 1)
    if shape.drift_rate > 0:
        tau = (1.0 - np.exp(-shape.drift_rate * tau)) / (1.0 - np.exp(-shape.drift_rate))
    log_y = log_y + np.log1p(shape.drift) * tau
    if shape.first_ratio != 1.0:
        cost = np.log(shape.first_ratio) + rng.normal(0.0, 0.1, n)
        log_y = log_y + np.where(rows["first"], cost, 0.0)
    return log_y + _noise(shape, rng, n)


def simulate(
    shape: Shape, planted: list[Planted], rng: np.random.Generator, name: str
) -> pl.DataFrame:
    """Draw the trial table of one curve.

    Parameters
    ----------
    shape : Shape
        The curve's design.
    planted : list of Planted
        Its anomalies.
    rng : numpy.random.Generator
        The source of the trial draws (a fresh generator gives a fresh draw of the
        same design).
    name : str
        The curve's ``model`` label (``run_id`` is ``synthetic-`` and the name).

    Returns
    -------
    polars.DataFrame
        One row per trial, in execution order, with the trial table's columns.
    """
    rows = layout(shape, rng)
    log_y = _log_latency(shape, planted, rng, rows)
    budget = np.asarray(shape.budgets, dtype=np.int64)[rows["cell"]]
    return pl.DataFrame(
        {
            "run_id": f"synthetic-{name}",
            "backend": "cuda",
            "device": "synthetic",
            "model": name,
            "dtype": "float16",
            "use_cache": True,
            "prompt_tokens": 32,
            "budget": budget,
            "session": rows["session"].astype(np.int64),
            "trial": rows["trial"],
            "order": np.arange(budget.size, dtype=np.int64),
            "warmup": False,
            "latency_s": np.exp(log_y),
            "new_tokens": budget,
        }
    )


def truth_rows(shape: Shape, planted: list[Planted], name: str) -> list[dict[str, Any]]:
    """Return the truth of one curve: kind, start, end (inclusive budgets) and ratio."""
    return [
        dict(
            curve=name,
            kind=p.kind,
            start=shape.budgets[p.first],
            end=shape.budgets[p.last],
            ratio=p.ratio,
        )
        for p in planted
    ]


def design_row(shape: Shape, name: str) -> dict[str, Any]:
    """Return one curve's drawn design as a flat row (the grid as its size and ends)."""
    row = {"curve": name, **asdict(shape)}
    budgets = row.pop("budgets")
    return {
        **row,
        "n_budgets": len(budgets),
        "first_budget": budgets[0],
        "last_budget": budgets[-1],
    }


def family_seed(family: str, variant: str, seed: int) -> int:
    """Return the seed of one family and variant (adding a family changes no other's)."""
    return seed * 100_003 + zlib.crc32(f"{family}/{variant}".encode()) % 100_000


def make_family(family: str, variant: str, n_curves: int, seed: int = 1) -> Batch:
    """Draw ``n_curves`` curves of one family and variant.

    Parameters
    ----------
    family : str
        One of :data:`FAMILIES`.
    variant : str
        ``null`` (no anomaly) or ``anomaly`` (one, drawn by :func:`draw_anomaly`).
    n_curves : int
        Number of curves, each its own design.
    seed : int, default 1
        Seed of the whole batch.

    Returns
    -------
    Batch
        Frames, truth (curve, kind, start, end, ratio), designs and shapes.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; one of {VARIANTS}")
    rng = np.random.default_rng(family_seed(family, variant, seed))
    frames, truths, designs, shapes = [], [], [], []
    for k in range(n_curves):
        name = f"{family}-{variant}-{k:04d}"
        shape, planted = draw_shape(rng, family), []
        if variant == "anomaly":
            shape, anomaly = draw_anomaly(rng, shape)
            planted.append(anomaly)
        elif family == "mixed":
            shape = replace(shape, direction=str(rng.choice(["up", "both"])))
        frames.append(simulate(shape, planted, rng, name))
        truths.extend(truth_rows(shape, planted, name))
        designs.append(design_row(shape, name))
        shapes.append(shape)
    truth = pl.DataFrame(truths, schema=TRUTH_SCHEMA)
    return Batch(frames, truth, pl.DataFrame(designs), shapes)
