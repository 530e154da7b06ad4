"""The statuses a regime can have between two runs, apart from the comparison's numerics.

Its own module so that the ``regimes compare`` parser can offer them to ``--fail-on``
without importing the statistics (``regimes --help`` stays fast).
"""

from __future__ import annotations

__all__ = ["STATUSES"]

STATUSES: tuple[str, ...] = ("appeared", "vanished", "persists", "changed", "inconclusive")
"""The status of a regime between two runs."""
