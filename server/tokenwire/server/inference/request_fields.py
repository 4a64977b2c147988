"""Request-side conversion shared by every RPC: protobuf request fields ->
domain values (model, request id, cache salt, priority, stop strings,
messages, tools, render options), each validated with the field named.

Chat-only conversion lives in inference/chat/request.py; generate's in
inference/generate/service.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from google.protobuf import json_format, struct_pb2

from tokenwire.server.core.domain import Caller, RenderOptions
from tokenwire.server.core.errors import InvalidArgument, NotFound
from tokenwire.server.core.settings import ServerSettings
from tokenwire.v1 import chat_pb2
from tokenwire.wire import DP_RANK_HEADERS

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
MAX_CACHE_SALT = 1024
MAX_REQUEST_ID = 256


def _ints_back(value: Any) -> Any:
    """google.protobuf.Struct holds every number as a double: give integral
    values back as ints (JSON Schema wants `maxLength: 12`, not 12.0)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {k: _ints_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints_back(v) for v in value]
    return value


def struct_to_dict(message: struct_pb2.Struct) -> dict[str, Any]:
    return dict(_ints_back(json_format.MessageToDict(message)))


def check_model(requested: str, served: str, adapters: Collection[str] = ()) -> str:
    """The model a request names: the served model (also when empty) or a
    loaded LoRA adapter's name (vLLM's rule: `model` selects the adapter)."""
    if requested and requested != served:
        if requested in adapters:
            return requested
        known = ", ".join(repr(n) for n in (served, *sorted(adapters)))
        raise NotFound(
            f"model '{requested}' is not served here; this server serves {known}",
            param="model",
            reason="MODEL_NOT_FOUND",
        )
    return served


MAX_SESSION_ID = 256


def pick_session_id(body: str, header: str | None) -> str | None:
    """The session a request belongs to: the body's session_id, else the
    x-session-id metadata; None when neither is given."""
    session = body or header or None
    if session is not None and len(session) > MAX_SESSION_ID:
        raise InvalidArgument(f"session_id must be at most {MAX_SESSION_ID} characters",
                              param="session_id", reason="VALUE_TOO_LONG")
    return session


def pick_dp_rank(body: int | None, body_param: str, header: str | None, dp_size: int) -> int | None:
    """The data-parallel rank a request is pinned to: the body field, else
    the metadata; None lets vLLM balance. Must be below the DP size."""
    param = body_param
    rank = body
    if rank is None and header is not None:
        param = DP_RANK_HEADERS[0]
        try:
            rank = int(header)
        except ValueError:
            raise InvalidArgument(f"{param} must be an integer rank; got {header!r}", param=param,
                                  reason="INVALID_FORMAT") from None
    if rank is None:
        return None
    if not 0 <= rank < dp_size:
        raise InvalidArgument(
            f"{param} must be in [0, {dp_size}) (the engine's --data-parallel-size); got {rank}",
            param=param, reason="VALUE_OUT_OF_RANGE",
        )
    return rank


def lora_of(model: str, served: str) -> str | None:
    """The LoRA adapter a checked model name selects (None: the base)."""
    return None if model == served else model


def new_request_id(prefix: str, requested: str) -> str:
    if requested:
        if len(requested) > MAX_REQUEST_ID:
            raise InvalidArgument(
                f"request_id must be at most {MAX_REQUEST_ID} characters", param="request_id", reason="VALUE_TOO_LONG"
            )
        return requested
    return f"{prefix}-{uuid.uuid4().hex}"


def pick_cache_salt(caller: Caller, *requested: str) -> str | None:
    """The one cache-salt rule: the first non-empty requested salt (chat:
    nvext.cache_salt, then cache_salt; generate: cache_salt; '' = absent; at
    most MAX_CACHE_SALT characters), inside the caller's tenant domain when
    it has one: the tenant's secret prefix is always applied, so no caller
    can name a salt of another tenant (security/tenancy.py)."""
    salt = next((s for s in requested if s), None)
    if salt is not None and len(salt) > MAX_CACHE_SALT:
        raise InvalidArgument(
            f"cache_salt must be at most {MAX_CACHE_SALT} characters", param="cache_salt", reason="VALUE_TOO_LONG"
        )
    if caller.salt_prefix is None:
        return salt
    return caller.salt_prefix if salt is None else f"{caller.salt_prefix}:{salt}"


def check_priority(priority: int, settings: ServerSettings, caller: Caller) -> int:
    """The one priority rule: non-zero needs the priority scheduler; the
    value is clamped to the caller's range (its API key's, else the
    server's --min-priority/--max-priority), so no caller jumps the queue
    further than the operator allows."""
    if priority != 0 and settings.scheduling_policy != "priority":
        raise InvalidArgument(
            "priority needs the server's priority scheduler (--scheduling-policy priority)",
            param="priority", reason="FEATURE_DISABLED",
        )
    return min(max(priority, caller.priority_min), caller.priority_max)


def stop_strings(
    param: str, value: struct_pb2.Value | None, settings: ServerSettings
) -> tuple[list[str], list[int]]:
    """`stop`: a string, a list, or null; at most --max-stop-strings strings
    of at most --max-stop-string-chars characters (the engine matches every
    one against the tail of the output per token). Integer entries of a
    list are token ids (Dynamo's 2026 wire), returned apart."""
    limit, chars = settings.max_stop_strings, settings.max_stop_string_chars
    ids: list[int] = []
    if value is None:
        return [], ids
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return [], ids
    if kind == "string_value":
        items = [value.string_value]
    elif kind == "list_value":
        items = []
        for i, item in enumerate(value.list_value.values):
            if item.WhichOneof("kind") == "number_value":
                number = item.number_value
                if not (number.is_integer() and 0 <= number < 2**32):
                    raise InvalidArgument(f"{param}[{i}] must be a string or a token id (an "
                                          f"integer >= 0), got {number}", param=param,
                                          reason="INVALID_TYPE")
                ids.append(int(number))
                continue
            if item.WhichOneof("kind") != "string_value":
                raise InvalidArgument(f"{param}[{i}] must be a string or a token id", param=param,
                                      reason="INVALID_TYPE")
            items.append(item.string_value)
    else:
        raise InvalidArgument(f"{param} must be a string or a list of strings", param=param, reason="INVALID_TYPE")
    if len(items) > limit:
        raise InvalidArgument(f"{param} may hold at most {limit} strings, got {len(items)}", param=param, reason="TOO_MANY_ITEMS")
    for i, s in enumerate(items):
        if not s:
            raise InvalidArgument(f"{param}[{i}] must not be empty", param=param, reason="EMPTY_VALUE")
        if len(s) > chars:
            raise InvalidArgument(f"{param}[{i}] must be at most {chars} characters, got {len(s)}",
                                  param=param, reason="VALUE_TOO_LONG")
    return items, ids


def has_request_template(req: Any) -> bool:
    """Whether a request carries its own chat template (chat, tokenize)."""
    template = getattr(req, "chat_template", "")
    kwargs = getattr(req, "chat_template_kwargs", None)
    return bool(template) or (kwargs is not None and "chat_template" in kwargs.fields)


def request_chars(req: Any) -> int:
    """The characters of a request's prompt text (prompt, or everything a
    chat template renders: rendered_chars)."""
    prompt = getattr(req, "prompt", "")
    chars = prompt_chars(prompt) if isinstance(prompt, struct_pb2.Value) else len(prompt or "")
    return chars + rendered_chars(req)[1]


def message_chars(m: chat_pb2.ChatMessage) -> int:
    """The characters of every field of a message a template renders (role,
    content, name, tool calls with their arguments, tool call id,
    reasoning), counted without converting them."""
    return (len(m.role) + content_chars(m.content) + len(m.name) + len(m.tool_call_id)
            + len(m.reasoning_content)
            + sum(len(tc.id) + len(tc.type) + len(tc.function.name) + len(tc.function.arguments)
                  for tc in m.tool_calls))


def rendered_chars(req: Any) -> tuple[str, int]:
    """What a chat template renders of a request (messages, tools,
    chat_template_kwargs), counted without converting it (tools and kwargs
    by their protobuf size, close to their JSON): the field that brings the
    most, and the total. For the cheap length limit and the off-loop
    threshold."""
    kwargs = getattr(req, "chat_template_kwargs", None)
    parts = {
        "messages": sum(message_chars(m) for m in getattr(req, "messages", ())),
        "tools": sum(t.ByteSize() for t in getattr(req, "tools", ())),
        "chat_template_kwargs": kwargs.ByteSize() if kwargs is not None else 0,
    }
    return max(parts, key=lambda name: parts[name]), sum(parts.values())


def prompt_chars(value: struct_pb2.Value) -> int:
    """Characters of a completion `prompt` (its strings; an id counts as
    one), counted without converting it."""
    if value.HasField("string_value"):
        return len(value.string_value)
    total = 0
    for item in value.list_value.values if value.HasField("list_value") else ():
        if item.HasField("string_value"):
            total += len(item.string_value)
        elif item.HasField("list_value"):
            total += len(item.list_value.values)
        else:
            total += 1
    return total


def content_chars(content: struct_pb2.Value) -> int:
    """The characters of a message's content (a string or text parts),
    counted without converting it: for the cheap length limit."""
    if content.HasField("string_value"):
        return len(content.string_value)
    if content.HasField("list_value"):
        return sum(len(part.struct_value.fields["text"].string_value)
                   for part in content.list_value.values
                   if part.HasField("struct_value") and "text" in part.struct_value.fields)
    return 0


def _content_text(param: str, content: struct_pb2.Value, allow_null: bool) -> str | None:
    kind = content.WhichOneof("kind")
    if kind is None or kind == "null_value":
        if not allow_null:
            raise InvalidArgument(f"{param} must be a string or a list of text parts", param=param, reason="INVALID_TYPE")
        return None
    if kind == "string_value":
        return content.string_value
    if kind != "list_value":
        raise InvalidArgument(f"{param} must be a string or a list of text parts", param=param, reason="INVALID_TYPE")
    texts = []
    for i, part in enumerate(content.list_value.values):
        pparam = f"{param}[{i}]"
        if part.WhichOneof("kind") != "struct_value":
            raise InvalidArgument(f"{pparam} must be an object like {{\"type\": \"text\", \"text\": ...}}", param=param, reason="INVALID_TYPE")
        fields = part.struct_value.fields
        ptype = fields["type"].string_value if "type" in fields else ""
        if ptype != "text":
            raise InvalidArgument(
                f"{pparam}.type '{ptype}' is not supported: this model takes text parts only",
                param=param, reason="VALUE_NOT_ALLOWED",
            )
        if "text" not in fields or fields["text"].WhichOneof("kind") != "string_value":
            raise InvalidArgument(f"{pparam}.text must be a string", param=param, reason="INVALID_TYPE")
        texts.append(fields["text"].string_value)
    return "".join(texts)


def messages_to_dicts(messages: Sequence[chat_pb2.ChatMessage]) -> list[dict[str, Any]]:
    """Validate messages and turn them into template-ready dicts."""
    if not messages:
        raise InvalidArgument("messages must hold at least one message", param="messages", reason="FIELD_REQUIRED")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        param = f"messages[{i}]"
        if m.role not in ROLES:
            raise InvalidArgument(
                f"{param}.role '{m.role}' is not one of {sorted(ROLES)}", param=f"{param}.role", reason="VALUE_NOT_ALLOWED"
            )
        allow_null = m.role == "assistant" and len(m.tool_calls) > 0
        text = _content_text(f"{param}.content", m.content, allow_null)
        d: dict[str, Any] = {"role": m.role, "content": text if text is not None else ""}
        if m.HasField("name"):
            d["name"] = m.name
        if m.tool_calls:
            d["tool_calls"] = [
                {
                    "id": tc.id,
                    "type": tc.type or "function",
                    "function": {"name": tc.function.name, "arguments": tc.function.arguments},
                }
                for tc in m.tool_calls
            ]
        if m.HasField("tool_call_id"):
            d["tool_call_id"] = m.tool_call_id
        if m.HasField("reasoning_content"):
            d["reasoning_content"] = m.reasoning_content
        out.append(d)
    return out


def tools_to_dicts(tools: Sequence[chat_pb2.Tool]) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    out = []
    for i, t in enumerate(tools):
        param = f"tools[{i}]"
        if (t.type or "function") != "function":
            raise InvalidArgument(f"{param}.type must be 'function', got '{t.type}'", param=param, reason="VALUE_NOT_ALLOWED")
        if not t.function.name:
            raise InvalidArgument(f"{param}.function.name must not be empty", param=param, reason="EMPTY_VALUE")
        fn: dict[str, Any] = {"name": t.function.name}
        if t.function.description:
            fn["description"] = t.function.description
        if t.function.HasField("parameters"):
            fn["parameters"] = struct_to_dict(t.function.parameters)
        out.append({"type": "function", "function": fn})
    return out


class RenderRequest(Protocol):
    """The chat-template fields chat and tokenize requests share."""

    add_generation_prompt: bool
    continue_final_message: bool
    chat_template: str
    chat_template_kwargs: struct_pb2.Struct

    @property
    def tools(self) -> Sequence[chat_pb2.Tool]: ...

    def HasField(self, name: str) -> bool: ...


def check_render_flags(req: RenderRequest) -> None:
    """continue_final_message and an explicit add_generation_prompt: true conflict."""
    if (
        req.continue_final_message
        and req.HasField("add_generation_prompt")
        and req.add_generation_prompt
    ):
        raise InvalidArgument(
            "continue_final_message and add_generation_prompt cannot both be true",
            param="continue_final_message", reason="FIELDS_CONFLICT",
        )


# chat_template_kwargs keys the renderer itself sets: never taken from a
# request (vLLM strips the same ones). "chat_template" is the request's own
# template, allowed only with --trust-request-chat-template.
RESERVED_TEMPLATE_KWARGS = frozenset({
    "chat_template", "tokenize", "return_dict", "return_assistant_tokens_mask", "messages",
    "conversation", "tools", "documents", "add_generation_prompt", "continue_final_message",
})


def render_options(req: RenderRequest, *, trust_template: bool = False) -> RenderOptions:
    """The one way to build RenderOptions from a request: the generation
    prompt (default on, off when continuing the final message), template,
    template kwargs and tools. Flag conflicts: check_render_flags.

    A request's own chat template runs Jinja on the server, so it is refused
    unless the operator trusts callers (`trust_template`, from
    --trust-request-chat-template), as vLLM does."""
    cont = bool(req.continue_final_message)
    add_gen = req.add_generation_prompt if req.HasField("add_generation_prompt") else True
    kwargs = struct_to_dict(req.chat_template_kwargs) if req.HasField("chat_template_kwargs") else {}
    template = req.chat_template if req.HasField("chat_template") and req.chat_template else None
    if template is None and isinstance(kwargs.get("chat_template"), str) and kwargs["chat_template"]:
        template = kwargs["chat_template"]
    if template is not None and not trust_template:
        raise InvalidArgument(
            "chat_template: a request's own chat template is refused unless the server runs "
            "with --trust-request-chat-template (templates run code on the server)",
            param="chat_template", reason="REQUEST_TEMPLATE_NOT_ALLOWED",
        )
    return RenderOptions(
        add_generation_prompt=add_gen and not cont,
        continue_final_message=cont,
        chat_template=template,
        template_kwargs={k: v for k, v in kwargs.items() if k not in RESERVED_TEMPLATE_KWARGS},
        tools=tools_to_dicts(req.tools),
    )
