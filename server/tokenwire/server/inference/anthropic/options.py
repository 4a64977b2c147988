"""A Messages request's options beyond its conversation, into the chat it
runs as: `thinking` (the template's enable_thinking; for "enabled",
budget_tokens as vLLM's Messages API passes it, the chat's
thinking_token_budget the engine enforces), vLLM's `cache_salt` and
`chat_template_kwargs`, and chat's `return_token_ids` and `nvext` (token
in, token out: docs/agents.md)."""

from __future__ import annotations

from typing import Any

from tokenwire.server.core.errors import InvalidArgument
from tokenwire.v1 import anthropic_pb2, chat_pb2

MIN_THINKING_BUDGET = 1024  # vLLM's (and Anthropic's) least budget_tokens


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
    if chat.HasField("max_tokens") and tokens >= chat.max_tokens:
        raise _bad("thinking.budget_tokens must be less than max_tokens",
                   "thinking.budget_tokens", "VALUE_OUT_OF_RANGE")
    chat.nvext.max_thinking_tokens = tokens


def extensions(req: anthropic_pb2.CreateMessageRequest,
                chat: chat_pb2.CreateChatCompletionRequest) -> None:
    """vLLM's cache_salt and chat_template_kwargs, and chat's
    return_token_ids and nvext (token in, token out), as chat reads them."""
    chat.cache_salt = req.cache_salt
    if req.HasField("chat_template_kwargs"):
        chat.chat_template_kwargs.CopyFrom(req.chat_template_kwargs)
    if req.HasField("return_token_ids"):
        chat.return_token_ids = req.return_token_ids
    if req.HasField("nvext"):
        if req.nvext.HasField("max_thinking_tokens"):
            raise _bad("nvext.max_thinking_tokens is not taken on Messages: send "
                       "thinking {\"type\": \"enabled\", \"budget_tokens\": N}",
                       "nvext.max_thinking_tokens", "VALUE_NOT_ALLOWED")
        chat.nvext.CopyFrom(req.nvext)
