"""Which scaled-dot-product-attention kernels may run, and which are enabled.

torch picks a kernel for :func:`torch.nn.functional.scaled_dot_product_attention` among
those enabled by global flags (``torch.backends.cuda.enable_cudnn_sdp`` and its
siblings; the CPU honours the flash and math ones). A sweep's ``sdpa_backends`` sets
them around each generation with :func:`torch.nn.attention.sdpa_kernel`, which restores
them afterwards, and every trial records which were enabled while it ran.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from .spec import SDPA_BACKENDS

__all__ = ["allowed_sdpa_backends", "enabled_sdpa_backends"]

_KERNELS: dict[str, SDPBackend] = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}

_ENABLED: dict[str, Callable[[], bool]] = {
    "cudnn": torch.backends.cuda.cudnn_sdp_enabled,
    "flash": torch.backends.cuda.flash_sdp_enabled,
    "efficient": torch.backends.cuda.mem_efficient_sdp_enabled,
    "math": torch.backends.cuda.math_sdp_enabled,
}


def enabled_sdpa_backends() -> tuple[str, ...]:
    """List the SDPA kernels enabled now, in :data:`~collectors.spec.SDPA_BACKENDS` order."""
    return tuple(name for name in SDPA_BACKENDS if _ENABLED[name]())


@contextlib.contextmanager
def allowed_sdpa_backends(names: tuple[str, ...] | None) -> Iterator[None]:
    """Allow only the SDPA kernels ``names`` inside the block (``None``: leave them be)."""
    if names is None:
        yield
        return
    with sdpa_kernel([_KERNELS[name] for name in names]):
        yield
