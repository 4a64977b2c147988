"""What chat and completion bodies (OpenAI's, with Dynamo's nvext) read
alike, written once for both builders: first who the body is (`read_head`:
the model or LoRA adapter it names, its request id, the nvext.extra_fields
it asks), last what the caller's tenant allows it and how its answer is
delivered (`read_tail`: priority, cache salt, token ids spelled as ids,
usage on a stream); with them, the engine request a prompt of the body
runs as (`engine_request`). Each kind reads its own fields in between."""

from __future__ import annotations

import dataclasses
from typing import Any

from tokenwire.server.core.domain import Caller, Engine, EngineRequest, GenerationParams
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.shared.identity import check_model, lora_of, new_request_id
from tokenwire.server.inference.shared.logprobs import as_token_ids
from tokenwire.server.inference.shared.nvext import check_extra_fields
from tokenwire.server.inference.shared.tenant_policy import body_priority, pick_cache_salt


@dataclasses.dataclass(frozen=True)
class BodyHead:
    """Who a body is: the model reported (the served model's first name, or
    an adapter's), the adapter it selects (None: the base), its request id
    (the response id), and the nvext.extra_fields asked."""

    model: str
    lora: str | None
    request_id: str
    extra_fields: frozenset[str]


def read_head(req: Any, prefix: str, engine: Engine, *, served_model: str,
              caller: Caller) -> BodyHead:
    """The body's head, checked in this order: model, request id (`prefix`-
    the call's x-request-id, or a new one, when the body gives none), the
    extra fields' names."""
    model = check_model(req.model, served_model, engine.lora_names())
    request_id = new_request_id(prefix, req.request_id, caller.request_id)
    return BodyHead(model=model, lora=lora_of(model, served_model), request_id=request_id,
                    extra_fields=check_extra_fields(req.nvext))


@dataclasses.dataclass(frozen=True)
class BodyTail:
    """What the tenant allows a body (priority, cache salt) and how its
    answer goes out (logprob tokens as "token_id:N", usage on a stream)."""

    priority: int
    cache_salt: str | None
    as_token_ids: bool
    include_usage: bool
    continuous_usage: bool


def read_tail(req: Any, settings: ServerSettings, caller: Caller) -> BodyTail:
    """The body's tail, checked in this order: priority (root, else
    nvext.agent_hints), cache salt (nvext's, else the root's); usage on
    every stream with --enable-force-include-usage (vLLM's)."""
    priority = body_priority(req, settings, caller)
    salt = pick_cache_salt(caller, req.nvext.cache_salt, req.cache_salt)
    force_usage = settings.enable_force_include_usage
    return BodyTail(
        priority=priority,
        cache_salt=salt,
        as_token_ids=as_token_ids(req, settings.return_tokens_as_token_ids),
        include_usage=force_usage or bool(req.stream_options.include_usage),
        continuous_usage=force_usage or bool(req.stream_options.continuous_usage_stats),
    )


def engine_request(head: BodyHead, tail: BodyTail, prompt_ids: list[int],
                   params: GenerationParams, *, stream: bool,
                   request_id: str | None = None) -> EngineRequest:
    """The engine request a prompt of the body runs as: the body's id (or
    `request_id`: one prompt of a batch), its adapter, priority and salt."""
    return EngineRequest(
        request_id=head.request_id if request_id is None else request_id,
        prompt_token_ids=prompt_ids,
        params=params,
        cache_salt=tail.cache_salt,
        priority=tail.priority,
        stream=stream,
        lora=head.lora,
    )
