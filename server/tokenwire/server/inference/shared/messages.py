"""What a chat template renders, from the request: messages (their image
parts, for chat, in OpenAI's shape: typed gRPC parts become data URLs),
tools and the render options (generation prompt, template, template
kwargs), and the Struct -> dict conversion they need; each validated with
the field named. Chat, tokenize and a Session continuation read them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from tokenwire.server.core import multimodal as mm
from tokenwire.server.core.domain import RenderOptions
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.v1 import chat_pb2

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


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


def json_of(message: Message, param: str) -> Any:
    """A request's Struct / Value / ListValue as the JSON it holds. gRPC can
    carry NaN and infinities there, which JSON cannot: INVALID_ARGUMENT
    naming `param`, not a failure deeper in."""
    try:
        return json_format.MessageToDict(message)
    except ValueError as exc:
        raise InvalidArgument(f"{param} must hold JSON values (no NaN or Infinity): {exc}",
                              param=param, reason="VALUE_NOT_FINITE") from exc


def struct_to_dict(message: struct_pb2.Struct, param: str) -> dict[str, Any]:
    return dict(_ints_back(json_of(message, param)))


_NOT_PARTS = "must be a string or a list of content parts"


def _image_part(pparam: str, fields: Any) -> dict[str, Any]:
    """An OpenAI image_url part ({"image_url": {"url": ...}}, or the URL as
    a string) as the template-ready part vLLM's chat parser reads."""
    if "image_url" not in fields:
        raise InvalidArgument(f"{pparam}.image_url is required",
                              param=f"{pparam}.image_url", reason="FIELD_REQUIRED")
    value = fields["image_url"]
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        url = value.string_value
    elif kind == "struct_value" and "url" in value.struct_value.fields:
        url = value.struct_value.fields["url"].string_value
    else:
        raise InvalidArgument(f"{pparam}.image_url must be an object with a url",
                              param=f"{pparam}.image_url", reason="INVALID_TYPE")
    mm.check_url(f"{pparam}.image_url.url", url)
    return {"type": "image_url", "image_url": {"url": url}}


def _content(param: str, content: struct_pb2.Value, allow_null: bool,
             media: bool) -> str | list[dict[str, Any]] | None:
    """The message's content: its text (text parts joined), or with image
    parts (only where `media`), the parts in OpenAI's shape."""
    kind = content.WhichOneof("kind")
    if kind is None or kind == "null_value":
        if not allow_null:
            raise InvalidArgument(f"{param} {_NOT_PARTS}", param=param, reason="INVALID_TYPE")
        return None
    if kind == "string_value":
        return content.string_value
    if kind != "list_value":
        raise InvalidArgument(f"{param} {_NOT_PARTS}", param=param, reason="INVALID_TYPE")
    parts: list[dict[str, Any]] = []
    for i, part in enumerate(content.list_value.values):
        pparam = f"{param}[{i}]"
        if part.WhichOneof("kind") != "struct_value":
            raise InvalidArgument(
                f"{pparam} must be an object like {{\"type\": \"text\", \"text\": ...}}",
                param=param, reason="INVALID_TYPE",
            )
        fields = part.struct_value.fields
        ptype = fields["type"].string_value if "type" in fields else ""
        if ptype == "image_url" and media:
            parts.append(_image_part(pparam, fields))
            continue
        if ptype != "text":
            takes = "text and image_url parts" if media else "text parts only"
            raise InvalidArgument(
                f"{pparam}.type '{ptype}' is not supported: this request takes {takes}",
                param=param, reason="VALUE_NOT_ALLOWED",
            )
        if "text" not in fields or fields["text"].WhichOneof("kind") != "string_value":
            raise InvalidArgument(f"{pparam}.text must be a string",
                                  param=param, reason="INVALID_TYPE")
        parts.append({"type": "text", "text": fields["text"].string_value})
    return _joined(parts)


def _joined(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """Text parts joined into one string by newlines, as vLLM's chat parser
    joins them for a template taking string content; parts with an image
    stay parts."""
    if any(p["type"] != "text" for p in parts):
        return parts
    return "\n".join(p["text"] for p in parts)


def _typed_parts(param: str, parts: Sequence[Any], media: bool) -> str | list[dict[str, Any]]:
    """ChatMessage.parts (gRPC's typed content): text, and images as bytes
    with their MIME type (made data URLs) or a URL."""
    out: list[dict[str, Any]] = []
    for i, part in enumerate(parts):
        pparam = f"{param}[{i}]"
        which = part.WhichOneof("part")
        if which == "text":
            out.append({"type": "text", "text": part.text})
        elif which == "image" and media:
            out.append({"type": "image_url",
                        "image_url": {"url": mm.image_url(f"{pparam}.image", part.image)}})
        elif which == "image":
            raise InvalidArgument(f"{pparam}.image is not supported: this request takes text "
                                  "parts only", param=f"{pparam}.image",
                                  reason="VALUE_NOT_ALLOWED")
        else:
            raise InvalidArgument(f"{pparam} must set text or image", param=pparam,
                                  reason="FIELD_REQUIRED")
    return _joined(out)


def messages_to_dicts(messages: Sequence[chat_pb2.ChatMessage], *,
                      media: bool = False) -> list[dict[str, Any]]:
    """Validate messages and turn them into template-ready dicts. With
    `media` (chat), image parts are kept (OpenAI's shape), bounded in number
    and bytes (core/multimodal.py); elsewhere refused."""
    if not messages:
        raise InvalidArgument("messages must hold at least one message",
                              param="messages", reason="FIELD_REQUIRED")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        param = f"messages[{i}]"
        if m.role not in ROLES:
            raise InvalidArgument(
                f"{param}.role '{m.role}' is not one of {sorted(ROLES)}", param=f"{param}.role",
                reason="VALUE_NOT_ALLOWED",
            )
        allow_null = m.role == "assistant" and len(m.tool_calls) > 0
        content: str | list[dict[str, Any]] | None
        if len(m.parts) > 0:
            if m.HasField("content") and m.content.WhichOneof("kind") not in (None,
                                                                               "null_value"):
                raise InvalidArgument(f"{param}: set content or parts, not both",
                                      param=f"{param}.parts", reason="FIELDS_CONFLICT")
            content = _typed_parts(f"{param}.parts", m.parts, media)
        else:
            content = _content(f"{param}.content", m.content, allow_null, media)
        d: dict[str, Any] = {"role": m.role, "content": content if content is not None else ""}
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
        reasoning = (m.reasoning if m.HasField("reasoning")
                     else m.reasoning_content if m.HasField("reasoning_content") else None)
        if reasoning is not None and m.role == "assistant":  # both keys, as vLLM renders it
            d["reasoning"] = d["reasoning_content"] = reasoning
        out.append(d)
    if media:
        mm.check_request_media(out)
    return out


def has_media(messages: list[dict[str, Any]]) -> bool:
    """Whether template-ready messages carry an image part."""
    return any(isinstance(m["content"], list) for m in messages)


def tools_to_dicts(tools: Sequence[chat_pb2.Tool]) -> list[dict[str, Any]] | None:
    if not tools:
        return None
    out = []
    for i, t in enumerate(tools):
        param = f"tools[{i}]"
        if (t.type or "function") != "function":
            raise InvalidArgument(f"{param}.type must be 'function', got '{t.type}'",
                                  param=param, reason="VALUE_NOT_ALLOWED")
        if not t.function.name:
            raise InvalidArgument(f"{param}.function.name must not be empty",
                                  param=param, reason="EMPTY_VALUE")
        fn: dict[str, Any] = {"name": t.function.name}
        if t.function.description:
            fn["description"] = t.function.description
        if t.function.HasField("parameters"):
            fn["parameters"] = struct_to_dict(t.function.parameters, f"{param}.function.parameters")
        if t.function.HasField("strict"):  # vLLM keeps it when set (template, structural tag)
            fn["strict"] = t.function.strict
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
    kwargs = (struct_to_dict(req.chat_template_kwargs, "chat_template_kwargs")
              if req.HasField("chat_template_kwargs") else {})
    template = req.chat_template if req.HasField("chat_template") and req.chat_template else None
    if (template is None and isinstance(kwargs.get("chat_template"), str)
            and kwargs["chat_template"]):
        template = kwargs["chat_template"]
    if template is not None and not trust_template:
        raise InvalidArgument(
            "chat_template: a request's own chat template is refused unless the server runs "
            "with --trust-request-chat-template (templates run code on the server)",
            param="chat_template", reason="REQUEST_TEMPLATE_NOT_ALLOWED",
        )
    template_kwargs = {k: v for k, v in kwargs.items() if k not in RESERVED_TEMPLATE_KWARGS}
    effort = reasoning_effort(req)
    if effort is not None:  # vLLM's build_chat_params: over the kwargs' own
        template_kwargs["reasoning_effort"] = effort
        if "enable_thinking" not in kwargs:
            template_kwargs["enable_thinking"] = effort != "none"
    return RenderOptions(
        add_generation_prompt=add_gen and not cont,
        continue_final_message=cont,
        chat_template=template,
        template_kwargs=template_kwargs,
        tools=tools_to_dicts(getattr(req, "tools", ())),  # (pooling bodies have none)
        reasoning_effort=effort,
    )


# vLLM's ChatCompletionRequest.reasoning_effort values (OpenAI's, and "max").
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


def reasoning_effort(req: RenderRequest) -> str | None:
    """The request's reasoning_effort (chat's field; None where the request
    kind has none or leaves it unset), checked against vLLM's values."""
    try:
        if not req.HasField("reasoning_effort"):
            return None
    except ValueError:  # a kind without the field (tokenize, pooling)
        return None
    effort: str = getattr(req, "reasoning_effort", "")
    if effort not in REASONING_EFFORTS:
        raise InvalidArgument(
            f"reasoning_effort '{effort}' is not one of {list(REASONING_EFFORTS)}",
            param="reasoning_effort", reason="VALUE_NOT_ALLOWED",
        )
    return effort


def has_request_template(req: Any) -> bool:
    """Whether a request carries its own chat template (chat, tokenize)."""
    template = getattr(req, "chat_template", "")
    kwargs = getattr(req, "chat_template_kwargs", None)
    return bool(template) or (kwargs is not None and "chat_template" in kwargs.fields)
