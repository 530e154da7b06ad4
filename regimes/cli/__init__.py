"""The ``regimes`` command line (also ``python -m regimes``)."""

from regimes.cli._main import main

__all__ = ["main"]
