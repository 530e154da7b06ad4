"""Serving endpoints as backends: any OpenAI-compatible server measured like a model.

A spec with an ``endpoint`` table (:mod:`collectors.endpoint._config`) sends every
generation of its sweep to a server (vLLM, SGLang, llama.cpp, Ollama, LM Studio, TGI,
``transformers serve``) instead of running a model in this process; the schedule,
warm-ups, resume, ``--max-seconds``, the progress bar and ``regimes refine`` are the
in-process collectors'. The pieces: the HTTP client and its timing
(:mod:`~collectors.endpoint._client`), the server's identity
(:mod:`~collectors.endpoint._probe`), calibrated prompts
(:mod:`~collectors.endpoint._prompt`), the session runner
(:mod:`~collectors.endpoint._runner`) and the provenance in ``meta.json``
(:mod:`~collectors.endpoint._provenance`).
"""
