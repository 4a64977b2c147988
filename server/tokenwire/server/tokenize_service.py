"""Tokenize / detokenize (vLLM `/tokenize`, `/detokenize` shapes)."""

from __future__ import annotations

from tokenwire.server import validation as v
from tokenwire.server.chat_request import (
    check_model,
    messages_to_dicts,
    struct_to_dict,
    tools_to_dicts,
)
from tokenwire.server.domain import Engine, RenderOptions
from tokenwire.server.errors import InvalidArgument
from tokenwire.v1 import tokenize_pb2


def tokenize(
    req: tokenize_pb2.TokenizeRequest, engine: Engine, *, served_model: str
) -> tokenize_pb2.TokenizeResponse:
    check_model(req.model, served_model)
    has_prompt = req.HasField("prompt")
    if has_prompt == bool(req.messages):
        raise InvalidArgument("give exactly one of prompt and messages", param="prompt")
    if has_prompt:
        add_special = req.add_special_tokens if req.HasField("add_special_tokens") else True
        ids = engine.encode(req.prompt, add_special_tokens=add_special)
    else:
        add_gen = req.add_generation_prompt if req.HasField("add_generation_prompt") else True
        cont = bool(req.continue_final_message)
        if cont and req.HasField("add_generation_prompt") and add_gen:
            raise InvalidArgument(
                "continue_final_message and add_generation_prompt cannot both be true",
                param="continue_final_message",
            )
        options = RenderOptions(
            add_generation_prompt=add_gen and not cont,
            continue_final_message=cont,
            chat_template=req.chat_template if req.HasField("chat_template") else None,
            template_kwargs=(
                struct_to_dict(req.chat_template_kwargs)
                if req.HasField("chat_template_kwargs")
                else {}
            ),
            tools=tools_to_dicts(req.tools),
        )
        ids = engine.render_chat(messages_to_dicts(req.messages), options)
        if req.HasField("add_special_tokens") and req.add_special_tokens:
            ids = engine.encode("", add_special_tokens=True) + ids
    resp = tokenize_pb2.TokenizeResponse(count=len(ids), max_model_len=engine.max_model_len, tokens=ids)
    if req.return_token_strs:
        resp.token_strs.extend(engine.token_text(t) for t in ids)
    return resp


def detokenize(
    req: tokenize_pb2.DetokenizeRequest, engine: Engine, *, served_model: str
) -> tokenize_pb2.DetokenizeResponse:
    check_model(req.model, served_model)
    ids = v.token_ids("tokens", req.tokens, engine.vocab_size)
    return tokenize_pb2.DetokenizeResponse(prompt=engine.decode(ids, skip_special_tokens=False))
