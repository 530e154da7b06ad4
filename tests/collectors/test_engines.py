"""Engines: exact budgets, identical greedy tokens, instrumentation invariants, errors.

The tiny presets' default initialisation (std 0.02) makes a greedy decoder repeat one
token, and a test comparing constant sequences could not tell a correct engine from a
broken one. The fixture therefore redraws every weight matrix from N(0, 0.3^2) with a
fixed seed (a synthetic test model, not a preset): its greedy continuations vary from
step to step, so they depend on the whole context.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from collectors.backends import CpuBackend, MpsBackend
from collectors.engines import ENGINES, BudgetMismatch, TrialTiming, run_generation
from collectors.models import PRESETS, load_model, make_prompt

FAMILIES = ("tiny-gpt2", "tiny-bloom", "tiny-opt")
PROMPT = 8


def _diverse(name: str, dtype: str = "float32"):
    loaded = load_model(name, dtype=dtype)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in loaded.model.parameters():
            if parameter.dim() == 2:
                draw = torch.randn(parameter.shape, generator=generator) * 0.3
                parameter.copy_(draw.to(parameter.dtype))
    return loaded


@pytest.fixture(scope="module")
def models():
    return {name: _diverse(name) for name in FAMILIES}


@pytest.fixture(scope="module")
def prompt():
    return make_prompt(PROMPT, 1000, seed=5)


class CountingCpu(CpuBackend):
    def __init__(self):
        super().__init__()
        self.syncs = 0

    def synchronize(self):
        self.syncs += 1


cpu = CpuBackend()


def _forward_lengths(model, run):
    """Sequence lengths the model's forward received while ``run()`` executed."""
    lengths: list[int] = []

    def record(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        lengths.append(int(ids.shape[1]))

    handle = model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        run()
    finally:
        handle.remove()
    return lengths


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("budget", [1, 2, 7])
def test_exact_budget(models, prompt, engine, use_cache, budget):
    timing = run_generation(
        models["tiny-gpt2"], cpu, prompt, budget=budget, use_cache=use_cache, engine=engine
    )
    assert isinstance(timing, TrialTiming)
    assert timing.new_tokens == budget and timing.tokens.shape == (1, budget)
    assert timing.latency_s > 0
    assert timing.prefill_s is None and timing.decode_s is None and timing.step_s is None


@pytest.mark.parametrize("name", FAMILIES)
def test_engines_and_cache_modes_yield_identical_tokens(models, prompt, name):
    results = {
        (engine, use_cache): run_generation(
            models[name], cpu, prompt, budget=24, use_cache=use_cache, engine=engine
        ).tokens
        for engine in ENGINES
        for use_cache in (True, False)
    }
    reference = results[("generate", True)]
    assert len(set(reference[0].tolist())) > 3, "test model too degenerate to discriminate"
    for key, tokens in results.items():
        assert torch.equal(tokens, reference), key


@pytest.mark.parametrize("engine", ENGINES)
def test_forward_sees_the_cache_or_the_whole_sequence(models, prompt, engine):
    model = models["tiny-opt"]
    budget = 5

    def run(use_cache):
        return lambda: run_generation(
            model, cpu, prompt, budget=budget, use_cache=use_cache, engine=engine
        )

    assert _forward_lengths(model.model, run(True)) == [PROMPT] + [1] * (budget - 1)
    assert _forward_lengths(model.model, run(False)) == [PROMPT + k for k in range(budget)]


@pytest.mark.parametrize("engine", ENGINES)
def test_eos_is_suppressed_not_emitted(models, prompt, engine):
    base = models["tiny-gpt2"]
    natural = run_generation(base, cpu, prompt, budget=12, use_cache=True, engine="loop").tokens
    # Declare the model's own favourite first token to be EOS: an engine that does not
    # suppress it would emit it at once (loop) or stop after one token (generate).
    eos = int(natural[0, 0])
    generation_config = base.model.generation_config
    original_eos = generation_config.eos_token_id
    generation_config.eos_token_id = eos
    try:
        loaded = dataclasses.replace(base, eos_token_ids=(eos,))
        timing = run_generation(loaded, cpu, prompt, budget=12, use_cache=True, engine=engine)
    finally:
        generation_config.eos_token_id = original_eos
    assert timing.new_tokens == 12
    assert eos not in timing.tokens[0].tolist()
    assert not torch.equal(timing.tokens, natural)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("budget", [1, 9])
def test_instrumented_invariants(models, prompt, engine, use_cache, budget):
    loaded = models["tiny-bloom"]
    plain = run_generation(loaded, cpu, prompt, budget=budget, use_cache=use_cache, engine=engine)
    timed = run_generation(
        loaded, cpu, prompt, budget=budget, use_cache=use_cache, engine=engine, instrument=True
    )
    assert torch.equal(plain.tokens, timed.tokens)
    assert len(timed.step_s) == timed.new_tokens == budget
    assert all(step > 0 for step in timed.step_s)
    assert timed.prefill_s == timed.step_s[0]
    assert timed.decode_s == pytest.approx(sum(timed.step_s[1:]), abs=1e-12)
    assert abs(timed.prefill_s + timed.decode_s - timed.latency_s) <= 1e-6 + 0.01 * timed.latency_s
    if budget == 1:
        assert timed.decode_s == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_device_is_synchronised_around_the_clock_and_per_step(models, prompt, engine):
    backend = CountingCpu()
    run_generation(models["tiny-gpt2"], backend, prompt, budget=6, use_cache=True, engine=engine)
    assert backend.syncs == 2
    backend.syncs = 0
    run_generation(
        models["tiny-gpt2"],
        backend,
        prompt,
        budget=6,
        use_cache=True,
        engine=engine,
        instrument=True,
    )
    assert backend.syncs == 2 + 6


def test_early_stop_raises_budget_mismatch(models, prompt, monkeypatch):
    loaded = models["tiny-gpt2"]
    real_generate = loaded.model.generate

    def stops_two_early(*args, **kwargs):
        return real_generate(*args, **kwargs)[:, :-2]

    monkeypatch.setattr(loaded.model, "generate", stops_two_early)
    with pytest.raises(BudgetMismatch) as info:
        run_generation(loaded, cpu, prompt, budget=5, use_cache=True)
    assert (info.value.budget, info.value.new_tokens, info.value.engine) == (5, 3, "generate")
    assert "3 new token(s) for a budget of 5" in str(info.value)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("engine", ENGINES)
def test_half_precision_on_cpu(prompt, dtype, engine):
    loaded = _diverse("tiny-gpt2", dtype=dtype)
    for use_cache in (True, False):
        timing = run_generation(
            loaded, cpu, prompt, budget=6, use_cache=use_cache, engine=engine, instrument=True
        )
        assert timing.new_tokens == 6 and len(timing.step_s) == 6
        assert int(timing.tokens.max()) < loaded.vocab_size


def test_invalid_calls_are_named(models, prompt):
    loaded = models["tiny-gpt2"]
    cases = [
        (dict(budget=4, engine="beam"), "unknown engine"),
        (dict(budget=0), "budget"),
        (dict(budget=True), "budget"),
        (dict(budget=2048), "exceeds"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            run_generation(loaded, cpu, prompt, use_cache=True, **kwargs)
    with pytest.raises(ValueError, match="shape"):
        run_generation(loaded, cpu, prompt[0], budget=2, use_cache=True)
    with pytest.raises(ValueError, match="torch.long"):
        run_generation(loaded, cpu, prompt.float(), budget=2, use_cache=True)
    with pytest.raises(ValueError, match="use_cache"):
        run_generation(loaded, cpu, prompt, budget=2, use_cache=None)
    with pytest.raises(ValueError, match="backend is 'mps'"):
        run_generation(loaded, MpsBackend(), prompt, budget=2, use_cache=True)


def test_long_sequences_run_without_position_limit_on_alibi(models):
    # BLOOM has no position table: a sequence longer than GPT-2's 1024 is allowed.
    loaded = models["tiny-bloom"]
    timing = run_generation(
        loaded, cpu, make_prompt(1100, 1000), budget=2, use_cache=True, engine="loop"
    )
    assert timing.new_tokens == 2


@pytest.fixture(scope="module")
def accelerator():
    from collectors.backends import available_backends, get_backend

    names = [name for name in available_backends() if name != "cpu"]
    if not names:
        pytest.skip("no CUDA or MPS device in this process")
    return get_backend(names[0])


@pytest.mark.gpu
@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("use_cache", [True, False])
def test_accelerator_engines_agree_and_split_latency(accelerator, prompt, name, use_cache):
    loaded = _diverse(name)
    loaded = dataclasses.replace(loaded, model=loaded.model.to(accelerator.torch_device))
    memory = accelerator.memory()
    assert set(memory) == {"mem_allocated_bytes", "mem_driver_bytes"}
    assert (
        memory["mem_allocated_bytes"] > 0
        and memory["mem_driver_bytes"] >= memory["mem_allocated_bytes"]
    )
    runs = {
        engine: run_generation(
            loaded, accelerator, prompt, budget=16, use_cache=use_cache, engine=engine
        )
        for engine in ENGINES
    }
    assert torch.equal(runs["generate"].tokens, runs["loop"].tokens)
    assert runs["generate"].tokens.device.type == accelerator.torch_device.type
    for engine in ENGINES:
        timed = run_generation(
            loaded,
            accelerator,
            prompt,
            budget=16,
            use_cache=use_cache,
            engine=engine,
            instrument=True,
        )
        assert torch.equal(timed.tokens, runs[engine].tokens)
        assert len(timed.step_s) == 16 and all(step > 0 for step in timed.step_s)
        assert (
            abs(timed.prefill_s + timed.decode_s - timed.latency_s) <= 1e-6 + 0.01 * timed.latency_s
        )


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_accelerator_half_precision(accelerator, prompt, dtype):
    if not accelerator.supports_dtype(dtype):
        pytest.skip(f"{accelerator.device_name()} does not support {dtype}")
    loaded = load_model("tiny-opt", dtype=dtype, device=accelerator)
    for engine in ENGINES:
        timing = run_generation(
            loaded, accelerator, prompt, budget=8, use_cache=True, engine=engine
        )
        assert timing.new_tokens == 8


class FakeClock:
    """Time that passes only while the model computes (``tick`` per forward pass) or
    while the injected delay waits, so an injected slowdown has an exact answer."""

    def __init__(self, tick: float = 0.01):
        self.t = 100.0
        self.tick = tick
        self.waits: list[float] = []

    def now(self) -> float:
        return self.t

    def wait_until(self, deadline: float) -> None:
        self.waits.append(deadline - self.t)
        self.t = max(self.t, deadline)

    def forward(self, module, args, kwargs) -> None:
        self.t += self.tick


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("factor", [1.0, 3.0])
def test_injected_slowdown_stretches_every_step_by_its_factor(
    models, prompt, monkeypatch, engine, use_cache, factor
):
    from collectors import engines

    clock = FakeClock()
    monkeypatch.setattr(engines, "perf_counter", clock.now)
    monkeypatch.setattr(engines, "_wait_until", clock.wait_until)
    loaded = models["tiny-gpt2"]
    handle = loaded.model.register_forward_pre_hook(clock.forward, with_kwargs=True)
    try:
        timing = run_generation(
            loaded,
            cpu,
            prompt,
            budget=6,
            use_cache=use_cache,
            engine=engine,
            instrument=True,
            slowdown=factor,
        )
    finally:
        handle.remove()
    assert timing.latency_s == pytest.approx(factor * 6 * clock.tick)
    assert timing.step_s == pytest.approx([factor * clock.tick] * 6)
    assert clock.waits == ([] if factor == 1.0 else pytest.approx([2 * clock.tick] * 6))


@pytest.mark.parametrize("engine", ENGINES)
def test_injected_slowdown_syncs_once_per_step(models, prompt, engine):
    backend = CountingCpu()
    timing = run_generation(
        models["tiny-gpt2"], backend, prompt, budget=5, use_cache=True, engine=engine, slowdown=2.0
    )
    assert backend.syncs == 2 + 5 and timing.new_tokens == 5 and timing.step_s is None


def test_wait_until_reaches_its_deadline():
    from time import perf_counter

    from collectors.engines import _wait_until

    for delay in (0.0, 5e-4, 4e-3):
        deadline = perf_counter() + delay
        _wait_until(deadline)
        assert perf_counter() >= deadline


@pytest.mark.parametrize("bad", [0.5, 0, True, "3", float("nan"), float("inf")])
def test_a_slowdown_below_one_is_refused(models, prompt, bad):
    with pytest.raises(ValueError, match="slowdown must be a number >= 1"):
        run_generation(models["tiny-gpt2"], cpu, prompt, budget=2, use_cache=True, slowdown=bad)


@pytest.mark.parametrize("family", ["tiny-gpt2", "tiny-opt"])
@pytest.mark.parametrize("engine", ENGINES)
def test_the_last_position_is_usable_because_the_last_token_is_never_fed(
    family, engine, monkeypatch
):
    """prompt + budget may be one more than the position table: positions 0..15 of 16."""
    tiny = PRESETS[family]
    key = "n_positions" if "n_positions" in tiny.config_kwargs else "max_position_embeddings"
    short = dataclasses.replace(tiny, name="short", config_kwargs={**tiny.config_kwargs, key: 16})
    monkeypatch.setitem(PRESETS, "short", short)
    loaded = load_model("short")
    assert loaded.max_positions == 16
    prompt = make_prompt(4, loaded.vocab_size, seed=5)
    for use_cache in (True, False):
        timing = run_generation(loaded, cpu, prompt, budget=13, use_cache=use_cache, engine=engine)
        assert timing.new_tokens == 13
    with pytest.raises(ValueError, match=r"4\) \+ budget \(14\) - 1 = 17 positions.*13 or less"):
        run_generation(loaded, cpu, prompt, budget=14, use_cache=True, engine=engine)
