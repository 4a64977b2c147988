"""A deterministic in-process engine for fast tests of the serving layer.

Byte-level tokenizer (id = byte + 3; 0 <unk>, 1 <|im_start|>, 2 <|im_end|>
which is also EOS), a ChatML template, and a "model" that answers every
prompt with a fixed text per choice, then EOS. It honours max_tokens,
min_tokens, ignore_eos, stop strings, stop_token_ids, n, logprobs, cache
salts (a block-level prefix cache) and cancellation, so everything above the
engine can be tested without vLLM. Never a substitute for the real engine in
integration tests.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from tokenwire.server.core import errors
from tokenwire.server.core.domain import (
    Candidate,
    ChoiceOutput,
    EngineOutput,
    EngineRequest,
    EngineTimes,
    PositionLogprobs,
    RenderOptions,
    finite_logprob,
)
from tokenwire.server.core.kv_events import KvEventBatch
from tokenwire.server.core.parsing import ParserConfig
from tokenwire.server.engine.fake import media
from tokenwire.server.engine.fake.choices import FakeChoice, StreamBatch
from tokenwire.server.engine.fake.control import FakeControl
from tokenwire.server.engine.fake.kv_events import FakeKvEvents
from tokenwire.server.engine.fake.kv_transfer import kv_answer
from tokenwire.server.engine.fake.parsers import FakeChatParsers
from tokenwire.server.engine.fake.pooling import FakePooling

UNK, IM_START, IM_END = 0, 1, 2
SPECIALS = {UNK: "<unk>", IM_START: "<|im_start|>", IM_END: "<|im_end|>"}
VOCAB = 300
EOS = IM_END

_SPECIAL_IDS = {tok: tid for tid, tok in SPECIALS.items()}
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(t) for t in SPECIALS.values()) + ")")
REPLIES = ["Hello from the fake engine.", "Another answer here.", "Third reply!"]


class FakeEngine(FakeControl, media.FakeMedia, FakePooling):
    def __init__(
        self, *, max_model_len: int = 512, block_size: int = 16, token_delay: float = 0.0,
        nan_logprob_at: int | None = None,
    ):
        self._max_model_len = max_model_len
        self.nan_logprob_at = nan_logprob_at  # an output position whose logprob is NaN
        self.block_size = block_size
        self.token_delay = token_delay
        self.running: set[str] = set()
        self.aborted: list[str] = []
        self.requests: list[EngineRequest] = []
        self.media_misses = 0  # next requests with media failed as on a processor-cache drift
        self._cache: set[tuple[str, tuple[int, ...]]] = set()
        self.healthy = True
        self.progress: dict[str, int] = {}  # request id -> tokens generated so far
        self._init_control()
        self.generation_defaults: dict[str, Any] = {}
        self.data_parallel_size = 1  # tests may pretend to have more ranks
        # (layers, top_k): return routed experts like a MoE with that router
        # (vLLM --enable-return-routed-experts); None: a dense model.
        self.routed_experts: tuple[int, int] | None = None
        self._parsers: dict[ParserConfig, FakeChatParsers] = {}
        # A tokenizer folder that tokenizes as this engine does (a router's:
        # tests/fake_tokenizer.py builds one); "": none.
        self.tokenizer_path = ""
        self.kv = FakeKvEvents()  # KV-cache events of the prefix cache: tests set kv.enabled

    def _routed(self, request: EngineRequest, ids: list[int]) -> bytes | None:
        """Deterministic routed experts, [prompt + completion - 1, layers,
        top_k] like vLLM's (every position the model ran), as .npy bytes."""
        if self.routed_experts is None:
            return None
        import io

        import numpy as np

        layers, top_k = self.routed_experts
        tokens = np.array([*request.prompt_token_ids, *ids][:-1] or [0], dtype=np.int32)
        experts = (tokens[:, None, None] + np.arange(layers)[None, :, None]
                   + np.arange(top_k)[None, None, :]) % 8
        buffer = io.BytesIO()
        # vLLM: uint8 up to 256 experts
        np.save(buffer, experts.astype(np.uint8), allow_pickle=False)
        return buffer.getvalue()

    def sampling_defaults(self) -> dict[str, Any]:
        return self.generation_defaults  # tests set it; empty: OpenAI's defaults

    def model_facts(self) -> dict[str, Any]:
        return {"model_type": "fake", "architectures": ["FakeEngine"], "eos_token_ids": [EOS],
                "bos_token_id": IM_START, "pad_token_id": UNK,
                "tokenizer_path": self.tokenizer_path}

    def load_report(self) -> dict[str, float]:
        running = float(self.num_unfinished_requests())
        return {"running": running, "waiting": 0.0, "kv_cache_usage": 0.0}

    def config_report(self) -> dict[str, Any]:
        return {"model": self.model_path, "dtype": "none", "tensor_parallel_size": 1,
                "pipeline_parallel_size": 1, "data_parallel_size": self.data_parallel_size,
                "max_model_len": self._max_model_len, "block_size": self.block_size,
                "max_num_seqs": 0, "enable_lora": True, "max_lora_rank": 0,
                "logprobs_mode": "fake", "platform": "fake"}

    # -- properties -------------------------------------------------------
    @property
    def model_path(self) -> str:
        return "/fake/model"

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    @property
    def vocab_size(self) -> int:
        return VOCAB

    def chat_parsers(self, config: ParserConfig) -> FakeChatParsers | None:
        if not (config.tool_call_parser or config.reasoning_parser):
            return None
        made = self._parsers.get(config)
        if made is None:
            made = self._parsers[config] = FakeChatParsers(config)
        return made

    @property
    def max_token_chars(self) -> int:
        return max(len(s) for s in SPECIALS.values())  # other tokens are single bytes

    # -- tokenizer --------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        ids: list[int] = [IM_START] if add_special_tokens else []
        for i, part in enumerate(_SPECIAL_SPLIT.split(text)):
            if i % 2:  # a special token (the split pattern's group)
                ids.append(_SPECIAL_IDS[part])
            else:
                ids.extend(b + 3 for b in part.encode())
        return ids

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        out = bytearray()
        for t in token_ids:
            if t in SPECIALS:
                if not skip_special_tokens:
                    out += SPECIALS[t].encode()
            elif 3 <= t < 259:
                out.append(t - 3)
        return out.decode(errors="replace")

    def token_text(self, token_id: int) -> str:
        return self.decode([token_id])

    def token_bytes(self, token_id: int) -> bytes:
        if 3 <= token_id < 259:
            return bytes([token_id - 3])
        return SPECIALS.get(token_id, "").encode()

    def render_chat(self, messages: list[dict[str, Any]], options: RenderOptions) -> list[int]:
        text = ""
        for i, m in enumerate(messages):
            last = i == len(messages) - 1
            text += f"<|im_start|>{m['role']}\n{m['content']}"
            if not (last and options.continue_final_message):
                text += "<|im_end|>\n"
        if options.tools:
            names = ",".join(t["function"]["name"] for t in options.tools)
            text = f"<|im_start|>system\ntools: {names}<|im_end|>\n" + text
        if options.add_generation_prompt:
            text += "<|im_start|>assistant\n"
        if options.max_text_chars is not None and len(text) > options.max_text_chars:
            raise errors.InvalidArgument("the chat template rendered too much text",
                                         param="messages", reason="PROMPT_TOO_LONG")
        return self.encode(text, add_special_tokens=False)

    # -- generation -------------------------------------------------------
    def _cached_tokens(self, prompt: list[int], salt: str | None, lora: str | None = None,
                       items: tuple[tuple[int, str], ...] = ()) -> int:
        """Prefix-cache hits, vLLM's way: a block's key holds the prefix up
        to it, the salt, the adapter's name and folder (not its load), and
        the hashes of the media items that start before its end (`items`:
        offset, hash)."""
        cached = 0
        key = salt or ""
        if lora:
            key += f"\0lora:{lora}:{self.loras.get(lora, '')}"

        def block(end: int) -> tuple[Any, ...]:
            return key, tuple(h for at, h in items if at < end), tuple(prompt[:end])

        for end in range(self.block_size, len(prompt) + 1, self.block_size):
            if block(end) in self._cache:
                cached = end
            else:
                break
        new = [(end, block(end)) for end in range(cached + self.block_size, len(prompt) + 1,
                                                 self.block_size)]
        self._cache.update(key for _, key in new)
        self.kv.stored(prompt, new, self.block_size, block(cached) if cached else None, lora)
        return cached

    def kv_events(self) -> AsyncIterator[KvEventBatch]:
        return self.kv.subscribe()

    def _logprob(self, pos: int, k: int, sampled: int) -> PositionLogprobs:
        lp = -0.1 * (pos % 7) - 0.01
        top = [Candidate(sampled, lp, 1)]
        top += [Candidate(3 + (sampled + j) % 256, lp - j, 1 + j) for j in range(1, k)]
        if pos == self.nan_logprob_at:  # what a diverged model gives
            clamped, _ = finite_logprob(float("nan"))
            return PositionLogprobs(sampled, clamped, 1, top, non_finite=True)
        return PositionLogprobs(sampled, lp, 1, top)

    def _plan_choice(self, request: EngineRequest, index: int) -> list[int]:
        p = request.params
        reply_text = REPLIES[(index + self.weights_generation) % len(REPLIES)]
        prompt_text = self.decode(request.prompt_token_ids)
        if "Think first." in prompt_text:
            reply_text = "<think>The user wants a greeting.</think>\n\nHello!"
        if "tools: " in prompt_text:  # answer with a Hermes-style call of the first tool
            name = prompt_text.split("tools: ", 1)[1].split(",", 1)[0].split("<", 1)[0]
            reply_text = ('Let me check.<tool_call>'
                          f'{{"name": "{name}", "arguments": {{"city": "Paris"}}}}</tool_call>')
        reply = self.encode(reply_text, add_special_tokens=False)
        ids = reply + ([] if p.ignore_eos else [EOS])
        while len(ids) < max(p.max_tokens, 0) and p.ignore_eos:
            ids += reply
        while len(ids) < p.min_tokens:
            ids.insert(len(ids) - 1, reply[len(ids) % len(reply)])
        return ids

    def _accept(self, request: EngineRequest) -> None:
        """What fails before any output (a dead engine, an id in use, a
        processor-cache drift); else the request runs."""
        if not self.healthy:
            raise errors.engine_dead("the engine died: fake engine is down")
        if request.request_id in self.running:
            raise errors.InvalidArgument(f"request id {request.request_id} is in use",
                                         param="request_id", reason="DUPLICATE_REQUEST_ID")
        self.requests.append(request)
        if request.multimodal is not None and self.media_misses > 0:
            # vLLM's frontend/engine-core processor caches drifted (the adapter's
            # engine_failure): the request fails before any output
            self.media_misses -= 1
            raise errors.Unavailable("the engine failed this request during generation",
                                     reason="ENGINE_REQUEST_FAILED")
        self.running.add(request.request_id)

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        self._accept(request)
        p = request.params
        arrival = time.time()
        cached = self._cached_tokens(request.prompt_token_ids, request.cache_salt, request.lora,
                                     media.cache_items(request))
        choices = [FakeChoice(i, self._plan_choice(request, i)) for i in range(p.n)]
        batch = StreamBatch(p.stream_interval or 1)
        first_token = None
        try:
            await self._admit_gate(request.request_id)
            step = 0
            while any(c.done is None for c in choices):
                await asyncio.sleep(self.token_delay or 0)  # 0: only a turn of the loop
                aborting = await self._step_gate(request.request_id)
                deltas = self._step(request, choices, step, aborting)
                first_token = first_token or time.time()
                step += 1
                ready = batch.add(deltas) if request.stream else None
                if ready is None:
                    continue
                finished = all(c.done is not None for c in choices)
                # Like the vLLM adapter: prompt ids and timestamps with the
                # first and the last output only.
                if batch.sent == 0 or finished:
                    yield EngineOutput(
                        ready, list(request.prompt_token_ids), cached, finished,
                        times=EngineTimes(arrival, arrival, first_token, time.time()),
                        prompt_logprobs=self._prompt_logprobs(request) if batch.sent == 0 else None,
                        kv_transfer_params=(kv_answer(request, cached, self.block_size)
                                            if finished else None),
                    )
                else:
                    yield EngineOutput(ready, [], cached, finished)
                batch.sent += 1
            if not request.stream:
                yield self._final(request, choices, cached, arrival, first_token)
        except (asyncio.CancelledError, GeneratorExit):  # like vLLM: both abort
            if request.request_id not in self.aborted:  # once, however it was closed
                self.aborted.append(request.request_id)
            raise
        finally:
            self.running.discard(request.request_id)
            self._done(request.request_id)

    def _step(self, request: EngineRequest, choices: list[FakeChoice], step: int,
              aborting: bool) -> list[ChoiceOutput]:
        """One engine step: a delta for every unfinished choice, its next
        token, or (aborting, like vLLM) no new token and finish "abort"."""
        p = request.params
        deltas: list[ChoiceOutput] = []
        for c in choices:
            if c.done is not None:
                continue
            if aborting:
                out = ChoiceOutput(c.index, [], "", [] if p.logprobs is not None else None,
                                   "abort", None, self._spans(c.spans))
            else:
                out = self._advance(request, c, step)
                self.progress[request.request_id] = (
                    choices[0].emitted if p.n == 1 else sum(x.emitted for x in choices))
            if out.finished:
                c.done = out
            deltas.append(out)
        return deltas

    def _advance(self, request: EngineRequest, c: FakeChoice, step: int) -> ChoiceOutput:
        """Choice c's token at `step` as a delta; the one that finishes the
        choice carries its weight versions and routed experts."""
        p = request.params
        tid = c.token(step)
        self._track(c.spans, c.emitted)
        c.emitted += 1
        text, finish, stop_reason = c.take(p, tid, "" if tid in SPECIALS else self.decode([tid]),
                                           EOS)
        lps = [self._logprob(step, p.logprobs + 1, tid)] if p.logprobs is not None else None
        out = ChoiceOutput(c.index, [tid], text, lps, finish, stop_reason)
        if finish is not None:
            out.weight_versions = self._spans(c.spans)
            out.routed_experts = self._routed(request, c.ids())
        return out

    def _final(self, request: EngineRequest, choices: list[FakeChoice], cached: int,
               arrival: float, first_token: float | None) -> EngineOutput:
        p = request.params
        outputs = []
        for c in choices:
            ids = c.ids()
            d = c.done
            assert d is not None
            lps = (
                [self._logprob(j, p.logprobs + 1, t) for j, t in enumerate(ids)]
                if p.logprobs is not None
                else None
            )
            outputs.append(ChoiceOutput(c.index, ids, c.sent, lps, d.finish_reason, d.stop_reason,
                                        d.weight_versions, d.routed_experts))
        return EngineOutput(
            outputs, list(request.prompt_token_ids), cached, True,
            times=EngineTimes(arrival, arrival, first_token, time.time()),
            prompt_logprobs=self._prompt_logprobs(request),
            kv_transfer_params=kv_answer(request, cached, self.block_size),
        )

    def _prompt_logprobs(self, request: EngineRequest) -> list[PositionLogprobs | None] | None:
        """Like vLLM: None for the first prompt position, then one entry each."""
        k = request.params.prompt_logprobs
        if k is None:
            return None
        ids = request.prompt_token_ids
        return [None] + [self._logprob(100 + j, k + 1, t) for j, t in enumerate(ids[1:])]

    def num_unfinished_requests(self) -> int:
        return len(self.running)

    async def check_health(self) -> None:
        if not self.healthy:
            raise errors.engine_dead("fake engine is down")

    def shutdown(self) -> None:
        self.running.clear()
