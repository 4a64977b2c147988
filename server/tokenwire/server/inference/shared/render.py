"""Render: the GenerateRequest an engine request runs as, without
generating (vLLM's /v1/chat/completions/render and
/v1/completions/render). The plan is built exactly as for
CreateChatCompletion / CreateCompletion (same validation, template,
defaults, clamps: the kind's render, in chat/kind.py and
completion/kind.py); each engine request's prompt ids and resolved
sampling parameters become a GenerateRequest the client can send to
Generate as it is."""

from __future__ import annotations

from google.protobuf import struct_pb2

from tokenwire.server.core.domain import EngineRequest
from tokenwire.v1 import common_pb2, generate_pb2

_COPIED = ("n", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
           "repetition_penalty", "max_tokens", "min_tokens", "ignore_eos", "skip_special_tokens",
           "spaces_between_special_tokens", "include_stop_str_in_output")


def as_generate_request(
    model: str, request: EngineRequest, salt: str
) -> generate_pb2.GenerateRequest:
    """The GenerateRequest that runs `request` (`salt`: the cache salt as the
    caller asked it)."""
    p = request.params
    sp = common_pb2.SamplingParams(**{name: getattr(p, name) for name in _COPIED})
    if p.seed is not None:
        sp.seed = p.seed
    if p.stop:
        sp.stop.CopyFrom(struct_pb2.Value(list_value=struct_pb2.ListValue(
            values=[struct_pb2.Value(string_value=s) for s in p.stop])))
    sp.stop_token_ids.extend(p.stop_token_ids)
    if p.logprobs is not None:
        sp.logprobs = p.logprobs
    if p.prompt_logprobs is not None:
        sp.prompt_logprobs = p.prompt_logprobs
    if p.thinking_token_budget is not None:
        sp.thinking_token_budget = p.thinking_token_budget
    for token_id, bias in p.logit_bias.items():
        sp.logit_bias[token_id] = bias
    out = generate_pb2.GenerateRequest(
        model=model, token_ids=request.prompt_token_ids, sampling_params=sp,
        priority=request.priority, return_token_ids=True,
    )
    # The salt as the caller asked it (the server applies a tenant's domain
    # again when the rendered request is sent).
    if salt:
        out.cache_salt = salt
    if p.kv_transfer_params is not None:  # the handshake, as vLLM's render answers it
        out.kv_transfer_params.update(p.kv_transfer_params)
    return out
