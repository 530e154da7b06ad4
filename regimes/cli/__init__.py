"""The ``regimes`` command line (also ``python -m regimes``): see :func:`main`."""

from regimes.cli._main import main

__all__ = ["main"]
