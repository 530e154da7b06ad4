"""Rows with different hinges, fitted together on the union of their smoothers.

Every row here is synthetic: log latency linear in the log budget, some rows' slope
growing from one budget on, with normal cell noise and a spike on some rows.
"""

from __future__ import annotations

import numpy as np

from regimes._stats.offers import offer_batches, offers
from regimes._stats.scan import fit_rows, selection_threshold
from regimes._stats.smoother import choose_knots, smoother_for

U = np.log(16 * 2.0 ** np.arange(12))
H = selection_threshold(U.size, 1.0)


def _levels(seed: int, rows: int = 60) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.exp(U)
    knots = rng.integers(3, U.size - 2, rows)
    bend = np.log1p(2.0 * np.maximum(0.0, x[None, :] - x[knots][:, None]) / x[None, :])
    levels = 0.3 * U[None, :] + rng.uniform(0, 1, (rows, 1)) * bend
    levels += rng.normal(0.0, 0.03, levels.shape)
    spiked = rng.random(rows) < 0.4
    levels[spiked, 6] += np.log(2.5)
    return levels


def test_a_row_fitted_beside_rows_of_other_hinges_is_fitted_as_on_its_own_smoothers() -> None:
    levels = _levels(0)
    knots = choose_knots(U, levels)
    assert len(set(knots)) > 5  # the rows hinge in many places
    offered = offers(U, knots)
    together = fit_rows(levels, offered.sm, H, 4, menu=(offered.menu, offered.menus))
    for row, knot in enumerate(knots):
        own = smoother_for(U, knot)
        alone = fit_rows(levels[row : row + 1], own, H, 4)
        # the union holds the row's smoothers in their own order: map its choice back
        menu = np.flatnonzero(offered.menus[offered.menu[row]])
        assert menu[alone.which[0]] == together.which[row]
        np.testing.assert_array_equal(alone.chosen[0], together.chosen[row])
        np.testing.assert_allclose(alone.trend[0], together.trend[row], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(alone.delta[0], together.delta[row], rtol=1e-9)


def test_each_menu_holds_what_its_hinge_offers_in_the_same_order() -> None:
    knots = [None, (4, 1.5, ()), (4, 2.5, (7,)), (5, 1.5, ()), None]
    offered = offers(U, knots)
    for row, knot in enumerate(knots):
        own = smoother_for(U, knot)
        menu = np.flatnonzero(offered.menus[offered.menu[row]])
        np.testing.assert_array_equal(offered.sm.residual[menu], own.residual)
        np.testing.assert_array_equal(offered.sm.knots[menu], own.knots)
        np.testing.assert_array_equal(offered.sm.edf[menu], own.edf)


def test_batches_keep_a_hinges_rows_together_and_bound_the_union() -> None:
    knots = [None] + [(k, f, ()) for k in range(2, 10) for f in (1.5, 2.5)] * 3
    batches = offer_batches(300, knots, 8)  # a long grid: a few knots per batch
    assert sorted(i for b in batches for i in b) == list(range(len(knots)))
    assert len(batches) > 1
    for batch in batches:
        mine = {knots[i] for i in batch}
        assert all(knots[i] not in mine for b in batches if b is not batch for i in b)
    assert offer_batches(12, knots, 8) == [list(range(len(knots)))]
