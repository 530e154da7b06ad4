"""Build a tiny random-weight GPT-2 and a small word-level tokenizer in a folder.

The folder is what ``transformers serve`` loads: ``config.json``, the weights, a
``tokenizer.json`` and a chat template. Nothing is downloaded: the tokenizer is trained
here on the words the collectors' prompts are made of, and the weights are random
(latency depends on the architecture, not the weights). The model has no
end-of-sequence token, so a server without a way to disable the EOS stop still
generates the whole budget.

    python examples/tiny_served_model.py build/tiny-served
    transformers serve build/tiny-served --device cpu --port 8000
"""

from __future__ import annotations

import argparse
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }} "
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"
)


def build(folder: str | Path, *, n_layer: int = 2, n_embd: int = 64, seed: int = 0) -> Path:
    """Save a tiny random GPT-2 and its word-level tokenizer to ``folder``; return it."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from collectors.endpoint._prompt import WORDS

    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    core = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]", "[PAD]"])
    core.train_from_iterator([" ".join(WORDS)] * 4 + ["user: assistant:"], trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", model_max_length=1024
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(target)
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=core.get_vocab_size(),
        n_positions=1024,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=2,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = GPT2LMHeadModel(config).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(target)
    return target


def main() -> None:
    """Build the folder named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    print(build(parser.parse_args().folder))


if __name__ == "__main__":
    main()
