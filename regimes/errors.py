"""The two exceptions every part of :mod:`regimes` raises or warns with."""

from __future__ import annotations

__all__ = ["RegimesInputError", "RegimesWarning"]


class RegimesInputError(ValueError):
    """Input that the analysis cannot use; the message names the problem and the fix."""


class RegimesWarning(UserWarning):
    """Input the analysis could use only after a documented change (rows dropped, say)."""
