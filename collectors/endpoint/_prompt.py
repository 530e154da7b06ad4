"""Prompts of exactly ``prompt_tokens`` tokens, counted by the server's own tokenizer.

The client has no tokenizer of the served model, so a prompt is calibrated: a seeded
sequence of common English words (most are one token in any BPE vocabulary), cut to
``k`` words, is sent with ``max_tokens = 1`` and the server's ``usage.prompt_tokens``
read back; ``k`` moves by the difference until the count is exact. For the chat API the
count includes the chat template's own tokens, so the message is shorter. Every trial
checks its count again.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._client import CaseFailure

__all__ = ["WORDS", "calibrate_prompt", "prompt_words"]

WORDS: tuple[str, ...] = tuple(
    (
        "the of and to in a is that for it as was with be by on not he this are or his "
        "from at which but have an they you were her she there been one all we their has "
        "would when if so no what can out more other will up time about said into some them "
        "only new could these may first then do any like my now over such our man me even "
        "most made after also did many before must through back years where much your way "
        "well down should because each just those people how too little state good very make"
    ).split()
)
"""Common words that are one token each in the usual BPE vocabularies."""

_MAX_PROBES = 16


def prompt_words(seed: int, n: int) -> list[str]:
    """Return the first ``n`` words of the seeded prompt sequence."""
    rng = np.random.default_rng((seed, 0x5EED))
    return [WORDS[i] for i in rng.integers(0, len(WORDS), size=n)]


def calibrate_prompt(count: Callable[[str], int | None], target: int, seed: int) -> str:
    """Find the prompt of ``target`` tokens as ``count`` (the server) counts them.

    Parameters
    ----------
    count : callable
        Returns the server's prompt-token count of a text (``None``: not reported).
    target : int
        The prompt length wanted.
    seed : int
        The spec's seed (which words).

    Returns
    -------
    str
        The prompt text.

    Raises
    ------
    CaseFailure
        The server reports no count, or no number of words gives exactly ``target``.

    Examples
    --------
    >>> calibrate_prompt(lambda text: 3 + len(text.split()), 10, seed=0).count(" ")
    6
    """
    words = prompt_words(seed, 4 * target + 16)
    seen: dict[int, int] = {}
    k = max(1, target)
    for _ in range(_MAX_PROBES):
        got = count(" ".join(words[:k]))
        if got is None:
            raise CaseFailure(
                "the server reports no usage.prompt_tokens, so a prompt of "
                f"{target} tokens cannot be checked"
            )
        seen[k] = got
        if got == target:
            return " ".join(words[:k])
        if got > target and k == 1:
            raise CaseFailure(
                f"one word already makes a prompt of {got} tokens (the chat template's own "
                f"tokens included), more than prompt_tokens = {target}; use a longer prompt"
            )
        step = target - got
        nxt = min(max(1, k + step), len(words))
        if nxt in seen:  # the counts jump over the target between two neighbours
            nxt = k + (1 if step > 0 else -1)
        if nxt in seen or nxt < 1:
            break
        k = nxt
    raise CaseFailure(
        f"no prompt of exactly {target} tokens by the server's count (words -> tokens: "
        f"{dict(sorted(seen.items()))})"
    )
