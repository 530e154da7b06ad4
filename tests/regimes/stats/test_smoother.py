"""The trend's roughness penalty is the discrete integral of its squared curvature.

On the log of a linear grid, whose first budget lies ``log 2`` from the second; what it
changes for a slow first budget is in ``tests/regimes/test_detect_shapes.py``.
"""

from __future__ import annotations

import numpy as np

from regimes._stats.smoother import _scaled, _second_differences

U = _scaled(tuple(np.log(16.0 * np.arange(1, 25)).tolist()))
"""24 budgets 16..384 in ``u = log x``, rescaled to [0, 1] as the smoother does."""


def test_the_penalty_of_a_parabola_is_its_integral_of_squared_curvature() -> None:
    # g = u^2 has g'' = 2 everywhere: the penalty is 4 times the span of u its second
    # differences cover, on any spacing (here the log of a linear grid: uneven)
    h = np.diff(U)
    penalty = float(np.sum((_second_differences(U) @ U**2) ** 2))
    covered = float(np.sum(0.5 * (h[:-1] + h[1:])))
    assert np.isclose(penalty, 4.0 * covered, rtol=1e-12)


def test_a_unit_kink_costs_less_where_the_grid_is_sparse() -> None:
    # a slope change of one at a cell spread over the span about it: its cost is two
    # over that span, the integral's, not the square of its divided difference
    d = _second_differences(U)
    costs = []
    for k in (1, 20):
        kink = np.maximum(0.0, U - U[k])
        costs.append(float(np.sum((d @ kink) ** 2)))
        assert np.isclose(costs[-1], 2.0 / (U[k + 1] - U[k - 1]), rtol=1e-9)
    assert costs[0] < costs[1]
