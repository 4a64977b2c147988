"""A chat body read once (`ChatBody.read`): its head (model, request id,
extra fields: inference/shared/openai_body.py), where its prompt comes from
(the prompt mode), the one max_tokens decision, the tool choice, and the
chat-only fields its sampling and response read. What every kind reads
alike (the sampling ranges, messages, token media) is read from the body
by inference/shared/ when the plan's steps need it (chat/request.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Caller, Engine
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.shared.kv_transfer import (
    REUSED_IDS,
    read_kv_transfer,
    reused_prompt_ids,
)
from tokenwire.server.inference.shared.messages import struct_to_dict
from tokenwire.server.inference.shared.openai_body import BodyHead, read_head
from tokenwire.server.inference.shared.prompt_chars import rendered_chars
from tokenwire.server.inference.shared.sampling import opt
from tokenwire.v1 import chat_pb2

# Where a chat's prompt comes from: token ids as given (`tokens` or
# nvext.token_data, with nvext's media), or the messages, their text joined
# (nvext.use_raw_prompt) or rendered by the chat template. Messages with
# images are known once converted (chat/request.py).
PromptMode = Literal["ids", "raw", "template"]
NV_MEDIA = ("content_parts", "features", "mm_features")  # nvext's media of a token-in prompt


@dataclasses.dataclass(frozen=True)
class ChatBody:
    """The fields of a chat body the plan's steps read, each read once."""

    req: chat_pb2.CreateChatCompletionRequest  # for the readers shared with other kinds
    head: BodyHead
    mode: PromptMode
    prompt_param: str  # the field the prompt comes in: tokens, nvext.token_data, messages
    given_ids: Sequence[int]  # the ids as given (mode "ids"), else empty
    add_special: bool  # add_special_tokens (default off for chat)
    nv_media: tuple[str, ...]  # nvext's media fields given (NV_MEDIA order)
    max_tokens_asked: tuple[str, int | None]  # the max_tokens field as asked (None: unset)
    logprobs: bool
    top_logprobs: int | None
    response_format: chat_pb2.ResponseFormat | None
    tool_choice_kind: str | None  # the tool_choice Value's kind (None: not given)
    tool_choice: str | dict[str, Any] | None  # a name, a named function, or None
    parallel_tool_calls: bool | None
    include_reasoning: bool
    return_token_ids: bool
    speculative_prefill: bool
    role: str  # the reply's role
    echo: bool  # put the last message's text before the reply (vLLM's echo)
    # A disaggregating router's KV handshake for the engine (its forwarded
    # prompt ids taken out: they are the prompt), None: none.
    kv_transfer: dict[str, Any] | None = None

    @classmethod
    def read(cls, req: chat_pb2.CreateChatCompletionRequest, engine: Engine,
             settings: ServerSettings, *, served_model: str, caller: Caller) -> ChatBody:
        """Read `req`, checking its head, where its prompt comes from and
        (messages) the cheap length limit; the other fields are checked by
        the steps that use them."""
        head = read_head(req, "chatcmpl", engine, served_model=served_model, caller=caller)
        if req.HasField("return_prompt_text") and req.return_prompt_text:
            raise InvalidArgument(
                "return_prompt_text: the rendered prompt is not returned as text; ask "
                "return_token_ids for prompt_token_ids (or /v1/chat/completions/render)",
                param="return_prompt_text", reason="UNSUPPORTED_FIELD")
        kv = read_kv_transfer(req)
        given_param, given_ids = given_prompt_ids(req)
        reused = reused_prompt_ids(
            kv, media=bool(kv) and "prompt_token_ids" in kv and _has_media(req))
        if reused is not None and not given_ids:  # the decode side's reuse (vLLM's)
            given_param, given_ids = REUSED_IDS, reused
        kv = kv or None  # nothing left once the ids are out: none for the engine (vLLM's)
        if not given_ids:
            # Cheap limit first: a text too long for the window by its length
            # alone (messages with every rendered field, tools, template
            # kwargs) is refused before anything is converted, rendered or
            # tokenized. (The rendered text itself is bounded by the engine:
            # engine/guarded.py.)
            param, chars = rendered_chars(req)
            v.text_fits(param, chars, engine.max_model_len, engine.max_token_chars)
        nv = req.nvext
        choice_kind = req.tool_choice.WhichOneof("kind") if req.HasField("tool_choice") else None
        return cls(
            req=req, head=head, mode=_mode(req, bool(given_ids)),
            prompt_param=given_param if given_ids else "messages", given_ids=given_ids,
            add_special=bool(opt(req, "add_special_tokens")),
            nv_media=tuple(name for name in NV_MEDIA
                           if (nv.content_parts if name == "content_parts" else nv.HasField(name))),
            max_tokens_asked=max_tokens_asked(req),
            logprobs=bool(opt(req, "logprobs")), top_logprobs=opt(req, "top_logprobs"),
            response_format=opt(req, "response_format"),
            tool_choice_kind=choice_kind, tool_choice=_choice(req.tool_choice, choice_kind),
            parallel_tool_calls=opt(req, "parallel_tool_calls"),
            include_reasoning=(req.include_reasoning if req.HasField("include_reasoning")
                               else True),
            return_token_ids=bool(opt(req, "return_token_ids")),
            speculative_prefill=bool(nv.agent_hints.speculative_prefill),
            role=_reply_role(req, settings), echo=bool(opt(req, "echo")),
            kv_transfer=kv,
        )


def given_prompt_ids(req: chat_pb2.CreateChatCompletionRequest) -> tuple[str, Any]:
    """The prompt given as ids, with the field it came in: `tokens`
    (prime-rl's /v1/chat/completions/tokens) or nvext.token_data; empty
    when the messages are to be rendered. Both at once are refused."""
    if len(req.tokens) > 0:
        if len(req.nvext.token_data) > 0:
            raise InvalidArgument("tokens and nvext.token_data both give the prompt; send one",
                                  param="tokens", reason="FIELDS_CONFLICT")
        return "tokens", req.tokens
    return "nvext.token_data", req.nvext.token_data


def max_tokens_asked(req: chat_pb2.CreateChatCompletionRequest) -> tuple[str, int | None]:
    """The one max_tokens decision: max_completion_tokens when set (OpenAI's
    newer name, taking precedence), else max_tokens; None: the window's rest."""
    if req.HasField("max_completion_tokens"):
        return "max_completion_tokens", req.max_completion_tokens
    return "max_tokens", opt(req, "max_tokens")


def _mode(req: chat_pb2.CreateChatCompletionRequest, given_ids: bool) -> PromptMode:
    if given_ids:
        return "ids"
    nv = req.nvext
    return "raw" if nv.HasField("use_raw_prompt") and nv.use_raw_prompt else "template"


def _has_media(req: chat_pb2.CreateChatCompletionRequest) -> bool:
    """Whether a message has a part other than text (vLLM then renders the
    messages and ignores a handshake's forwarded ids)."""
    for m in req.messages:
        if any(part.WhichOneof("part") not in (None, "text") for part in m.parts):
            return True
        if m.content.WhichOneof("kind") == "list_value":
            for item in m.content.list_value.values:
                kind = item.struct_value.fields.get("type") if item.HasField(
                    "struct_value") else None
                if kind is not None and kind.string_value != "text":
                    return True
    return False


def _choice(value: Any, kind: str | None) -> str | dict[str, Any] | None:
    """tool_choice as the parsers take it: a string, a named function, or
    None (not given, null, or of a kind tools_and_parsing refuses)."""
    if kind == "string_value":
        return str(value.string_value)
    if kind == "struct_value":
        return struct_to_dict(value.struct_value, "tool_choice")
    return None


def _reply_role(req: chat_pb2.CreateChatCompletionRequest, settings: ServerSettings) -> str:
    """vLLM's: --response-role when the request adds the generation prompt
    (its default), else the role of the last message (which it continues)."""
    add_gen = req.add_generation_prompt if req.HasField("add_generation_prompt") else True
    if add_gen or not req.messages:
        return settings.response_role
    return req.messages[-1].role or settings.response_role
