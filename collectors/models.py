"""Models to measure: architecture presets with random weights, or pretrained checkpoints.

Decode latency depends on the architecture (layers, width, heads, vocabulary, attention
kind), the dtype and the sequence length, not on the values of the weights. The presets
therefore rebuild the public checkpoints' architectures from their configuration numbers
and initialise them randomly: no download, no hub access, identical weights for a given
``seed`` on every backend (they are drawn on the CPU before the move to the device).
When real weights are wanted, ``weights="pretrained"`` loads a hub id or a local
directory with ``from_pretrained``.

Generation with these models must produce exactly the requested number of tokens. Every
loaded model gets a clean greedy :class:`~transformers.GenerationConfig` whose
``pad_token_id`` is set (no warning per call) and whose ``eos_token_id`` is kept, so that
the engines can *suppress* the end-of-sequence token (``min_new_tokens`` in
``generate``, a masked logit in the explicit loop) rather than silently emit it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    BloomConfig,
    GenerationConfig,
    GPT2Config,
    OPTConfig,
    PretrainedConfig,
    PreTrainedModel,
)

from ._dtypes import DTYPES, torch_dtype
from .backends import Backend

__all__ = [
    "DTYPES",
    "LoadedModel",
    "ModelPreset",
    "PRESETS",
    "WEIGHTS",
    "load_model",
    "make_prompt",
    "torch_dtype",
]

WEIGHTS: tuple[str, ...] = ("random", "pretrained")

_CONFIG_CLASSES: dict[str, type[PretrainedConfig]] = {
    "gpt2": GPT2Config,
    "bloom": BloomConfig,
    "opt": OPTConfig,
}


@dataclass(frozen=True)
class ModelPreset:
    """An architecture to build with random weights.

    ``config_kwargs`` are the numbers of the public checkpoint named by ``hub_id``
    (layers, hidden size, heads, vocabulary, positions, special tokens); anything not
    given takes the config class's default, which for these families is the value of
    the original checkpoints (e.g. GELU activation for GPT-2, ReLU for OPT).
    """

    name: str
    family: str
    config_kwargs: Mapping[str, Any] = field(default_factory=dict)
    hub_id: str | None = None

    def config(self) -> PretrainedConfig:
        """Build a fresh config object (it allocates no weights)."""
        return _CONFIG_CLASSES[self.family](**dict(self.config_kwargs))

    @property
    def max_positions(self) -> int | None:
        """Longest sequence the position table allows; ``None`` for ALiBi (BLOOM)."""
        return _max_positions(self.config())


def _gpt2(name: str, n_layer: int, n_embd: int, n_head: int, hub_id: str) -> ModelPreset:
    return ModelPreset(
        name,
        "gpt2",
        {
            "n_layer": n_layer,
            "n_embd": n_embd,
            "n_head": n_head,
            "vocab_size": 50257,
            "n_positions": 1024,
            "bos_token_id": 50256,
            "eos_token_id": 50256,
        },
        hub_id,
    )


def _opt(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    ffn: int,
    proj: int,
    norm_before: bool,
    hub_id: str | None,
    vocab: int = 50272,
) -> ModelPreset:
    return ModelPreset(
        name,
        "opt",
        {
            "num_hidden_layers": layers,
            "hidden_size": hidden,
            "num_attention_heads": heads,
            "ffn_dim": ffn,
            "word_embed_proj_dim": proj,
            "do_layer_norm_before": norm_before,
            "vocab_size": vocab,
            "max_position_embeddings": 2048,
            "pad_token_id": 1,
            "bos_token_id": 2,
            "eos_token_id": 2,
        },
        hub_id,
    )


def _bloom(
    name: str, layers: int, hidden: int, heads: int, hub_id: str | None, vocab: int = 250880
) -> ModelPreset:
    return ModelPreset(
        name,
        "bloom",
        {
            "n_layer": layers,
            "hidden_size": hidden,
            "n_head": heads,
            "vocab_size": vocab,
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 3,
        },
        hub_id,
    )


# The tiny presets keep each family's attention kind (learned absolute positions for
# GPT-2 and OPT, ALiBi for BLOOM) at 2 layers x 64 wide, so tests and smoke runs take
# milliseconds; their position tables are long enough for realistic budget grids.
_TINY_GPT2 = ModelPreset(
    "tiny-gpt2",
    "gpt2",
    {
        "n_layer": 2,
        "n_embd": 64,
        "n_head": 4,
        "vocab_size": 1000,
        "n_positions": 2048,
        "bos_token_id": 999,
        "eos_token_id": 999,
    },
)

PRESETS: dict[str, ModelPreset] = {
    preset.name: preset
    for preset in (
        _gpt2("distilgpt2", 6, 768, 12, "distilbert/distilgpt2"),
        _gpt2("gpt2", 12, 768, 12, "openai-community/gpt2"),
        _gpt2("gpt2-medium", 24, 1024, 16, "openai-community/gpt2-medium"),
        _gpt2("gpt2-large", 36, 1280, 20, "openai-community/gpt2-large"),
        _bloom("bloom-560m", 24, 1024, 16, "bigscience/bloom-560m"),
        _opt("opt-125m", 12, 768, 12, 3072, 768, True, "facebook/opt-125m"),
        _opt("opt-350m", 24, 1024, 16, 4096, 512, False, "facebook/opt-350m"),
        _TINY_GPT2,
        _bloom("tiny-bloom", 2, 64, 4, None, vocab=1000),
        _opt("tiny-opt", 2, 64, 4, 256, 64, True, None, vocab=1000),
    )
}
"""Architecture presets by name; values are :class:`ModelPreset`."""


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for generation, with what the engines and the trial table need.

    ``max_positions`` is the size of the position table, ``None`` for position-free
    attention such as BLOOM's ALiBi; a generation needs :func:`positions_used` of them.
    ``eos_token_ids`` are the end-of-sequence ids the engines suppress.
    ``attn_implementation`` is the attention implementation the model runs
    (``eager``, ``sdpa``, ...), as transformers resolved it.
    """

    model: PreTrainedModel
    label: str
    vocab_size: int
    max_positions: int | None
    weights: str
    dtype: str = "float32"
    eos_token_ids: tuple[int, ...] = ()
    attn_implementation: str | None = None

    @property
    def device(self) -> torch.device:
        """Where the weights live."""
        return next(self.model.parameters()).device


def _resolve_device(device: str | torch.device | Backend) -> torch.device:
    if isinstance(device, Backend):
        return device.torch_device
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"invalid device {device!r}: {exc}") from None


def _as_ids(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    return (int(value),)


def positions_used(prompt_tokens: int, budget: int) -> int:
    """Positions a generation of ``budget`` tokens after ``prompt_tokens`` feeds the model.

    The prefill feeds the prompt and yields the first new token; each later step feeds
    the token before it. The last generated token is returned, never fed back, so the
    position table must hold ``prompt_tokens + budget - 1`` positions, not one more.

    Examples
    --------
    >>> positions_used(65, 960)  # fits a 1,024-position model (positions 0 to 1,023)
    1024
    """
    return prompt_tokens + budget - 1


def _max_positions(config: PretrainedConfig) -> int | None:
    for attribute in ("n_positions", "max_position_embeddings"):
        value = getattr(config, attribute, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _build_random(name: str, seed: int, attn: dict[str, str]) -> PreTrainedModel:
    preset = PRESETS.get(name)
    if preset is None:
        raise ValueError(
            f"unknown model preset {name!r}; presets are {', '.join(PRESETS)} "
            "(for a hub id or a local directory pass weights='pretrained')"
        )
    # fork_rng keeps the caller's global RNG state untouched by the seeded init.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return AutoModelForCausalLM.from_config(preset.config(), **attn)


def _load_pretrained(name: str, dtype: torch.dtype, attn: dict[str, str]) -> PreTrainedModel:
    try:
        return AutoModelForCausalLM.from_pretrained(name, dtype=dtype, **attn)
    except OSError as exc:
        where = (
            "local directory"
            if os.path.isdir(name)
            else "hub id (or a directory that does not exist)"
        )
        raise ValueError(f"could not load pretrained model {name!r} as a {where}: {exc}") from exc


def load_model(
    name: str,
    *,
    dtype: str = "float32",
    device: str | torch.device | Backend = "cpu",
    weights: str = "random",
    seed: int = 0,
    label: str | None = None,
    attn_implementation: str | None = None,
) -> LoadedModel:
    """Build or load a causal LM, in eval mode, on ``device`` in ``dtype``.

    ``weights="random"``: ``name`` is a key of :data:`PRESETS`; the model is built from
    the preset's config with ``AutoModelForCausalLM.from_config`` under
    ``torch.manual_seed(seed)`` (the global RNG state is restored afterwards), in
    float32 on the CPU, then cast and moved, so a seed gives the same weights up to
    rounding in every dtype and on every backend.

    ``weights="pretrained"``: ``name`` is a hub id or a local directory written by
    ``save_pretrained``; weights are loaded in ``dtype``.

    Every loaded model gets a clean greedy generation config whose end-of-sequence
    ids are kept, so that the engines can suppress them.

    Parameters
    ----------
    name : str
        A preset name (``weights="random"``), or a hub id or a local directory
        (``weights="pretrained"``).
    dtype : str, default "float32"
        ``float32``, ``float16`` or ``bfloat16``.
    device : str, torch.device or Backend, default "cpu"
        Where the weights go.
    weights : str, default "random"
        ``"random"`` or ``"pretrained"``.
    seed : int, default 0
        Seed of the random weights.
    label : str, optional
        What the trial table's ``model`` column will say (default: the preset name,
        the directory's base name, or the hub id).
    attn_implementation : str, optional
        The attention implementation (``"eager"``, ``"sdpa"``, ...), passed to
        ``from_config`` or ``from_pretrained``; default: the model's.

    Returns
    -------
    LoadedModel
        The model with its label, vocabulary size, position limit and EOS ids.

    Raises
    ------
    ValueError
        An unknown preset, dtype, weights kind or device, or a checkpoint that cannot
        be loaded.

    See Also
    --------
    run_generation : generate and time exactly ``budget`` tokens with it.

    Examples
    --------
    >>> loaded = load_model("tiny-gpt2", seed=1)
    >>> loaded.label, loaded.max_positions, loaded.eos_token_ids
    ('tiny-gpt2', 2048, (999,))
    >>> load_model("tiny-gpt2", attn_implementation="eager").attn_implementation
    'eager'
    """
    if weights not in WEIGHTS:
        raise ValueError(f"unknown weights {weights!r}; expected one of {WEIGHTS}")
    target_dtype = torch_dtype(dtype)
    target_device = _resolve_device(device)
    attn = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if weights == "random":
        model = _build_random(name, seed, attn)
        default_label = name
    else:
        model = _load_pretrained(name, target_dtype, attn)
        default_label = os.path.basename(os.path.normpath(name)) if os.path.isdir(name) else name
    # transformers wraps `to` in a decorator whose signature mypy misreads.
    model = model.to(device=target_device, dtype=target_dtype)  # type: ignore[call-arg]
    model.eval()
    eos_ids = _set_greedy_generation(model)
    config = model.config
    return LoadedModel(
        model=model,
        label=label or default_label,
        vocab_size=int(config.vocab_size),
        max_positions=_max_positions(config),
        weights=weights,
        dtype=dtype,
        eos_token_ids=eos_ids,
        attn_implementation=getattr(config, "_attn_implementation", None),
    )


def _set_greedy_generation(model: PreTrainedModel) -> tuple[int, ...]:
    """Give ``model`` a clean greedy generation config; return its end-of-sequence ids.

    A checkpoint's own config may ask for sampling or beam search, or carry a
    ``max_length`` that would cap the budget.
    """
    config = model.config
    eos_ids = _as_ids(config.eos_token_id)
    if not eos_ids and model.generation_config is not None:
        eos_ids = _as_ids(model.generation_config.eos_token_id)
    pad_id = (
        config.pad_token_id if config.pad_token_id is not None else (eos_ids[0] if eos_ids else 0)
    )
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id,
        eos_token_id=list(eos_ids) if len(eos_ids) > 1 else (eos_ids[0] if eos_ids else None),
        pad_token_id=pad_id,
        do_sample=False,
        num_beams=1,
    )
    return eos_ids


def make_prompt(prompt_tokens: int, vocab_size: int, *, seed: int = 0) -> torch.Tensor:
    """Draw a deterministic prompt of shape ``(1, prompt_tokens)`` on the CPU.

    Ids are drawn uniformly from ``[4, vocab_size - 1)`` with a private generator seeded
    by ``seed``: the presets keep their special tokens (pad, bos, eos, unk) at ids 0-3
    or at the last id, and a pad id inside the prompt would make ``generate`` infer
    padding where there is none.
    """
    if isinstance(prompt_tokens, bool) or not isinstance(prompt_tokens, int) or prompt_tokens < 1:
        raise ValueError(f"prompt_tokens must be a positive integer, got {prompt_tokens!r}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 6:
        raise ValueError(f"vocab_size must be an integer >= 6, got {vocab_size!r}")
    generator = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(
        4, vocab_size - 1, (1, prompt_tokens), generator=generator, dtype=torch.long
    )
