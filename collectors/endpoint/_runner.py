"""The session runner of an endpoint: a session's plan sent to the server, trial by trial.

It is the in-process runner (:mod:`collectors._session`) with the model load replaced
by connecting to the server (its identity checked and recorded, the prompts calibrated)
and the generation by one streamed request. The schedule, warm-ups, crash safety,
deadlines, failed cases and progress events are the in-process runner's.

What stops the sweep (:class:`~collectors.endpoint._client.EndpointError`: the server
down or overloaded past its retries, a URL that is no OpenAI API, a refused key) keeps
every trial written and asks for a rerun. What fails a case is recorded in the run's
``errors`` table: a refused generation, a short generation (the server stopped before
``max_tokens``: never analysed as a full one), one longer than the budget (the server
ignores ``max_tokens``), a prompt the server counts differently.

Sessions. A session is a span of requests to one server process as far as the client
can tell: the server's identity (:mod:`collectors.endpoint._probe`) is recorded when a
session begins and checked before every generation; when it changes (a restart, an
upgrade) the session ends there, its remaining trials recorded as ``ServerRestarted``
(not run against another process), and the next session begins with the new one.

Everything the run learns about the server (its identity per session, each retry of an
HTTP 429/503, the fields it refused, whether it streams) goes to ``meta.json`` under
``endpoint_log``, and what changes how trials are measured is said once on stderr.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any

from regimes.data.io import RunWriter, read_meta
from regimes.data.runs.parts import write_text_atomically

from .._events import EventSink, ignore
from .._schedule import ScheduledTrial, iter_plan
from .._session import SessionOutcome, _never_stop, _SessionRun, drive
from .._signals import Interrupts
from .._state import RunState
from ..spec import Case, SweepSpec
from ._client import CaseFailure, EndpointClient, EndpointError, Reply
from ._probe import fingerprint, server_identity, server_label
from ._prompt import calibrate_prompt

__all__ = ["ServerRestarted", "log_event", "run_endpoint_session"]


class ServerRestarted(RuntimeError):
    """The server's identity changed within a session: a new server process."""


class ShortGeneration(RuntimeError):
    """The server stopped before the budget (recorded, never analysed as a full one)."""


class BudgetExceeded(RuntimeError):
    """The server generated more tokens than ``max_tokens`` asked for."""


class PromptMismatch(RuntimeError):
    """The server counted the prompt at another length than the case's."""


def log_event(writer: RunWriter, entry: dict[str, Any]) -> None:
    """Append ``entry`` (time-stamped) to ``meta.json``'s ``endpoint_log``, atomically."""
    path = writer.path / "meta.json"
    meta = read_meta(path)
    stamped = {**entry, "at_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    meta.setdefault("endpoint_log", []).append(stamped)
    write_text_atomically(json.dumps(meta, indent=2, default=str), path)


_SHORT = " (generations that stop early are recorded as short)"


class _Served:
    """What the generations of a session share: the calibrated prompts."""

    attn_implementation = None

    def __init__(self, prompts: dict[int, str]):
        self.prompts = prompts


class _EndpointRun(_SessionRun):
    fatal = (EndpointError, ServerRestarted)

    def __init__(self, *args: Any, client: EndpointClient):
        super().__init__(*args)
        self.client = client
        self.identity: dict[str, Any] = {}
        self.said: set[str] = set()

    def note(self, key: str, message: str, **logged: Any) -> None:
        """Say ``message`` once per session on stderr, and record it in ``meta.json``."""
        if key in self.said:
            return
        self.said.add(key)
        self.emit({"event": "note", "session": self.session, "message": message})
        log_event(self.writer, {"event": key, "session": self.session, **logged})

    def run_group(self, load_key: tuple[Any, ...], items: Iterable[ScheduledTrial]) -> bool:
        try:
            return super().run_group(load_key, items)
        except ServerRestarted as exc:
            cases = [c for c, n in self.remaining.items() if n]
            self.record_errors(cases, exc, sum(self.remaining[c] for c in cases))
            for case in cases:
                self.remaining[case] = 0
            return True

    def group_backend(self, name: str) -> None:
        return None

    def load(self, load_key: tuple[Any, ...], backend: Any) -> _Served:
        """Connect: check (or record) the session's server, calibrate the prompts."""
        self.identity = server_identity(self.client)
        self.device_names[load_key[1]] = server_label(self.identity)
        stored = _session_servers(self.writer).get(self.session)
        if stored is not None and stored != fingerprint(self.identity):
            raise ServerRestarted(
                f"the server changed since session {self.session} began (its identity is "
                "not the one recorded): its remaining trials are not run against another "
                "server process"
            )
        if stored is None:
            log_event(
                self.writer,
                {"event": "server", "session": self.session, "identity": self.identity},
            )
        lengths = sorted({c.prompt_tokens for c, n in self.remaining.items() if n})
        seed = self.spec.seed
        return _Served({n: calibrate_prompt(self.prompt_count, n, seed) for n in lengths})

    def prompt_count(self, text: str) -> int | None:
        """Ask the server to count a prompt's tokens (a one-token generation)."""
        reply = self.client.generate(text, 1)
        self.said_about(reply, None)
        return reply.prompt_tokens

    def check_server(self) -> None:
        """Raise :class:`ServerRestarted` when the server is not the session's any more."""
        now = server_identity(self.client, tuple(self.identity.get("sources", ())))
        if fingerprint(now) != fingerprint(self.identity):
            changed = sorted(k for k in now if now.get(k) != self.identity.get(k))
            changed = [k for k in changed if k not in ("headers", "sources")]
            raise ServerRestarted(
                f"the server restarted during session {self.session} (its {changed} changed): "
                "the session ends here, its remaining trials are not run against another "
                "server process; the next session begins with the new one"
            )

    def generate(
        self, loaded: Any, backend: Any, prompts: dict[int, Any], case: Case
    ) -> tuple[Reply, dict[str, Any]]:
        self.check_server()
        reply = self.client.generate(loaded.prompts[case.prompt_tokens], case.budget)
        self.said_about(reply, case)
        _check_counts(reply, case, self.client)
        return reply, {}

    def said_about(self, reply: Reply, case: Case | None) -> None:
        """Record the retries of a reply; say what changes how trials are measured."""
        for retry in reply.retries:
            log_event(
                self.writer,
                {"event": "retry", "session": self.session, "order": self.order, **retry},
            )
            where = f"budget {case.budget}" if case else "a prompt calibration"
            self.emit(
                {
                    "event": "note",
                    "session": self.session,
                    "message": f"HTTP {retry['status']} at {where}: retried after "
                    f"{retry['wait_s']:.1f} s",
                }
            )
        for name, detail in self.client.refused.items():
            self.note(
                f"refused {name}",
                f"the server refuses {name!r} ({detail[:80]}); asking without it"
                + (_SHORT if name == "ignore_eos" else ""),
                detail=detail,
            )
        if not reply.streamed:
            self.note(
                "not streaming",
                "the server does not stream: latency is end-to-end only "
                "(no prefill_s, decode_s or per-token steps)",
            )
        elif reply.step_s is None and case is not None and reply.new_tokens == case.budget:
            self.note(
                "events not per token",
                f"the server streams {reply.events} events for {reply.new_tokens} tokens: "
                "per-token steps are not recorded (prefill_s and decode_s are)",
            )

    def trial_row(
        self, item: ScheduledTrial, loaded: Any, timing: Any, observed: dict[str, Any]
    ) -> dict[str, Any]:
        row = super().trial_row(item, loaded, timing, observed)
        # The client's memory says nothing about the server; the steps are arrivals.
        return {**row, "rss_bytes": None, "instrumented": timing.step_s is not None}


def _check_counts(reply: Reply, case: Case, client: EndpointClient) -> None:
    """Refuse a generation of another length than the budget, or another prompt."""
    got, budget = reply.new_tokens, case.budget
    if got is None:
        raise CaseFailure(
            "the server reports no usage.completion_tokens and does not stream: the number "
            "of tokens generated cannot be checked"
        )
    if got < budget:
        why = (
            "it refused ignore_eos: give its own way to disable the end-of-sequence stop in "
            "endpoint.body"
            if "ignore_eos" in client.refused or not client.endpoint.ignore_eos
            else "it does not honour ignore_eos"
        )
        raise ShortGeneration(
            f"the server generated {got} of {budget} tokens (finish_reason "
            f"{reply.finish_reason!r}; {why}): recorded as short, never analysed"
        )
    if got > budget:
        raise BudgetExceeded(
            f"the server generated {got} tokens for max_tokens = {budget}: it ignores "
            "max_tokens, so the latency would be mislabelled"
        )
    if reply.prompt_tokens is not None and reply.prompt_tokens != case.prompt_tokens:
        raise PromptMismatch(
            f"the server counted the prompt at {reply.prompt_tokens} tokens, not "
            f"{case.prompt_tokens}"
        )


def _session_servers(writer: RunWriter) -> dict[int, str]:
    """Read the fingerprint of the server each session of the run began with."""
    log = read_meta(writer.path / "meta.json").get("endpoint_log", [])
    return {
        e["session"]: fingerprint(e["identity"])
        for e in log
        if isinstance(e, dict) and e.get("event") == "server" and "identity" in e
    }


def run_endpoint_session(
    spec: SweepSpec,
    writer: RunWriter,
    session: int,
    *,
    emit: EventSink | None = None,
    should_stop: Callable[[], str | None] = _never_stop,
    interrupts: Interrupts | None = None,
) -> SessionOutcome:
    """Run what is left of ``session`` against the spec's endpoint.

    As :func:`collectors._session.run_session` does for a model in this process (the
    same plan, warm-ups, deadline and interrupts), with the generations sent to the
    server (see the module docstring).

    Raises
    ------
    EndpointError
        The server is down, overloaded past its retries, not an OpenAI-compatible API,
        or refuses the key; every trial written before it is kept.
    """
    assert spec.endpoint is not None
    state = RunState.read(writer)
    guard = interrupts or Interrupts()
    with EndpointClient(spec.endpoint) as client:
        args = (spec, writer, session, state, emit or ignore, should_stop, guard)
        runner = _EndpointRun(*args, client=client)
        return drive(runner, iter_plan(spec, session, state), own_interrupts=interrupts is None)
