"""Deprecations: parameters that leave a function's signature, with one release's warning.

Modelled on polars' ``polars._utils.deprecation``: a decorator takes the deprecated
keyword arguments out of a call before the function sees them and issues one
:class:`DeprecationWarning` that names them, says why, and gives the release they go
away in; :func:`renamed` answers a module's old name for a class (PEP 562
``__getattr__``) with the new one and the same warning. The warning points at the
caller's line, not at this package: the first frame outside :mod:`regimes` (polars'
``find_stacklevel``), so that the warning names the line a user has to change.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = [
    "REMOVED_IN",
    "deprecate_parameters",
    "find_stacklevel",
    "issue_deprecation_warning",
    "renamed",
]

REMOVED_IN = "0.2"
"""The release in which the parameters deprecated in this one (0.1) are removed."""

_F = TypeVar("_F", bound=Callable[..., Any])

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def find_stacklevel() -> int:
    """Return the ``stacklevel`` of the first frame outside the ``regimes`` package.

    Returns
    -------
    int
        The level to pass to :func:`warnings.warn` so that the warning names the
        caller's file and line.
    """
    frame = inspect.currentframe()
    level = 0
    try:
        while frame is not None:
            if not os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
                break
            frame = frame.f_back
            level += 1
    finally:
        del frame  # a frame reference held here would keep every local of the stack alive
    return level


def issue_deprecation_warning(message: str, *, removed_in: str = REMOVED_IN) -> None:
    """Warn that something is deprecated and name the release it is removed in.

    Parameters
    ----------
    message : str
        What is deprecated and what to do instead.
    removed_in : str, default :data:`REMOVED_IN`
        The release that removes it.

    Warns
    -----
    DeprecationWarning
        Always, attributed to the first frame outside the package.
    """
    warnings.warn(
        f"{message} (deprecated; removed in {removed_in})",
        DeprecationWarning,
        stacklevel=find_stacklevel(),
    )


def deprecate_parameters(
    *names: str, reason: str, removed_in: str = REMOVED_IN
) -> Callable[[_F], _F]:
    """Accept keyword arguments no longer in a function's signature, with a warning.

    The decorated function's signature (``inspect.signature``, ``help()``) is the new
    one; a call that still passes one of ``names`` gets a :class:`DeprecationWarning`
    and the argument is dropped, whatever its value.

    Parameters
    ----------
    *names : str
        The deprecated keyword parameters.
    reason : str
        Why they go, in a clause: e.g. ``"the speedup's intervals draw nothing"``.
    removed_in : str, default :data:`REMOVED_IN`
        The release that stops accepting them (a ``TypeError`` from then on).

    Returns
    -------
    callable
        The decorator.

    Examples
    --------
    >>> import warnings
    >>> @deprecate_parameters("n_boot", reason="nothing is resampled")
    ... def mean(values, *, level=0.95):
    ...     return sum(values) / len(values)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     mean([1, 2, 3], n_boot=100)
    2.0
    >>> str(caught[0].message)
    'mean(): n_boot does nothing: nothing is resampled; omit it (deprecated; removed in 0.2)'
    """

    def decorate(function: _F) -> _F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = [name for name in names if name in kwargs]
            if given:
                for name in given:
                    del kwargs[name]
                what = " and ".join(given)
                verb = "does" if len(given) == 1 else "do"
                issue_deprecation_warning(
                    f"{function.__name__}(): {what} {verb} nothing: {reason}; omit "
                    f"{'it' if len(given) == 1 else 'them'}",
                    removed_in=removed_in,
                )
            return function(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def renamed(
    module: str, names: Mapping[str, str], name: str, *, removed_in: str = REMOVED_IN
) -> Any:
    """Return what an old name of ``module`` now names, with a deprecation warning.

    For a module's ``__getattr__`` (PEP 562), which Python calls only for a name the
    module does not define: the old names are kept out of the module and its
    ``__all__``, so ``from module import *`` and ``dir()`` show only the new ones.

    Parameters
    ----------
    module : str
        The module's ``__name__``.
    names : mapping of str to str
        Each old name and the name that replaces it.
    name : str
        The name asked for.
    removed_in : str, default :data:`REMOVED_IN`
        The release that removes the old names.

    Returns
    -------
    object
        The new name's value (looked up in ``module``).

    Raises
    ------
    AttributeError
        ``name`` is no old name of ``module``.

    Warns
    -----
    DeprecationWarning
        For every old name asked for, naming its replacement.
    """
    new = names.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    issue_deprecation_warning(
        f"{module}.{name} is renamed {new}; use {module}.{new}", removed_in=removed_in
    )
    return getattr(sys.modules[module], new)
