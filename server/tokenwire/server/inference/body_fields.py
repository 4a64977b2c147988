"""Request fields chat and completion bodies spell alike (OpenAI bodies
with Dynamo's nvext): the sampling fields, nvext.extra_fields and the
priority. Each kind's own fields are read in inference/chat/request.py and
inference/completion/request.py; fields every RPC shares in
inference/request_fields.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Caller, GenerationParams
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference import sampling_rules as rules
from tokenwire.server.inference.request_fields import check_priority, stop_strings
from tokenwire.v1 import chat_pb2

EXTRA_FIELDS = frozenset(
    {"completion_token_ids", "engine_data", "prompt_token_ids", "prompt_logprobs", "routed_experts",
     "timing", "stop_reason", "worker_id"}
)


def opt(msg: Any, name: str) -> Any:
    """Field `name` of `msg` when set, else None."""
    return getattr(msg, name) if msg.HasField(name) else None


def sampling_from_body(
    req: Any, settings: ServerSettings, vocab_size: int, defaults: Mapping[str, Any] | None = None,
) -> GenerationParams:
    """The sampling parameters chat and completion bodies spell alike (the
    root fields and Dynamo's nvext; logprobs and max_tokens are each
    body's own); unset fields take the engine's `defaults` (its generation
    config)."""
    nv = req.nvext
    p = rules.default_params(defaults or {})
    present: dict[str, tuple[str, Any]] = {
        name: (name, getattr(req, name))
        for name in ("n", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
                     "frequency_penalty", "repetition_penalty", "min_tokens", "prompt_logprobs")
        if req.HasField(name)
    }
    for name in ("top_k", "repetition_penalty"):  # older Dynamo put these in nvext
        if name not in present and nv.HasField(name):
            present[name] = (f"nvext.{name}", getattr(nv, name))
    if nv.HasField("max_thinking_tokens"):
        present["thinking_token_budget"] = ("nvext.max_thinking_tokens", nv.max_thinking_tokens)
    rules.apply_ranges(p, present, settings, vocab_size)
    if nv.HasField("greed_sampling") and nv.greed_sampling:
        p.temperature = 0.0
    rules.check_greedy_choices(p, "n")
    if req.HasField("seed"):
        p.seed = v.int_range("seed", req.seed, -(2**63), 2**63 - 1)
    p.stop, stop_ids = stop_strings("stop", req.stop if req.HasField("stop") else None, settings)
    v.token_ids("stop", stop_ids, vocab_size)
    p.stop_token_ids = rules.stop_token_ids("stop_token_ids", [*req.stop_token_ids, *stop_ids],
                                            settings, vocab_size)
    ignore_eos = opt(req, "ignore_eos")
    if ignore_eos is None and nv.HasField("ignore_eos"):
        ignore_eos = nv.ignore_eos
    p.ignore_eos = bool(ignore_eos)
    rules.copy_text_flags(p, req)
    p.logit_bias = rules.logit_bias("logit_bias", req.logit_bias.items(), vocab_size)
    if "prompt_logprobs" in nv.extra_fields and p.prompt_logprobs is None:
        p.prompt_logprobs = 0  # Dynamo: the extra field asks for them
    return p


def check_extra_fields(nv: chat_pb2.NvExtRequest) -> frozenset[str]:
    unknown = sorted(set(nv.extra_fields) - EXTRA_FIELDS)
    if unknown:
        raise InvalidArgument(
            f"nvext.extra_fields: unknown name(s) {unknown}; known: {sorted(EXTRA_FIELDS)}",
            param="nvext.extra_fields", reason="UNKNOWN_EXTRA_FIELD",
        )
    return frozenset(nv.extra_fields)


def body_priority(req: Any, settings: ServerSettings, caller: Caller) -> int:
    """The root priority, else nvext.agent_hints.priority, checked for `caller`."""
    priority = 0
    if req.HasField("priority"):
        priority = req.priority
    elif req.nvext.agent_hints.HasField("priority"):
        priority = req.nvext.agent_hints.priority
    return check_priority(priority, settings, caller)
