"""CreateCompletionRequest (proto) -> a validated CompletionPlan (domain).

A completion body holds one prompt or a batch (a list of strings or of id
lists); each prompt becomes its own EngineRequest with `n` choices, and the
response indexes choices prompt_index * n + choice (OpenAI's order).
Fields spelled as in chat are read by inference/shared/ (openai_body.py:
the body's head and tail; sampling.py).
"""

from __future__ import annotations

import dataclasses
import time

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Caller, Engine, EngineRequest, GenerationParams
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.shared import sampling
from tokenwire.server.inference.shared.kv_transfer import read_kv_transfer
from tokenwire.server.inference.shared.openai_body import (
    BodyHead,
    BodyTail,
    engine_request,
    read_head,
    read_tail,
)
from tokenwire.server.inference.shared.prompts import Prompt, prompts_of
from tokenwire.server.inference.shared.sampling import sampling_from_body
from tokenwire.v1 import completion_pb2

DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for completions


@dataclasses.dataclass
class CompletionPlan:
    """Everything needed to run one completion body and shape its response:
    one engine request per prompt plus the response options."""

    id: str  # the response id ("cmpl-..." or the caller's request_id)
    requests: list[EngineRequest]  # one per prompt, in prompt order
    prompts: list[Prompt]
    model: str
    n: int
    echo: bool
    echo_only: bool  # max_tokens 0 with echo: the prompt, nothing generated
    logprobs: int | None  # legacy logprobs: alternatives per position (None: none)
    return_token_ids: bool
    as_token_ids: bool  # return_tokens_as_token_ids
    extra_fields: frozenset[str]
    include_usage: bool
    continuous_usage: bool
    received: float = dataclasses.field(default_factory=time.time)
    weight_version: str = ""

    @property
    def request(self) -> EngineRequest:
        """The first prompt's engine request (the only one, unless a batch)."""
        return self.requests[0]

    @property
    def fingerprint(self) -> str:
        return self.weight_version or f"tokenwire-{self.model}"

    @property
    def ids_wanted(self) -> bool:
        return self.return_token_ids or bool(
            self.extra_fields & {"completion_token_ids", "engine_data"})


def parse_prompts(
    req: completion_pb2.CreateCompletionRequest, engine: Engine, settings: ServerSettings,
) -> list[Prompt]:
    """The prompts of a body: nvext.token_data, or `prompt` as a string, a
    list of strings, a list of ids, or a list of id lists."""
    if len(req.nvext.token_data) > 0:
        param = "nvext.token_data"
        v.prompt_fits(param, len(req.nvext.token_data), engine.max_model_len)
        return [Prompt(v.token_ids(param, req.nvext.token_data, engine.vocab_size), None, param)]
    add_special = req.add_special_tokens if req.HasField("add_special_tokens") else True
    return prompts_of(req.prompt if req.HasField("prompt") else None, "prompt", engine,
                      add_special=add_special, most=settings.max_completion_prompts)


def _max_tokens(req: completion_pb2.CreateCompletionRequest, prompt_len: int, echo: bool,
                max_model_len: int) -> int:
    """max_new tokens for one prompt; 0 only with echo (returned as 0)."""
    if not req.HasField("max_tokens"):
        return max(1, min(DEFAULT_MAX_TOKENS, max_model_len - prompt_len))
    if req.max_tokens == 0 and echo:
        return 0
    return v.max_tokens("max_tokens", req.max_tokens, prompt_len, max_model_len)


def _refuse_unsupported(req: completion_pb2.CreateCompletionRequest, n: int) -> None:
    if req.suffix:
        raise InvalidArgument(
            "suffix (fill-in-the-middle) is not supported; send the whole prompt",
            param="suffix", reason="UNSUPPORTED_FIELD",
        )
    if req.HasField("best_of") and req.best_of != n:
        raise InvalidArgument(
            f"best_of ({req.best_of}) must equal n ({n}): server-side best-of is not supported",
            param="best_of", reason="UNSUPPORTED_FIELD",
        )


def completion_params(
    req: completion_pb2.CreateCompletionRequest, settings: ServerSettings, engine: Engine,
    extra_fields: frozenset[str],
) -> GenerationParams:
    p = sampling_from_body(req, settings, engine.vocab_size, engine.sampling_defaults())
    if req.HasField("logprobs"):
        p.logprobs = sampling.logprobs_count("logprobs", req.logprobs, settings)
    if "engine_data" in extra_fields and p.logprobs is None:
        p.logprobs = 0  # engine_data carries the sampled tokens' logprobs
    if req.echo and req.HasField("logprobs") and p.prompt_logprobs is None:
        p.prompt_logprobs = p.logprobs  # the echoed positions' logprobs (vLLM)
    p.stream_interval = v.stream_interval(req.stream_options)
    p.kv_transfer_params = read_kv_transfer(req)  # as vLLM's: every prompt's, as given
    return p


def build_completion_plan(
    req: completion_pb2.CreateCompletionRequest,
    engine: Engine,
    settings: ServerSettings,
    *,
    served_model: str,
    caller: Caller,
    stream: bool,
) -> CompletionPlan:
    """The body's head, sampling and prompts (each its own engine request),
    its tail, the plan."""
    head = read_head(req, "cmpl", engine, served_model=served_model, caller=caller)
    params = completion_params(req, settings, engine, head.extra_fields)
    _refuse_unsupported(req, params.n)
    prompts = parse_prompts(req, engine, settings)
    tail = read_tail(req, settings, caller)
    requests, echo_only = _engine_requests(req, params, prompts, engine, head=head, tail=tail,
                                           stream=stream)
    return CompletionPlan(
        id=head.request_id,
        requests=requests,
        prompts=prompts,
        model=head.model,
        n=params.n,
        echo=bool(req.echo),
        echo_only=echo_only,
        logprobs=params.logprobs if req.HasField("logprobs") else None,
        return_token_ids=bool(req.return_token_ids),
        as_token_ids=tail.as_token_ids,
        extra_fields=head.extra_fields,
        include_usage=tail.include_usage,  # (--enable-force-include-usage: on every stream)
        continuous_usage=tail.continuous_usage,
    )


def _engine_requests(
    req: completion_pb2.CreateCompletionRequest, params: GenerationParams, prompts: list[Prompt],
    engine: Engine, *, head: BodyHead, tail: BodyTail, stream: bool,
) -> tuple[list[EngineRequest], bool]:
    """One engine request per prompt (its own max_tokens: the prompt's room),
    and whether the body only echoes (max_tokens 0 with echo)."""
    echo = bool(req.echo)
    requests = []
    echo_only = False
    for i, prompt in enumerate(prompts):
        p = dataclasses.replace(params, stop=list(params.stop),
                                stop_token_ids=list(params.stop_token_ids))
        p.max_tokens = _max_tokens(req, len(prompt.token_ids), echo, engine.max_model_len)
        if p.max_tokens == 0:  # echo only: one token is generated and not reported
            echo_only = True
            p.max_tokens = 1
            p.min_tokens = 0
        sampling.check_min_tokens(p)
        requests.append(engine_request(
            head, tail, prompt.token_ids, p, stream=stream,
            request_id=None if len(prompts) == 1 else f"{head.request_id}-{i}"))
    return requests, echo_only
