"""CreateCompletionRequest (proto) -> a validated CompletionPlan (domain).

A completion body holds one prompt or a batch (a list of strings or of id
lists); each prompt becomes its own EngineRequest with `n` choices, and the
response indexes choices prompt_index * n + choice (OpenAI's order).
Fields spelled as in chat are read by inference/shared/ (sampling.py,
tenant_policy.py, nvext.py).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Caller, Engine, EngineRequest, GenerationParams
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.shared import sampling
from tokenwire.server.inference.shared.identity import check_model, lora_of, new_request_id
from tokenwire.server.inference.shared.logprobs import as_token_ids
from tokenwire.server.inference.shared.nvext import check_extra_fields
from tokenwire.server.inference.shared.sampling import sampling_from_body
from tokenwire.server.inference.shared.tenant_policy import body_priority, pick_cache_salt
from tokenwire.v1 import completion_pb2

DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for completions


@dataclasses.dataclass
class Prompt:
    """One prompt of a completion body: its ids, and its text when it was
    sent as text (echo repeats it as sent)."""

    token_ids: list[int]
    text: str | None
    param: str  # the field it came from, for errors


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


def _ids(param: str, values: Any, engine: Engine) -> list[int]:
    """Token ids from JSON numbers (a struct_pb2 list), checked: whole,
    non-negative, in the vocabulary; the length is checked before the walk."""
    v.prompt_fits(param, len(values), engine.max_model_len)
    out: list[int] = []
    vocab = engine.vocab_size
    for i, x in enumerate(values):
        number = x.number_value
        if not math.isfinite(number) or number < 0 or number != int(number):
            raise InvalidArgument(
                f"{param}[{i}] = {number:g} is not a token id (a non-negative integer)",
                param=param, reason="INVALID_FORMAT",
            )
        if number >= vocab:
            raise InvalidArgument(
                f"{param}[{i}] = {number:g} is not a token id: the vocabulary has {vocab} ids "
                f"(0..{vocab - 1})", param=param, reason="TOKEN_ID_OUT_OF_VOCAB",
            )
        out.append(int(number))
    return out


def _text(param: str, text: str, engine: Engine, add_special: bool) -> list[int]:
    v.text_fits(param, len(text), engine.max_model_len, engine.max_token_chars)
    if not text:
        raise InvalidArgument(f"{param}: the prompt is empty", param=param, reason="PROMPT_EMPTY")
    ids = engine.encode(text, add_special_tokens=add_special)
    v.prompt_fits(param, len(ids), engine.max_model_len)
    return ids


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
    value = req.prompt
    kind = value.WhichOneof("kind") if req.HasField("prompt") else None
    if kind is None or kind == "null_value":
        raise InvalidArgument("prompt is required (a string, a list of strings, a list of token "
                              "ids or a list of id lists)", param="prompt", reason="FIELD_REQUIRED")
    if kind == "string_value":
        return [Prompt(_text("prompt", value.string_value, engine, add_special),
                       value.string_value, "prompt")]
    if kind != "list_value":
        raise InvalidArgument("prompt must be a string or a list",
                              param="prompt", reason="INVALID_TYPE")
    items = value.list_value.values
    if not items:
        raise InvalidArgument("prompt: the list is empty", param="prompt", reason="EMPTY_VALUE")
    kinds = {x.WhichOneof("kind") for x in items}
    if kinds == {"number_value"}:
        return [Prompt(_ids("prompt", items, engine), None, "prompt")]
    if len(kinds) > 1 or kinds.pop() not in ("string_value", "list_value"):
        raise InvalidArgument(
            "prompt: a list must hold only token ids, only strings or only id lists (not a mix)",
            param="prompt", reason="INVALID_TYPE",
        )
    if len(items) > settings.max_completion_prompts:
        raise InvalidArgument(
            f"prompt: {len(items)} prompts; at most {settings.max_completion_prompts} per request",
            param="prompt", reason="TOO_MANY_ITEMS",
        )
    prompts = []
    for i, item in enumerate(items):
        param = f"prompt[{i}]"
        if item.HasField("string_value"):
            prompts.append(Prompt(_text(param, item.string_value, engine, add_special),
                                  item.string_value, param))
            continue
        inner = item.list_value.values
        if any(not x.HasField("number_value") for x in inner):
            raise InvalidArgument(f"{param}: an id list must hold only token ids", param=param,
                                  reason="INVALID_TYPE")
        prompts.append(Prompt(_ids(param, inner, engine), None, param))
    return prompts


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
    model = check_model(req.model, served_model, engine.lora_names())
    response_id = new_request_id("cmpl", req.request_id, caller.request_id)
    extra_fields = check_extra_fields(req.nvext)
    params = completion_params(req, settings, engine, extra_fields)
    _refuse_unsupported(req, params.n)
    echo = bool(req.echo)
    prompts = parse_prompts(req, engine, settings)
    salt = pick_cache_salt(caller, req.nvext.cache_salt, req.cache_salt)
    priority = body_priority(req, settings, caller)
    lora = lora_of(model, served_model)
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
        requests.append(EngineRequest(
            request_id=response_id if len(prompts) == 1 else f"{response_id}-{i}",
            prompt_token_ids=prompt.token_ids,
            params=p,
            cache_salt=salt,
            priority=priority,
            stream=stream,
            lora=lora,
        ))
    return CompletionPlan(
        id=response_id,
        requests=requests,
        prompts=prompts,
        model=model,
        n=params.n,
        echo=echo,
        echo_only=echo_only,
        logprobs=params.logprobs if req.HasField("logprobs") else None,
        return_token_ids=bool(req.return_token_ids),
        as_token_ids=as_token_ids(req, settings.return_tokens_as_token_ids),
        extra_fields=extra_fields,
        # --enable-force-include-usage: both, on every stream (vLLM's)
        include_usage=settings.enable_force_include_usage
        or bool(req.stream_options.include_usage),
        continuous_usage=settings.enable_force_include_usage
        or bool(req.stream_options.continuous_usage_stats),
    )

