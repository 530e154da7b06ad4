"""The two exceptions every part of :mod:`regimes` raises or warns with."""

from __future__ import annotations

__all__ = ["RegimesInputError", "RegimesWarning"]


class RegimesInputError(ValueError):
    """Input that the analysis cannot use; the message names the problem and the fix.

    A subclass of :class:`ValueError`. The ``regimes`` command prints it as one line on
    stderr and exits with status 2.

    See Also
    --------
    RegimesWarning : input used only after a documented change.

    Examples
    --------
    >>> import polars as pl, regimes
    >>> try:
    ...     regimes.detect_regimes(pl.DataFrame({"budget": [1]}))
    ... except regimes.RegimesInputError as exc:
    ...     print(exc)  # doctest: +ELLIPSIS
    the trial table lacks required column(s): 'latency_s'; it has ['budget']; rename ...
    """


class RegimesWarning(UserWarning):
    """Input the analysis could use only after a documented change (rows dropped, say).

    See Also
    --------
    RegimesInputError : input that cannot be used at all.

    Examples
    --------
    >>> import warnings, regimes
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warnings.warn("dropped 2 exact duplicate row(s)", regimes.RegimesWarning)
    >>> caught[0].category.__name__
    'RegimesWarning'
    """
