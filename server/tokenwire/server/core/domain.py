"""Engine-neutral request and output types.

The servicer converts protobuf to these and back; the engine adapter turns
them into vLLM calls. Nothing here imports vLLM or protobuf.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, Protocol

# The media types, engine-neutral too (core/media_inputs.py), named here as well.
from tokenwire.server.core.media_inputs import FeatureItem, MediaPart, MultimodalPrompt
from tokenwire.server.core.pooling import PoolingEngine

if TYPE_CHECKING:
    from tokenwire.server.core.kv_events import KvEventBatch
    from tokenwire.server.core.parsing import ChatParsers, ParserConfig
    from tokenwire.server.core.weight_bounds import WeightBound

# Floor for non-finite logprobs: JSON has no -inf.
LOGPROB_FLOOR = -9999.0


def finite_logprob(x: float) -> tuple[float, bool]:
    """A logprob JSON can carry, and whether the engine's was not finite:
    NaN and -inf become LOGPROB_FLOOR, +inf becomes 0.0 (both flagged, so
    a trainer can tell a clamp from a real value); finite values are
    floored at LOGPROB_FLOOR."""
    if x != x:  # NaN
        return LOGPROB_FLOOR, True
    if x in (float("inf"), float("-inf")):
        return (LOGPROB_FLOOR if x < 0 else 0.0), True
    return max(float(x), LOGPROB_FLOOR), False


INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Caller:
    """Who sent a request, as far as the serving rules care: its tenant's
    cache-salt prefix (None: no tenant; the request's own salt is used as
    sent) and the priority range it may use (lower runs first)."""

    salt_prefix: str | None = None
    priority_min: int = INT32_MIN
    priority_max: int = INT32_MAX
    tenant: str | None = None  # its tenant (admission's per-tenant caps); None: none
    # The weight bound its call's metadata asks for (core/weight_bounds.py).
    weight_bound: WeightBound | None = None
    # Its call's x-request-id metadata (vLLM's X-Request-Id; unary and
    # server-streaming calls only): the request id when the body sets none.
    request_id: str | None = None


@dataclasses.dataclass
class StructuredOutput:
    """A constraint on the output: exactly one field is set."""

    json_schema: dict[str, Any] | None = None
    json_object: bool = False
    structural_tag: str | None = None  # vLLM's structural tag (JSON text)
    regex: str | None = None  # a regular expression the output matches
    grammar: str | None = None  # an EBNF / Lark grammar the output follows
    choice: list[str] | None = None  # the output is one of these strings


@dataclasses.dataclass
class GenerationParams:
    """Sampling parameters in engine terms (vLLM SamplingParams names)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = 16
    min_tokens: int = 0
    seed: int | None = None
    stop: list[str] = dataclasses.field(default_factory=list)
    stop_token_ids: list[int] = dataclasses.field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None  # None: none; 0: sampled token; k: + top k
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: dict[int, float] = dataclasses.field(default_factory=dict)
    thinking_token_budget: int | None = None
    structured: StructuredOutput | None = None
    detokenize: bool = True
    stream_interval: int | None = None  # tokens per streamed output (None: every token)
    # A disaggregating router's KV-connector handshake, passed to the engine
    # as vLLM passes it (SamplingParams.extra_args); None: none.
    kv_transfer_params: dict[str, Any] | None = None


@dataclasses.dataclass
class EngineRequest:
    request_id: str
    prompt_token_ids: list[int]
    params: GenerationParams
    cache_salt: str | None = None
    priority: int = 0
    stream: bool = True  # True: deltas; False: one final output
    lora: str | None = None  # a loaded LoRA adapter's name; None: the base model
    data_parallel_rank: int | None = None  # pin to a DP engine rank; None: vLLM balances
    session_id: str | None = None  # the session it belongs to (body or x-session-id)
    tenant: str | None = None  # the caller's tenant, admitted under its caps (core/admission.py)
    weight_bound: WeightBound | None = None  # exact version or max lag (core/weight_bounds.py)
    salt_by_version: bool | None = None  # salt the cache by weight version; None: the server's
    # With a reasoning parser (vLLM's generate arguments): structured outputs
    # apply from the first token (True), after the reasoning (False), or as
    # the engine's parser finds in the prompt (None); its keyword arguments.
    reasoning_ended: bool | None = None
    reasoning_kwargs: dict[str, Any] | None = None
    # The prompt's media (its ids are prompt_token_ids, expanded): None for text.
    multimodal: MultimodalPrompt | None = None


@dataclasses.dataclass
class Candidate:
    token_id: int
    logprob: float
    rank: int | None


@dataclasses.dataclass
class PositionLogprobs:
    """Logprob of the sampled token at one position and its alternatives."""

    token_id: int
    logprob: float
    rank: int | None
    top: list[Candidate]  # the top-k alternatives, most likely first
    non_finite: bool = False  # the engine's logprob was NaN or infinite (logprob is the clamp)


@dataclasses.dataclass(frozen=True)
class WeightSpan:
    """Completion ids [start, end) of a choice were sampled by `version`."""

    version: str
    start: int
    end: int


LORA_MARK = "+lora:"  # "<version>+lora:<adapter>@<load>": tokens a LoRA adapter sampled


def adapter_spans(spans: list[WeightSpan], adapter: str) -> list[WeightSpan]:
    """The spans of a request served with a LoRA adapter: each version names
    the adapter and its load too (`adapter` as Engine.lora_label gives it)."""
    return [WeightSpan(f"{s.version}{LORA_MARK}{adapter}", s.start, s.end) for s in spans]


@dataclasses.dataclass
class ChoiceOutput:
    """New (stream) or complete (final) output of one choice."""

    index: int
    token_ids: list[int]
    text: str
    logprobs: list[PositionLogprobs] | None = None
    finish_reason: str | None = None  # stop, length, abort, error...
    stop_reason: int | str | None = None  # matched stop id or string
    # Which weights sampled the choice's ids: (version, start, end) spans over
    # the whole completion's token indexes; on the output that finishes it.
    weight_versions: list[WeightSpan] | None = None
    # The experts the MoE router chose (vLLM --enable-return-routed-experts):
    # an .npy array [positions, layers, top_k], on the output that finishes
    # the choice; None when the engine returns none.
    routed_experts: bytes | None = None

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclasses.dataclass
class EngineTimes:
    """Engine-side timestamps, seconds since the Unix epoch (None: unknown)."""

    arrival: float | None = None
    scheduled: float | None = None
    first_token: float | None = None
    last_token: float | None = None


@dataclasses.dataclass
class EngineOutput:
    choices: list[ChoiceOutput]
    prompt_token_ids: list[int]
    num_cached_tokens: int
    finished: bool
    prompt_logprobs: list[PositionLogprobs | None] | None = None
    times: EngineTimes | None = None
    # What the engine's KV connector returns for the request (on its last
    # output; vLLM's RequestOutput.kv_transfer_params): None without one.
    kv_transfer_params: dict[str, Any] | None = None


@dataclasses.dataclass
class RunOutcome:
    """What one finished run consumed and produced, filled in by the run and
    stream functions when given one: sessions store it for continuations,
    speculative prefill starts the next turn from it."""

    prompt_ids: list[int] = dataclasses.field(default_factory=list)
    completions: list[list[int]] = dataclasses.field(default_factory=list)  # by choice index

    def fill(self, prompt_ids: list[int], completions: dict[int, list[int]]) -> None:
        self.prompt_ids = prompt_ids
        self.completions = [completions.get(i, []) for i in range(max(completions, default=-1) + 1)]


@dataclasses.dataclass
class RenderOptions:
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None
    template_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    tools: list[dict[str, Any]] | None = None
    max_text_chars: int | None = None  # refuse a rendered text longer than this before tokenizing
    reasoning_effort: str | None = None  # the request's (chat's field): a harmony system message's


class Engine(PoolingEngine, Protocol):
    """What the serving layer needs from an engine (vLLM or a fake)."""

    @property
    def model_path(self) -> str: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def max_token_chars(self) -> int:
        """The most characters one token of the vocabulary stands for: a
        text of C characters has at least C / max_token_chars tokens, so
        its length alone can refuse it before any tokenizing."""
        ...

    def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        """Run a request; cancelling the consumer aborts it in the engine."""
        ...

    def num_unfinished_requests(self) -> int: ...

    def encode(self, text: str, add_special_tokens: bool) -> list[int]: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str: ...

    def token_text(self, token_id: int) -> str:
        """The text of one token decoded alone (may hold U+FFFD)."""
        ...

    def token_bytes(self, token_id: int) -> bytes:
        """The exact bytes one token stands for."""
        ...

    def render_chat(self, messages: list[dict[str, Any]], options: RenderOptions) -> list[int]:
        """Render messages with the chat template and tokenize the result."""
        ...

    async def check_health(self) -> None:
        """Raise when the engine cannot serve."""
        ...

    def lora_names(self) -> list[str]:
        """The LoRA adapters loaded now (requests select one by `model`)."""
        ...

    def lora_label(self, name: str) -> str:
        """The adapter `name` as loaded now: "<name>@<n>", n numbering the
        adapter loads of this engine (a reload of the same name gets a new
        n), so token spans tell the loads apart (adapter_spans)."""
        ...

    def config_report(self) -> dict[str, Any]:
        """The resolved engine configuration (EngineConfig field names)."""
        ...

    def model_facts(self) -> dict[str, Any]:
        """What a router asks of the model (smg's GetModelInfo): model_type,
        architectures, eos_token_ids, bos_token_id / pad_token_id (-1:
        none), tokenizer_path."""
        ...

    def load_report(self) -> dict[str, float]:
        """The engine's load now: running and waiting requests, KV-cache
        usage in [0, 1] (vLLM's scheduler gauges)."""
        ...

    def kv_events(self) -> AsyncIterator[KvEventBatch]:
        """The engine's KV-cache events from now on (core/kv_events.py), a
        subscription of its own per call, ended by closing the iterator;
        the call raises FAILED_PRECONDITION `KV_EVENTS_DISABLED` when the
        engine publishes none (vLLM: no --kv-events-config)."""
        ...

    def sampling_defaults(self) -> dict[str, Any]:
        """Sampling defaults for fields a request leaves unset (vLLM: the
        model's generation config and --override-generation-config)."""
        ...

    def chat_parsers(self, config: ParserConfig) -> ChatParsers | None:
        """The parsers of `config` over this engine's tokenizer (made once,
        then cached); None when it names none."""
        ...

    @property
    def takes_media(self) -> bool:
        """Whether the served model takes images."""
        ...

    async def render_chat_media(self, messages: list[dict[str, Any]],
                                options: RenderOptions) -> MultimodalPrompt:
        """Render messages with image parts (OpenAI's shape) as the engine
        does: the images loaded under the URL rules (core/multimodal.py)
        and processed by the model's processor, the ids expanded.
        INVALID_ARGUMENT naming the field."""
        ...

    async def prepare_media(self, prompt: list[int], *, parts: list[MediaPart] | None = None,
                            features: list[FeatureItem] | None = None) -> MultimodalPrompt:
        """A token-in prompt with media: `parts` loaded (data URLs; http(s)
        only from the engine's --allowed-media-domains) and processed by the model's processor,
        the ids expanded; or client-processed `features` decoded and
        checked against the ids. INVALID_ARGUMENT naming the field."""
        ...

    def join_media(self, earlier: MultimodalPrompt | None, later: MultimodalPrompt,
                   prompt: list[int], shift: int) -> MultimodalPrompt:
        """`prompt`'s media: `earlier`'s items where they are, then `later`'s
        moved by `shift` (a Session turn's images, then those of the
        messages continuing it). Both prepared with their tensors kept; the
        per-prompt item limit applies to the sum (INVALID_ARGUMENT)."""
        ...

    async def media_features(self, prepared: MultimodalPrompt) -> dict[str, Any]:
        """A prepared prompt's media as vLLM's `features` JSON (what its
        /render answers, Generate takes back); serialized off the loop."""
        ...

    def shutdown(self) -> None: ...

