"""The process deviations the detection bootstrap draws (regimes.detect._trials.block_events).

A process's own deviation is what it adds to the shift its cell's processes share: two
slow processes of three keep their whole excess, three slow together (a regime) keep none.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from regimes.detect._trials import block_events, residual_pools

SLOW = float(np.log(2.5))


def _frame(levels: list[list[float]], trials: int = 4, seed: int = 0) -> pl.DataFrame:
    """One curve: cell ``t`` measured in ``len(levels[t])`` processes at those log levels."""
    rng = np.random.default_rng(seed)
    rows = []
    for x, cell in enumerate(levels):
        for s, level in enumerate(cell):
            noise = rng.normal(0.0, 0.01, trials)
            rows += [(0, float(x + 1), s, level + e - noise.mean()) for e in noise]
    return pl.DataFrame(rows, schema=["_curve", "_x", "_session", "_adj"], orient="row")


def _events(levels: list[list[float]]) -> np.ndarray:
    pools = residual_pools(_frame(levels))[0]
    return block_events(pools, np.zeros(len(levels)))


def test_two_slow_processes_of_three_keep_their_whole_excess():
    events = _events([[0.0, SLOW, SLOW], [0.0, 0.0, 0.0]])
    assert events.size == 6
    assert np.count_nonzero(events) == 2
    assert events[-2:] == pytest.approx([SLOW, SLOW], abs=0.02)


def test_processes_slow_together_are_a_shift_of_their_cell_not_their_own():
    # a regime (every process slower), and a cell the trend misses by 20 % in every process
    events = _events([[SLOW, SLOW, SLOW], [0.2, 0.2, 0.2], [0.0, 0.0, 0.0]])
    assert np.abs(events).max() < 0.05


def test_a_process_beyond_its_cells_shared_shift_keeps_what_it_adds():
    events = _events([[SLOW, SLOW, 2 * SLOW], [0.0, 0.0, 0.0]])
    assert np.count_nonzero(events) == 1 and events[-1] == pytest.approx(SLOW, abs=0.02)


def test_cells_measured_in_one_process_have_no_process_deviation():
    events = _events([[SLOW], [0.0], [0.0, 0.0]])
    assert events.size == 2 and not events.any()
