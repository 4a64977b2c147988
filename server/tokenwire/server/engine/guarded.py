"""The engine as the servicer sees it: admission control and metrics
around every request (chat, generate, session, prefill), weight bounds
(a bounded request is admitted on the weights it allows, tracked while it
runs, and when the control plane ended it at an update its stop_reason
says why: core/weight_bounds.py), the cache salt by weight version
(--salt-cache-by-version), a bound on every chat rendering
(chat, tokenize, continuations), and admission around a prompt's media
preparation, by delegation."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from tokenwire.server.core.admission import Admission
from tokenwire.server.core.domain import (
    Engine,
    EngineOutput,
    EngineRequest,
    RenderOptions,
    adapter_spans,
)
from tokenwire.server.core.errors import FailedPrecondition
from tokenwire.server.core.media_inputs import FeatureItem, MediaPart, MultimodalPrompt
from tokenwire.server.core.metrics import AccessRecord, Metrics, current_access
from tokenwire.server.core.pooling import PoolOutput, PoolRequest
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.weight_bounds import version_salt

log = logging.getLogger("tokenwire.requests")


class GuardedEngine:
    def __init__(self, inner: Engine, admission: Admission, metrics: Metrics,
                 state: ServingState | None = None, *, salt_by_version: bool = False):
        self.inner = inner
        self.salt_by_version = salt_by_version  # --salt-cache-by-version
        self.admission = admission
        self.metrics = metrics
        self.state = state if state is not None else ServingState()  # version, generation, bounds

    def __getattr__(self, name: str) -> Any:  # everything else: the engine's own
        return getattr(self.inner, name)

    def render_chat(self, messages: list[dict[str, Any]], options: RenderOptions) -> list[int]:
        """The engine's rendering, its text bounded before it is tokenized:
        a text longer than the window's characters (max_model_len x the
        longest token) cannot fit, whatever template rendered it."""
        if options.max_text_chars is None:
            inner = self.inner
            options = dataclasses.replace(
                options, max_text_chars=inner.max_model_len * inner.max_token_chars)
        return self.inner.render_chat(messages, options)

    async def render_chat_media(self, messages: list[dict[str, Any]], options: RenderOptions,
                                tenant: str | None = None) -> MultimodalPrompt:
        """The engine's rendering of messages with images (loading,
        decoding, the model's processor: off the event loop in the engine),
        admitted as a request while it runs (RESOURCE_EXHAUSTED when full)."""
        with self.admission.hold(0, tenant):
            return await self.inner.render_chat_media(messages, options)

    async def prepare_media(self, prompt: list[int], *, parts: list[MediaPart] | None = None,
                            features: list[FeatureItem] | None = None,
                            tenant: str | None = None) -> MultimodalPrompt:
        """The engine's media preparation, admitted as a request of the
        prompt's ids (RESOURCE_EXHAUSTED when full) while it runs."""
        with self.admission.hold(len(prompt), tenant):
            return await self.inner.prepare_media(prompt, parts=parts, features=features)

    async def pool(self, request: PoolRequest) -> PoolOutput:
        """One input pooled (embedded, classified) on a pooling model,
        admitted as a request of its ids, under an engine id unique in flight."""
        if not self.inner.pooling:
            raise FailedPrecondition(
                "the served model generates: embeddings and classification need a pooling model "
                "(start the server with --runner pooling, e.g. --convert embed)",
                reason="MODEL_DOES_NOT_POOL")
        engine_ids = self.state.engine_ids
        engine_id = engine_ids.claim(request.request_id)
        with contextlib.ExitStack() as stack:
            stack.callback(engine_ids.release, engine_id)
            self._opened(stack, request.request_id, request.tenant,
                         len(request.prompt_token_ids), len(request.prompt_token_ids))
            return await self.inner.pool(dataclasses.replace(request, request_id=engine_id))

    def _opened(self, stack: contextlib.ExitStack, label: str, tenant: str | None,
                prompt: int, need: int) -> AccessRecord | None:
        """A request admitted for `need` tokens (held until `stack` closes),
        counted in flight with its `prompt` tokens, and on the RPC's access-log
        line (core/metrics.py) under `label`, which it returns."""
        stack.enter_context(self.admission.hold(need, tenant))
        m = self.metrics
        m.in_flight.inc()
        stack.callback(m.in_flight.dec)
        m.prompt_tokens.inc(prompt)
        access = current_access.get()
        if access is not None:
            access.add_request(label, tenant, prompt)
        return access

    def _claimed(self, request: EngineRequest) -> tuple[str, EngineRequest]:
        """The id the engine sees (unique in flight: two callers may choose
        the same request_id; the caller's stays the label responses report,
        core/request_ids.py), admitted under its weight bound, and the
        request under it, its cache salted by the weight version when asked."""
        state = self.state
        engine_id = state.engine_ids.claim(request.request_id)
        try:
            state.bounds.admit(engine_id, request.weight_bound,
                               version=state.weight_version, generation=state.generation)
        except BaseException:
            state.engine_ids.release(engine_id)
            raise
        salted = (self.salt_by_version if request.salt_by_version is None
                  else request.salt_by_version)
        if salted:
            return engine_id, dataclasses.replace(
                request, request_id=engine_id, cache_salt=version_salt(
                    request.cache_salt, state.weight_version, state.generation))
        if engine_id != request.request_id:
            return engine_id, dataclasses.replace(request, request_id=engine_id)
        return engine_id, request

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        if self.inner.pooling:
            raise FailedPrecondition(
                "the served model is a pooling model (--runner pooling): it embeds "
                "(/v1/embeddings), it does not generate", reason="MODEL_DOES_NOT_GENERATE")
        p = request.params
        state = self.state
        if request.weight_bound is not None and state.refresh is not None:
            await state.refresh()  # another process runs control: its version and generation now
        engine_id, request = self._claimed(request)
        start = state.generation
        lags: Counter[int] = Counter()  # tokens served, by updates since the request started
        with contextlib.ExitStack() as stack:
            stack.callback(self._released, engine_id, lags)
            prompt = len(request.prompt_token_ids)
            access = self._opened(stack, state.engine_ids.label(engine_id) or engine_id,
                                  request.tenant, prompt, prompt + p.max_tokens * p.n)
            if request.session_id is not None:
                self.metrics.session_requests.inc()
                log.debug("request %s session %s", request.request_id, request.session_id)
            received = time.time()
            produced = 0  # added to the counter once, when the request ends
            first = True
            # Tokens by lag, kept as a mark: the ids since `mark` were all
            # served at generation `at` (one int compare per output).
            at, mark = start, 0
            try:
                # Closed explicitly: an abandoned stream aborts its engine
                # request now, not when the garbage collector runs. The
                # adapter's load is read with no await before the engine
                # picks the adapter up: its spans name that load.
                adapter = self.inner.lora_label(request.lora) if request.lora else ""
                async with contextlib.aclosing(self.inner.generate(request)) as outputs:
                    async for out in outputs:
                        n = 0
                        ended = out.finished
                        for c in out.choices:
                            n += len(c.token_ids)
                            if c.finish_reason is not None:
                                ended = True
                            if adapter and c.weight_versions:
                                c.weight_versions = adapter_spans(c.weight_versions, adapter)
                        if n:
                            if state.generation != at:  # an update since the last ids
                                lags[at - start] += produced - mark
                                at, mark = state.generation, produced
                            produced += n
                            if first:
                                first = False
                                self._first_token(out, received)
                        if ended:
                            self._why_ended(request.request_id, out)
                        yield out
            finally:
                lags[at - start] += produced - mark
                self.metrics.completion_tokens.inc(produced)
                if access is not None:
                    access.completion_tokens += produced

    def _why_ended(self, request_id: str, out: EngineOutput) -> None:
        """A request the control plane ended at an update (its bound broke):
        its aborted choices' stop_reason names the version change."""
        running = self.state.bounds.get(request_id)
        if running is not None and running.ended:
            for c in out.choices:
                if c.finish_reason == "abort":
                    c.stop_reason = running.ended

    def _released(self, engine_id: str, lags: Counter[int]) -> None:
        self.state.engine_ids.release(engine_id)
        running = self.state.bounds.release(engine_id)
        if running is not None and running.ended:
            self.metrics.ended_by_bound.labels(running.ended.split(":", 1)[0]).inc()
        for lag, tokens in lags.items():
            if tokens:
                self.metrics.served_token_lag.observe(lag, tokens)

    def _first_token(self, out: EngineOutput, received: float) -> None:
        self.metrics.ttft_seconds.observe(time.time() - received)
        times = out.times
        if times and times.scheduled and times.arrival:
            self.metrics.queue_seconds.observe(max(0.0, times.scheduled - times.arrival))

