"""Tokenize / detokenize (vLLM `/tokenize`, `/detokenize` shapes). Messages
with images are tokenized as vLLM's /tokenize does: rendered by chat's
image path (the engine's renderer and processor, admitted, off the event
loop) into the expanded ids, each image's placeholder run included; a
`next_turn` with images the same way, after the turn templates'
placeholder conversation (the suffix a Session continuation would run)."""

from __future__ import annotations

import dataclasses
from typing import Any

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Engine, RenderOptions
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.offload import Offload
from tokenwire.server.inference.shared.identity import check_model
from tokenwire.server.inference.shared.messages import (
    check_render_flags,
    has_media,
    messages_to_dicts,
    render_options,
)
from tokenwire.server.inference.shared.prompt_chars import rendered_chars
from tokenwire.server.inference.turns import (
    PLACEHOLDER,
    TurnTemplate,
    TurnTemplates,
    placed_error,
)
from tokenwire.v1 import tokenize_pb2


@dataclasses.dataclass
class MediaMessages:
    """Messages with images, to be rendered by the engine (tokenize_call);
    with `next_turn`, after the turn template's placeholder conversation."""

    messages: list[dict[str, Any]]
    options: RenderOptions
    add_special: bool
    next_turn: TurnTemplate | None = None
    previous: list[int] = dataclasses.field(default_factory=list)


async def tokenize_call(
    req: tokenize_pb2.TokenizeRequest, engine: Engine, turns: TurnTemplates, offload: Offload,
    *, served_model: str, trust_template: bool = False,
) -> tokenize_pb2.TokenizeResponse:
    """The Tokenize RPC: `tokenize` off the event loop; messages with images
    then rendered by the engine as chat renders them (admitted), so the ids
    are the expanded ids the engine would get."""
    out = await offload.prepare(req, lambda: tokenize(
        req, engine, turns, served_model=served_model, trust_template=trust_template))
    if isinstance(out, tokenize_pb2.TokenizeResponse):
        return out
    if out.next_turn is not None:  # the suffix, its new images expanded
        try:
            prepared = await engine.render_chat_media([*PLACEHOLDER, *out.messages], out.options)
        except InvalidArgument as err:
            raise placed_error(err) from err
        ids = out.next_turn.following(prepared.prompt_token_ids, out.previous, "messages")
        v.prompt_fits("messages", len(ids), engine.max_model_len)
        return _response(req, engine, ids)
    prepared = await engine.render_chat_media(out.messages, out.options)
    ids = list(prepared.prompt_token_ids)
    v.prompt_fits("messages", len(ids), engine.max_model_len)
    if out.add_special:
        ids = engine.encode("", add_special_tokens=True) + ids
    return _response(req, engine, ids)


def tokenize(
    req: tokenize_pb2.TokenizeRequest, engine: Engine, turns: TurnTemplates, *,
    served_model: str, trust_template: bool = False,
) -> tokenize_pb2.TokenizeResponse | MediaMessages:
    """The request's ids; for messages with images, what the engine renders
    (MediaMessages: tokenize_call renders them)."""
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
        messages = messages_to_dicts(req.messages, media=True)
        if has_media(messages):  # a next turn with images: the engine expands them
            return MediaMessages(messages, options, False, turns.get(options, "messages"),
                                 previous)
        ids = turns.suffix(options, previous, messages, param="messages")
    elif has_prompt:
        add_special = req.add_special_tokens if req.HasField("add_special_tokens") else True
        ids = engine.encode(req.prompt, add_special_tokens=add_special)
    else:
        check_render_flags(req)
        options = render_options(req, trust_template=trust_template)
        messages = messages_to_dicts(req.messages, media=True)
        add_special = req.HasField("add_special_tokens") and req.add_special_tokens
        if has_media(messages):
            return MediaMessages(messages, options, add_special)
        ids = engine.render_chat(messages, options)
        if add_special:
            ids = engine.encode("", add_special_tokens=True) + ids
    return _response(req, engine, ids)


def _response(req: tokenize_pb2.TokenizeRequest, engine: Engine, ids: list[int]
              ) -> tokenize_pb2.TokenizeResponse:
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
