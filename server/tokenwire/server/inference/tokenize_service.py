"""Tokenize / detokenize (vLLM `/tokenize`, `/detokenize` shapes)."""

from __future__ import annotations

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Engine
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.shared.identity import check_model
from tokenwire.server.inference.shared.messages import (
    check_render_flags,
    messages_to_dicts,
    render_options,
)
from tokenwire.server.inference.shared.prompt_chars import rendered_chars
from tokenwire.server.inference.turns import TurnTemplates
from tokenwire.v1 import tokenize_pb2


def tokenize(
    req: tokenize_pb2.TokenizeRequest, engine: Engine, turns: TurnTemplates, *,
    served_model: str, trust_template: bool = False,
) -> tokenize_pb2.TokenizeResponse:
    check_model(req.model, served_model, engine.lora_names())
    has_prompt = req.HasField("prompt")
    if has_prompt == bool(req.messages):
        raise InvalidArgument("give exactly one of prompt and messages",
                              param="prompt", reason="FIELDS_CONFLICT")
    param, chars = ("prompt", len(req.prompt)) if has_prompt else rendered_chars(req)
    v.text_fits(param, chars, engine.max_model_len, engine.max_token_chars)
    if req.next_turn:
        if has_prompt:
            raise InvalidArgument("next_turn renders messages, not a prompt", param="next_turn",
                                  reason="FIELDS_CONFLICT")
        check_render_flags(req)
        options = render_options(req, trust_template=trust_template)
        previous = v.token_ids("previous_completion_ids", req.previous_completion_ids,
                               engine.vocab_size)
        ids = turns.suffix(options, previous, messages_to_dicts(req.messages), param="messages")
    elif has_prompt:
        add_special = req.add_special_tokens if req.HasField("add_special_tokens") else True
        ids = engine.encode(req.prompt, add_special_tokens=add_special)
    else:
        check_render_flags(req)
        options = render_options(req, trust_template=trust_template)
        ids = engine.render_chat(messages_to_dicts(req.messages), options)
        if req.HasField("add_special_tokens") and req.add_special_tokens:
            ids = engine.encode("", add_special_tokens=True) + ids
    resp = tokenize_pb2.TokenizeResponse(count=len(ids), max_model_len=engine.max_model_len,
                                         tokens=ids)
    if req.return_token_strs:
        resp.token_strs.extend(engine.token_text(t) for t in ids)
    return resp


def detokenize(
    req: tokenize_pb2.DetokenizeRequest, engine: Engine, *, served_model: str
) -> tokenize_pb2.DetokenizeResponse:
    check_model(req.model, served_model, engine.lora_names())
    if len(req.tokens) > engine.max_model_len:
        raise InvalidArgument(
            f"tokens: {len(req.tokens)} ids are more than the context window of "
            f"{engine.max_model_len}", param="tokens", reason="TOO_MANY_ITEMS",
        )
    ids = v.token_ids("tokens", req.tokens, engine.vocab_size)
    return tokenize_pb2.DetokenizeResponse(prompt=engine.decode(ids, skip_special_tokens=False))
