"""The progress bar of a sweep: session events in, a tqdm bar and counts out."""

from __future__ import annotations

import sys
from collections import Counter

from ._events import Event
from .spec import Case

__all__ = ["Progress"]


class Progress:
    """A tqdm bar fed by session events, counting what was done.

    The bar's total is the generations planned, warm-ups and profiled generations
    included (``counts``: ``measured``, ``warmups``, ``profiled``, ``errors``); a
    ``skip`` event lowers it.
    """

    def __init__(self, total: int, enabled: bool):
        from tqdm.auto import tqdm

        self.bar = tqdm(
            total=total,
            unit="gen",
            disable=not enabled,
            dynamic_ncols=True,
            file=sys.stderr,
            smoothing=0.05,
        )
        self.counts = Counter[str]()
        self._write = tqdm.write

    def write(self, line: str) -> None:
        """Print a line above the bar."""
        self._write(line, file=sys.stderr)

    def __call__(self, event: Event) -> None:
        kind = event.get("event")
        if kind == "trial":
            case = event["case"]
            self.counts["warmups" if event["warmup"] else "measured"] += 1
            self.bar.set_postfix_str(
                f"session {event['session']} budget {case['budget']} "
                f"{'cache' if case['use_cache'] else 'no-cache'} {event['latency_s']:.3g}s",
                refresh=False,
            )
            self.bar.update(1)
        elif kind == "profiled":
            self.counts["profiled"] += 1
            self.bar.set_postfix_str(
                f"session {event['session']} budget {event['case']['budget']} profiled",
                refresh=False,
            )
            self.bar.update(1)
        elif kind == "skip":
            self.retotal(self.total - int(event["n"]))
        elif kind == "note":
            self.write(f"collect: session {event['session']}: {event['message']}")
        elif kind == "error":
            self.counts["errors"] += 1
            case = Case(**event["case"])
            self.write(
                f"error in {case.label()} (session {event['session']}): "
                f"{event['error_type']}: {event['error']}"
            )

    @property
    def total(self) -> int:
        """The bar's total: generations planned, warm-ups and profiled ones included."""
        return int(self.bar.total or 0)

    @property
    def done(self) -> int:
        """Generations done so far."""
        return int(self.bar.n)

    def retotal(self, total: int) -> None:
        """Change the bar's total (never below what is already done)."""
        self.bar.total = max(self.done, total)
        self.bar.refresh()

    def close(self) -> None:
        """Close the bar."""
        self.bar.close()
