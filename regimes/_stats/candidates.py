"""Which intervals are tested, and which of the significant ones are reported.

**Candidates** (:func:`candidate_intervals`): every run of consecutive segments of a
curve's segmentation, with the exclusions the tests need. Each candidate's p-value is
adjusted for the scan over every interval of the grid, so which runs are proposed
changes power, not validity.

**Choice** (:func:`choose_intervals`): among the candidates that pass the effect size
(:func:`passes_min_ratio`) and the significance threshold, a greedy set of
non-overlapping intervals, best evidence first (:func:`select_non_overlapping`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "MIN_EDGE_FLANK",
    "candidate_intervals",
    "choose_intervals",
    "passes_min_ratio",
    "select_non_overlapping",
]


MIN_EDGE_FLANK = 3
"""Flank cells an interval touching an end of the grid needs on its one side."""


def candidate_intervals(
    n_cells: int,
    breaks: Sequence[int],
    max_segments: int = 25,
    max_candidates: int = 2000,
    min_edge_flank: int = MIN_EDGE_FLANK,
) -> list[tuple[int, int, int, int]]:
    """Return runs of consecutive segments as ``(start, end, first_segment, last_segment)``.

    ``breaks`` are the indices where a new segment starts (sorted, in ``1..n_cells-1``).
    Every run of at most ``max_segments`` segments is a candidate except the whole grid,
    single cells at either end of it (see :func:`regimes._stats.interval_tests.interval_tests`),
    and runs touching an
    end whose one flank has fewer than ``min_edge_flank`` cells: their trend would be
    drawn from one side only, and one or two cells cannot tell a level from a
    curvature the smooth trend misses (a quadratic cost read on a log axis bends; a
    step "after" one cell is then an artefact of the fit). Such a shift is still
    reported as a change point. With many segments runs are shortened to keep about
    ``max_candidates``. The scan adjustment of the interval tests covers every
    interval, so this changes power, not validity.
    """
    edges = [0, *[int(b) for b in breaks], n_cells]
    n_seg = len(edges) - 1
    # a long, finely cut curve keeps shorter runs, so the count stays near max_candidates
    longest = max(1, min(max_segments, max_candidates // n_seg))
    out = []
    for a in range(n_seg):
        for b in range(a, min(n_seg, a + longest)):
            start, end = edges[a], edges[b + 1] - 1
            at_edge = start == 0 or end == n_cells - 1
            if (a == 0 and b == n_seg - 1) or (at_edge and start == end):
                continue
            if at_edge and (start if end == n_cells - 1 else n_cells - 1 - end) < min_edge_flank:
                continue
            out.append((start, end, a, b))
    return out


def passes_min_ratio(ratio: np.ndarray, min_ratio: float, direction: str) -> np.ndarray:
    """Tell whether each ratio is at least ``min_ratio`` away from 1 in ``direction``.

    (``up``: ``>= min_ratio``; ``down``: ``<= 1 / min_ratio``; ``both``: either).
    """
    ratio = np.asarray(ratio, dtype=float)
    up = ratio >= min_ratio
    down = ratio <= 1.0 / min_ratio
    if direction == "up":
        return up
    if direction == "down":
        return down
    return up | down


def select_non_overlapping(start: np.ndarray, end: np.ndarray, order_key: np.ndarray) -> np.ndarray:
    """Return a greedy set of non-overlapping intervals, best ``order_key`` first."""
    chosen: list[int] = []
    for idx in np.argsort(order_key, kind="stable"):
        if all(end[idx] < start[k] or start[idx] > end[k] for k in chosen):
            chosen.append(int(idx))
    return np.asarray(sorted(chosen, key=lambda k: start[k]), dtype=np.int64)


def choose_intervals(
    start: np.ndarray,
    end: np.ndarray,
    eligible: np.ndarray,
    sort_keys: Sequence[np.ndarray],
) -> np.ndarray:
    """Return the greedy non-overlapping choice among the ``eligible`` intervals.

    ``sort_keys`` rank the intervals as :func:`numpy.lexsort` does (last key primary,
    ties kept in input order); the best ranked eligible interval is taken first, then
    the next that overlaps none taken. Returned sorted by start.
    """
    keep = np.flatnonzero(eligible)
    if keep.size == 0:
        return keep.astype(np.int64)
    order = np.lexsort(tuple(np.asarray(k)[keep] for k in sort_keys))
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return keep[select_non_overlapping(np.asarray(start)[keep], np.asarray(end)[keep], rank)]
