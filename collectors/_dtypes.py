"""Dtype names and their torch dtypes: the one table both models and backends use."""

from __future__ import annotations

import torch

__all__ = ["DTYPES", "torch_dtype"]

DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
"""The dtypes a sweep may ask for, by the names the trial table records."""

_TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}


def torch_dtype(dtype: str) -> torch.dtype:
    """Return the :class:`torch.dtype` named ``dtype``.

    Parameters
    ----------
    dtype : str
        One of :data:`DTYPES`.

    Returns
    -------
    torch.dtype
        The matching torch dtype.

    Raises
    ------
    ValueError
        For any other name.

    Examples
    --------
    >>> torch_dtype("float16")
    torch.float16
    """
    try:
        return _TORCH_DTYPES[dtype]
    except (KeyError, TypeError):
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {DTYPES}") from None
