"""``regimes refine`` with the collectors' prober: the command line's wiring.

:mod:`regimes.cli.refine` builds the command and takes a factory of probers; this
module registers it with :func:`collectors.refine.run_prober`, built at the first probe,
so a run that is fully refined, or ``--max-generations 0``, reads back without torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from regimes.cli.refine import register as register_refine
from regimes.errors import RegimesInputError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``refine``, probing with the run's own spec, to the ``regimes`` subparsers."""
    register_refine(subparsers, prober=_RunProber)


class _RunProber:
    """The run's own prober, :func:`collectors.refine.run_prober`, built at first use.

    Building it imports the collectors' measuring code (torch and transformers); a
    refinement that probes nothing never does.
    """

    def __init__(self, run: Path):
        self.run = run
        self._prober: Any = None

    def _built(self) -> Any:
        if self._prober is None:
            try:
                from collectors.refine import run_prober
            except ImportError as exc:
                raise RegimesInputError(
                    f"probing a run needs the collectors and torch ({exc}); install them "
                    "with pip install 'regimes[collect]', or pass --max-generations 0 to "
                    "read back the probes on disk"
                ) from None
            self._prober = run_prober(self.run)
        return self._prober

    @property
    def warmup(self) -> int:
        """Warm-ups per case and fresh session, as the run's spec says."""
        return int(self._built().warmup)

    def __call__(self, requests: Any) -> Any:
        """Measure one round's requests into the run; return the rows added."""
        return self._built()(requests)
