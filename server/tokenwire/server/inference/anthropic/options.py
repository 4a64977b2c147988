"""A Messages request's options beyond its conversation, into the chat it
runs as: `thinking` (the template's enable_thinking; for "enabled",
budget_tokens as vLLM's Messages API passes it, the chat's
thinking_token_budget the engine enforces), `output_config` (effort: the
template's reasoning_effort; format: chat's json_schema response_format, as
vLLM's), vLLM's `cache_salt`, `chat_template_kwargs` and
`kv_transfer_params` / `ec_transfer_params` (chat's fields: chat reads and
checks them), and chat's `return_token_ids` and `nvext` (token in, token
out: docs/agents.md)."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format, struct_pb2

from tokenwire.server.core.errors import InvalidArgument
from tokenwire.v1 import anthropic_pb2, chat_pb2

MIN_THINKING_BUDGET = 1024  # vLLM's (and Anthropic's) least budget_tokens
EFFORTS = ("low", "medium", "high", "xhigh", "max")  # vLLM's AnthropicEffort


def _bad(message: str, param: str, reason: str) -> InvalidArgument:
    return InvalidArgument(message, param=param, reason=reason)


def token_in(req: Any) -> bool:
    """The prompt comes as ids (nvext.token_data; CreateMessageRequest only)."""
    return isinstance(req, anthropic_pb2.CreateMessageRequest) and bool(req.nvext.token_data)


def thinking(req: Any, chat: chat_pb2.CreateChatCompletionRequest, *, budget: bool = True
             ) -> None:
    """The template's enable_thinking, and for "enabled" the budget as
    vLLM's Messages API passes it: budget_tokens (at least 1024, less than
    max_tokens) is the chat's thinking_token_budget (nvext.max_thinking_tokens
    here), which the engine enforces (with --reasoning-parser)."""
    if not req.HasField("thinking"):
        return
    kind = req.thinking.fields["type"].string_value if "type" in req.thinking.fields else ""
    if kind not in ("enabled", "disabled", "adaptive"):
        raise _bad(f"thinking.type '{kind}' is not one of ['adaptive', 'disabled', 'enabled']",
                   "thinking.type", "VALUE_NOT_ALLOWED")
    chat.chat_template_kwargs.update({"enable_thinking": kind != "disabled"})
    if kind == "disabled" and _effort_given(req):  # vLLM's: disabled replaces the effort
        chat.chat_template_kwargs.update({"reasoning_effort": "none"})
    if kind != "enabled" or not budget:  # (count_tokens: no budget, as vLLM's)
        return
    given = req.thinking.fields.get("budget_tokens")
    if given is None or given.WhichOneof("kind") != "number_value" \
            or given.number_value != int(given.number_value):
        raise _bad("thinking.budget_tokens must be an integer (thinking.type 'enabled')",
                   "thinking.budget_tokens",
                   "FIELD_REQUIRED" if given is None else "INVALID_TYPE")
    tokens = int(given.number_value)
    if tokens < MIN_THINKING_BUDGET:
        raise _bad(f"thinking.budget_tokens must be at least {MIN_THINKING_BUDGET}",
                   "thinking.budget_tokens", "VALUE_OUT_OF_RANGE")
    if chat.HasField("max_tokens") and tokens >= chat.max_tokens and not _prefill_leg(req):
        raise _bad("thinking.budget_tokens must be less than max_tokens",
                   "thinking.budget_tokens", "VALUE_OUT_OF_RANGE")
    chat.nvext.max_thinking_tokens = tokens


def _prefill_leg(req: Any) -> bool:
    """A P/D prefill leg (kv_transfer_params.do_remote_decode set): sent
    with max_tokens 1, so vLLM skips the budget's bound by max_tokens."""
    if not isinstance(req, anthropic_pb2.CreateMessageRequest) \
            or not req.HasField("kv_transfer_params"):
        return False
    flag = req.kv_transfer_params.fields.get("do_remote_decode")
    return flag is not None and bool(json_format.MessageToDict(flag))


def _effort_given(req: Any) -> bool:
    return req.HasField("output_config") and "effort" in req.output_config.fields


def output_config(req: Any, chat: chat_pb2.CreateChatCompletionRequest) -> None:
    """vLLM's _handle_output_config: `format` {"type": "json_schema",
    "schema": {...}} becomes chat's response_format (json_schema named
    "json_schema"; no schema: nothing asked); `effort` the template's
    reasoning_effort, which turns enable_thinking on unless the body's
    chat_template_kwargs sets it (vLLM's ChatCompletionRequest). Run before
    `thinking`, which a "disabled" thinking overrides."""
    if not req.HasField("output_config"):
        return
    fields = req.output_config.fields  # (other keys ignored, as vLLM's model)
    if "format" in fields and fields["format"].WhichOneof("kind") != "null_value":
        _format(fields["format"], chat)
    effort = fields.get("effort")
    if effort is None or effort.WhichOneof("kind") == "null_value":
        return
    if effort.WhichOneof("kind") != "string_value" or effort.string_value not in EFFORTS:
        raise _bad(f"output_config.effort must be one of {list(EFFORTS)}",
                   "output_config.effort", "VALUE_NOT_ALLOWED")
    user_set = "enable_thinking" in chat.chat_template_kwargs.fields
    chat.chat_template_kwargs.update({"reasoning_effort": effort.string_value})
    if not user_set:
        chat.chat_template_kwargs.update({"enable_thinking": True})


def _format(value: struct_pb2.Value, chat: chat_pb2.CreateChatCompletionRequest) -> None:
    if value.WhichOneof("kind") != "struct_value":
        raise _bad("output_config.format must be an object", "output_config.format",
                   "INVALID_TYPE")
    fmt = value.struct_value.fields
    ftype = fmt["type"].string_value if "type" in fmt else "json_schema"
    if ftype != "json_schema":
        raise _bad(f"output_config.format.type '{ftype}' is not allowed (json_schema is)",
                   "output_config.format.type", "VALUE_NOT_ALLOWED")
    schema = fmt.get("schema")
    if schema is None or schema.WhichOneof("kind") == "null_value":
        return  # (vLLM's: a format without a schema asks nothing)
    if schema.WhichOneof("kind") != "struct_value":
        raise _bad("output_config.format.schema must be a JSON Schema object",
                   "output_config.format.schema", "INVALID_TYPE")
    chat.response_format.type = "json_schema"
    chat.response_format.json_schema.name = "json_schema"
    chat.response_format.json_schema.schema.CopyFrom(schema.struct_value)


def extensions(req: anthropic_pb2.CreateMessageRequest,
                chat: chat_pb2.CreateChatCompletionRequest) -> None:
    """vLLM's cache_salt and chat_template_kwargs, and chat's
    return_token_ids and nvext (token in, token out), as chat reads them."""
    chat.cache_salt = req.cache_salt
    if req.HasField("chat_template_kwargs"):
        chat.chat_template_kwargs.CopyFrom(req.chat_template_kwargs)
    if req.HasField("return_token_ids"):
        chat.return_token_ids = req.return_token_ids
    for name in ("kv_transfer_params", "ec_transfer_params"):  # chat's path reads them
        if req.HasField(name):
            getattr(chat, name).CopyFrom(getattr(req, name))
    if req.HasField("nvext"):
        if req.nvext.HasField("max_thinking_tokens"):
            raise _bad("nvext.max_thinking_tokens is not taken on Messages: send "
                       "thinking {\"type\": \"enabled\", \"budget_tokens\": N}",
                       "nvext.max_thinking_tokens", "VALUE_NOT_ALLOWED")
        chat.nvext.CopyFrom(req.nvext)
