"""Model presets, loading (random and pretrained), dtypes, prompts.

The large presets are checked without allocating their weights: the config numbers
against the public checkpoints' configs, and the parameter count of the model built on
the ``meta`` device against the published sizes.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from collectors.models import DTYPES, PRESETS, LoadedModel, load_model, make_prompt

# Public checkpoint configs (config.json on the hub): layers, width, heads, vocabulary,
# positions (None: ALiBi), and the published parameter count in millions.
PUBLIC = {
    "distilgpt2": (6, 768, 12, 50257, 1024, 82),
    "gpt2": (12, 768, 12, 50257, 1024, 124),
    "gpt2-medium": (24, 1024, 16, 50257, 1024, 355),
    "gpt2-large": (36, 1280, 20, 50257, 1024, 774),
    "bloom-560m": (24, 1024, 16, 250880, None, 559),
    "opt-125m": (12, 768, 12, 50272, 2048, 125),
    "opt-350m": (24, 1024, 16, 50272, 2048, 331),
}
TINY = ("tiny-gpt2", "tiny-bloom", "tiny-opt")


def _shape(config):
    return (
        config.num_hidden_layers,
        config.hidden_size,
        config.num_attention_heads,
        config.vocab_size,
    )


def test_preset_names():
    assert set(PRESETS) == set(PUBLIC) | set(TINY)
    assert DTYPES == ("float32", "float16", "bfloat16")


@pytest.mark.parametrize("name", list(PUBLIC))
def test_large_presets_match_public_checkpoints(name):
    layers, hidden, heads, vocab, positions, millions = PUBLIC[name]
    config = PRESETS[name].config()
    assert _shape(config) == (layers, hidden, heads, vocab)
    assert (
        getattr(config, "n_positions", getattr(config, "max_position_embeddings", None))
        == positions
    )
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    count = sum(p.numel() for p in model.parameters())
    assert abs(count / 1e6 - millions) < 0.01 * millions, count
    assert PRESETS[name].hub_id and PRESETS[name].hub_id.endswith(name)


def test_opt_350m_keeps_its_projection_and_post_norm():
    config = PRESETS["opt-350m"].config()
    assert config.word_embed_proj_dim == 512 and config.do_layer_norm_before is False
    assert config.ffn_dim == 4096


@pytest.mark.parametrize("name", TINY)
def test_tiny_presets_build_and_are_tiny(name):
    loaded = load_model(name)
    assert isinstance(loaded, LoadedModel)
    assert _shape(loaded.model.config) == (2, 64, 4, 1000)
    assert loaded.label == name and loaded.weights == "random" and loaded.vocab_size == 1000
    assert not loaded.model.training
    assert loaded.device == torch.device("cpu")
    assert loaded.max_positions == (None if name == "tiny-bloom" else 2048)
    generation = loaded.model.generation_config
    assert generation.pad_token_id is not None and generation.do_sample is False
    assert loaded.eos_token_ids and generation.eos_token_id == loaded.eos_token_ids[0]
    assert all(0 <= i < loaded.vocab_size for i in loaded.eos_token_ids)


def test_distilgpt2_instantiates_with_published_size():
    loaded = load_model("distilgpt2")
    count = sum(p.numel() for p in loaded.model.parameters())
    assert round(count / 1e6) == 82
    assert loaded.max_positions == 1024 and loaded.eos_token_ids == (50256,)


def test_seed_controls_weights_and_leaves_global_rng_alone():
    state = torch.get_rng_state()
    a = load_model("tiny-gpt2", seed=1).model.state_dict()
    b = load_model("tiny-gpt2", seed=1).model.state_dict()
    c = load_model("tiny-gpt2", seed=2).model.state_dict()
    assert torch.equal(state, torch.get_rng_state())
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_dtype_casts_weights_of_the_same_seed(dtype):
    reference = load_model("tiny-opt").model.state_dict()
    loaded = load_model("tiny-opt", dtype=dtype)
    assert loaded.dtype == dtype
    assert {p.dtype for p in loaded.model.parameters()} == {getattr(torch, dtype)}
    key = "model.decoder.embed_tokens.weight"
    torch.testing.assert_close(
        loaded.model.state_dict()[key].float(), reference[key], rtol=1e-2, atol=1e-3
    )


def test_invalid_arguments_are_named():
    with pytest.raises(ValueError, match="tiny-gpt2"):
        load_model("gpt5")
    with pytest.raises(ValueError, match="float64"):
        load_model("tiny-gpt2", dtype="float64")
    with pytest.raises(ValueError, match="weights"):
        load_model("tiny-gpt2", weights="trained")
    with pytest.raises(ValueError, match="device"):
        load_model("tiny-gpt2", device="gpu0")


def test_pretrained_from_a_saved_directory(tmp_path):
    original = load_model("tiny-bloom", seed=3)
    directory = tmp_path / "my-bloom"
    original.model.save_pretrained(directory)
    loaded = load_model(str(directory), weights="pretrained")
    assert loaded.weights == "pretrained" and loaded.label == "my-bloom"
    assert loaded.vocab_size == 1000 and loaded.max_positions is None
    assert loaded.eos_token_ids == original.eos_token_ids
    reference = original.model.state_dict()
    restored = loaded.model.state_dict()
    assert reference.keys() == restored.keys()
    assert all(torch.equal(reference[k], restored[k]) for k in reference)
    renamed = load_model(str(directory), weights="pretrained", dtype="bfloat16", label="bloom-x")
    assert renamed.label == "bloom-x"
    assert next(renamed.model.parameters()).dtype == torch.bfloat16


def test_pretrained_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="could not load pretrained model"):
        load_model(str(tmp_path / "nothing-here"), weights="pretrained")


def test_make_prompt_is_deterministic_and_avoids_special_ids():
    prompt = make_prompt(65, 1000, seed=7)
    assert prompt.shape == (1, 65) and prompt.dtype == torch.long
    assert torch.equal(prompt, make_prompt(65, 1000, seed=7))
    assert not torch.equal(prompt, make_prompt(65, 1000, seed=8))
    wide = make_prompt(4000, 10)
    assert int(wide.min()) == 4 and int(wide.max()) == 8
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="prompt_tokens"):
            make_prompt(bad, 1000)
    with pytest.raises(ValueError, match="vocab_size"):
        make_prompt(3, 5)


def test_preset_max_positions_agrees_with_the_loaded_model():
    for name in TINY:
        assert PRESETS[name].max_positions == load_model(name).max_positions
    assert PRESETS["gpt2-large"].max_positions == 1024
    assert PRESETS["bloom-560m"].max_positions is None
