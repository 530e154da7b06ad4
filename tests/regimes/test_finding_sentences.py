"""How the findings write a share of an anomaly's excess with its interval."""

from __future__ import annotations

from regimes._findings import _share


def test_whole_percents_where_they_show_the_interval():
    assert _share(0.92, 0.88, 0.951) == "92% of the excess (CI 88-95%)"


def test_a_decimal_where_whole_percents_would_hide_it():
    # the demo printed "decode carries 97% of the excess (CI 97-97%)"
    assert _share(0.969, 0.966, 0.972) == "96.9% of the excess (CI 96.6-97.2%)"
