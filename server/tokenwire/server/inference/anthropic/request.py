"""CreateMessageRequest / CountMessageTokensRequest (Anthropic's Messages
request) -> the chat request it runs as, every field validated with its
Anthropic name: `system`, `messages` with text / tool_use / tool_result /
thinking blocks (chat messages with tool_calls, tool messages,
reasoning_content), `image` blocks in user turns and in their tool_result contents (chat's
image_url parts: a base64 source as a data URL, a url source under chat's
URL rules; a tool_result's images follow its tool message as a user
message, as vLLM's Messages API puts them),
`tools` (input_schema -> function parameters),
`tool_choice` (auto / any / tool / none), `stop_sequences`, `max_tokens`,
sampling, `metadata.user_id`, `thinking` and `output_config` (options.py).
The chat kind then plans it: rendering, admission, limits, tenancy and
weight bounds are chat's (anthropic/kind.py)."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core import multimodal as mm
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.anthropic import options
from tokenwire.server.inference.shared.messages import json_of
from tokenwire.server.inference.shared.prompt_chars import block_text_chars
from tokenwire.v1 import anthropic_pb2, chat_pb2

ROLES = frozenset({"user", "assistant"})
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


# A chat request's field -> the Messages field it came from (an error from
# the chat kind's validation names the Messages field). A chat message's
# index does not map back (system first, tool results split out): "messages".
PARAMS = {"stop": "stop_sequences", "user": "metadata.user_id",
          "parallel_tool_calls": "tool_choice.disable_parallel_tool_use",
          "response_format": "output_config.format"}
# A chat field that only a Messages field sets (nvext.max_thinking_tokens is
# refused in a Messages body: thinking.budget_tokens is that budget).
WHOLE_PARAMS = {"nvext.max_thinking_tokens": "thinking.budget_tokens"}


def image_param(param: str, images: dict[str, str]) -> str:
    """The Messages name of a chat error's field: an image block's source
    (`images`: chat's part -> the block's source field, as to_chat
    recorded them), else chat_param's."""
    for key, name in images.items():
        if param == key or param.startswith(key + "."):
            return name
    return chat_param(param)


def chat_param(param: str) -> str:
    """The Messages name of a chat request's field (`param` of an error)."""
    if param in WHOLE_PARAMS:
        return WHOLE_PARAMS[param]
    head, dot, rest = param.partition(".")
    base, bracket, index = head.partition("[")
    if base == "messages":
        return "messages"
    if base in PARAMS:
        return PARAMS[base] + bracket + index + dot + rest
    return param


def _bad(message: str, param: str, reason: str) -> InvalidArgument:
    return InvalidArgument(message, param=param, reason=reason)


def _text_of(param: str, value: Any) -> str:
    """A string, or a list of text blocks joined (system, tool_result content)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _bad(f"{param} must be a string or a list of text blocks", param, "INVALID_TYPE")
    texts = []
    for i, block in enumerate(value):
        if not isinstance(block, dict) or block.get("type") != "text":
            raise _bad(f"{param}[{i}] must be a text block {{\"type\": \"text\", \"text\": ...}}",
                       f"{param}[{i}].type", "VALUE_NOT_ALLOWED")
        text = block.get("text")
        if not isinstance(text, str):
            raise _bad(f"{param}[{i}].text must be a string", f"{param}[{i}].text",
                       "INVALID_TYPE")
        texts.append(text)
    return "\n".join(texts)


def _blocks(param: str, content: struct_pb2.Value) -> list[dict[str, Any]]:
    """A message's content as a list of blocks (a string is one text block)."""
    kind = content.WhichOneof("kind")
    if kind == "string_value":
        return [{"type": "text", "text": content.string_value}]
    if kind != "list_value":
        raise _bad(f"{param} must be a string or a list of content blocks", param,
                   "FIELD_REQUIRED" if kind is None else "INVALID_TYPE")
    blocks = json_of(content, param)
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _bad(f"{param}[{i}] must be a content block with a type",
                       f"{param}[{i}].type", "INVALID_TYPE")
    return list(blocks)


def _tool_use(param: str, block: dict[str, Any]) -> chat_pb2.ToolCall:
    for key in ("id", "name"):
        if not isinstance(block.get(key), str) or not block[key]:
            raise _bad(f"{param}.{key} must be a non-empty string", f"{param}.{key}",
                       "FIELD_REQUIRED")
    args = block.get("input", {})
    if not isinstance(args, dict):
        raise _bad(f"{param}.input must be an object", f"{param}.input", "INVALID_TYPE")
    return chat_pb2.ToolCall(id=block["id"], type="function", function=chat_pb2.FunctionCall(
        name=block["name"], arguments=json.dumps(args, ensure_ascii=False)))


def _image(param: str, block: dict[str, Any]) -> tuple[struct_pb2.Value, str]:
    """An image block as chat's image_url part (chat's URL rules:
    core/multimodal.py), and the source field an error about it names."""
    source = block.get("source")
    if not isinstance(source, dict):
        raise _bad(f"{param}.source must be an object", f"{param}.source", "FIELD_REQUIRED")
    stype = source.get("type")
    if stype == "base64":
        mime, data = source.get("media_type"), source.get("data")
        if not isinstance(mime, str) or not mime:
            raise _bad(f"{param}.source.media_type is required", f"{param}.source.media_type",
                       "FIELD_REQUIRED")
        if not isinstance(data, str) or not data:
            raise _bad(f"{param}.source.data must be base64 image bytes",
                       f"{param}.source.data", "FIELD_REQUIRED")
        url, field = f"data:{mime};base64,{data}", f"{param}.source.data"
        mm.check_url(f"{param}.source.media_type", url)
    elif stype == "url":
        given, field = source.get("url"), f"{param}.source.url"
        if not isinstance(given, str) or not given:
            raise _bad(f"{field} must be a URL", field, "FIELD_REQUIRED")
        url = given
        mm.check_url(field, url)
    else:
        raise _bad(f"{param}.source.type '{stype}' is not supported (base64 and url are; "
                   "tokenwire stores no files)", f"{param}.source.type", "VALUE_NOT_ALLOWED")
    part = struct_pb2.Value()
    part.struct_value.update({"type": "image_url", "image_url": {"url": url}})
    return part, field


def _tool_result(param: str, value: Any) -> tuple[str, list[tuple[struct_pb2.Value, str]]]:
    """A tool_result's content: its text blocks joined, and its image blocks
    as chat image parts with the source field an error names."""
    if isinstance(value, str):
        return value, []
    if not isinstance(value, list):
        raise _bad(f"{param} must be a string or a list of text and image blocks", param,
                   "INVALID_TYPE")
    texts, parts = [], []
    for i, block in enumerate(value):
        btype = block.get("type") if isinstance(block, dict) else None
        if btype == "image":
            parts.append(_image(f"{param}[{i}]", block))
        elif btype == "text":
            if not isinstance(block.get("text"), str):
                raise _bad(f"{param}[{i}].text must be a string", f"{param}[{i}].text",
                           "INVALID_TYPE")
            texts.append(block["text"])
        else:
            raise _bad(f"{param}[{i}] must be a text or image block", f"{param}[{i}].type",
                       "VALUE_NOT_ALLOWED")
    return "\n".join(texts), parts


def _user(param: str, blocks: list[dict[str, Any]], index: int,
          images: dict[str, str]) -> list[chat_pb2.ChatMessage]:
    """A user turn as chat messages (the first at chat index `index`; `images`
    gets each image part's chat field -> its source field), as vLLM's
    Messages API converts it: each tool_result a tool message with its text,
    followed by a user message with its images when it has any; then the
    turn's own text and images as one user message."""
    out: list[chat_pb2.ChatMessage] = []
    parts: list[struct_pb2.Value] = []
    sources: dict[int, str] = {}
    for i, block in enumerate(blocks):
        bparam, btype = f"{param}[{i}]", block["type"]
        if btype == "text":
            parts.append(_part(_text_of(param, [block])))
        elif btype == "image":
            part, sources[len(parts)] = _image(bparam, block)
            parts.append(part)
        elif btype == "tool_result":
            tid = block.get("tool_use_id")
            if not isinstance(tid, str) or not tid:
                raise _bad(f"{bparam}.tool_use_id must be a non-empty string",
                           f"{bparam}.tool_use_id", "FIELD_REQUIRED")
            text, shown = _tool_result(f"{bparam}.content", block.get("content", ""))
            out.append(chat_pb2.ChatMessage(
                role="tool", tool_call_id=tid, content=struct_pb2.Value(string_value=text)))
            if shown:
                content = struct_pb2.Value()
                for j, (part, field) in enumerate(shown):
                    content.list_value.values.append(part)
                    images[f"messages[{index + len(out)}].content[{j}]"] = field
                out.append(chat_pb2.ChatMessage(role="user", content=content))
        else:
            raise _bad(f"{bparam}.type '{btype}' is not supported in a user message "
                       "(text, image and tool_result are)", f"{bparam}.type",
                       "VALUE_NOT_ALLOWED")
    for j, field in sources.items():
        images[f"messages[{index + len(out)}].content[{j}]"] = field
    if parts:
        content = struct_pb2.Value()
        content.list_value.values.extend(parts)
        out.append(chat_pb2.ChatMessage(role="user", content=content))
    return out


def _part(text: str) -> struct_pb2.Value:
    part = struct_pb2.Value()
    part.struct_value.update({"type": "text", "text": text})
    return part


def _assistant(param: str, blocks: list[dict[str, Any]]) -> chat_pb2.ChatMessage:
    """An assistant turn: text, tool_use (tool_calls) and thinking (reasoning)."""
    msg = chat_pb2.ChatMessage(role="assistant")
    texts, thoughts = [], []
    for i, block in enumerate(blocks):
        bparam, btype = f"{param}[{i}]", block["type"]
        if btype == "text":
            texts.append(_text_of(param, [block]))
        elif btype == "tool_use":
            msg.tool_calls.append(_tool_use(bparam, block))
        elif btype == "thinking":
            if not isinstance(block.get("thinking"), str):
                raise _bad(f"{bparam}.thinking must be a string", f"{bparam}.thinking",
                           "INVALID_TYPE")
            thoughts.append(block["thinking"])
        elif btype != "redacted_thinking":  # (opaque: nothing to render)
            raise _bad(f"{bparam}.type '{btype}' is not supported in an assistant message "
                       "(text, tool_use and thinking are)", f"{bparam}.type",
                       "VALUE_NOT_ALLOWED")
    if texts or not msg.tool_calls:
        msg.content.string_value = "".join(texts)
    if thoughts:
        msg.reasoning_content = "".join(thoughts)
    return msg


def _messages(req: Any, images: dict[str, str]) -> list[chat_pb2.ChatMessage]:
    out: list[chat_pb2.ChatMessage] = []
    if req.HasField("system"):
        system = json_of(req.system, "system")
        if system is not None:
            out.append(chat_pb2.ChatMessage(role="system", content=struct_pb2.Value(
                string_value=_text_of("system", system))))
    if not req.messages:
        if options.token_in(req):
            return out  # the prompt is nvext.token_data: nothing to render
        raise _bad("messages must hold at least one message", "messages", "FIELD_REQUIRED")
    for i, m in enumerate(req.messages):
        param = f"messages[{i}]"
        if m.role not in ROLES:
            raise _bad(f"{param}.role '{m.role}' is not one of {sorted(ROLES)}",
                       f"{param}.role", "VALUE_NOT_ALLOWED")
        blocks = _blocks(f"{param}.content", m.content)
        if m.role == "user":
            out.extend(_user(f"{param}.content", blocks, len(out), images))
        else:
            out.append(_assistant(f"{param}.content", blocks))
    return out


def _tools(req: Any, chat: chat_pb2.CreateChatCompletionRequest) -> None:
    names = set()
    for i, tool in enumerate(req.tools):
        param = f"tools[{i}]"
        if tool.type not in ("", "custom"):
            raise _bad(f"{param}.type '{tool.type}' is not supported (client tools only)",
                       f"{param}.type", "VALUE_NOT_ALLOWED")
        if not tool.name:
            raise _bad(f"{param}.name is required", f"{param}.name", "FIELD_REQUIRED")
        if not tool.HasField("input_schema"):
            raise _bad(f"{param}.input_schema is required", f"{param}.input_schema",
                       "FIELD_REQUIRED")
        names.add(tool.name)
        fn = chat_pb2.FunctionDefinition(name=tool.name, description=tool.description)
        fn.parameters.CopyFrom(tool.input_schema)
        if tool.HasField("strict"):
            fn.strict = tool.strict
        chat.tools.add(type="function", function=fn)
    if not req.HasField("tool_choice"):
        return
    choice = req.tool_choice
    if choice.type == "tool":
        if choice.name not in names:
            raise _bad(f"tool_choice.name '{choice.name}' is not a tool of tools",
                       "tool_choice.name", "VALUE_NOT_ALLOWED")
        chat.tool_choice.struct_value.update(
            {"type": "function", "function": {"name": choice.name}})
    elif choice.type in TOOL_CHOICES:
        if choice.type == "any" and not names:
            raise _bad("tool_choice 'any' needs tools", "tool_choice.type", "MISSING_DEPENDENCY")
        chat.tool_choice.string_value = TOOL_CHOICES[choice.type]
    else:
        raise _bad(f"tool_choice.type '{choice.type}' is not one of "
                   "['any', 'auto', 'none', 'tool']", "tool_choice.type", "VALUE_NOT_ALLOWED")
    if choice.HasField("disable_parallel_tool_use"):
        chat.parallel_tool_calls = not choice.disable_parallel_tool_use


def to_chat(req: anthropic_pb2.CreateMessageRequest, *, stream: bool,
            images: dict[str, str] | None = None, budget: bool = True,
            ) -> chat_pb2.CreateChatCompletionRequest:
    """The chat request `req` runs as (validated here where chat's names
    differ; `images` gets each image part's chat field -> its block's
    source, for image_param)."""
    chat = chat_pb2.CreateChatCompletionRequest(model=req.model, session_id=req.session_id)
    chat.messages.extend(_messages(req, {} if images is None else images))
    if not req.HasField("max_tokens"):
        raise _bad("max_tokens is required", "max_tokens", "FIELD_REQUIRED")
    if req.max_tokens < 1:
        raise _bad("max_tokens must be at least 1", "max_tokens", "VALUE_OUT_OF_RANGE")
    chat.max_tokens = req.max_tokens
    if req.stop_sequences:
        for i, stop in enumerate(req.stop_sequences):
            if not stop:
                raise _bad(f"stop_sequences[{i}] is empty", f"stop_sequences[{i}]",
                           "EMPTY_VALUE")
        chat.stop.list_value.extend(list(req.stop_sequences))
    for name in ("temperature", "top_p", "top_k"):
        if req.HasField(name):
            setattr(chat, name, getattr(req, name))
    _tools(req, chat)
    if isinstance(req, anthropic_pb2.CreateMessageRequest):
        options.extensions(req, chat)
    options.output_config(req, chat)
    options.thinking(req, chat, budget=budget)
    if "user_id" in req.metadata.fields:
        user = req.metadata.fields["user_id"]
        if user.WhichOneof("kind") != "string_value":
            raise _bad("metadata.user_id must be a string", "metadata.user_id", "INVALID_TYPE")
        chat.user = user.string_value
    if stream:
        chat.stream = True
        chat.stream_options.include_usage = True
    return chat


def text_chars(req: Any) -> int:
    """The characters of text a Messages (or CountMessageTokens) body holds
    at least: system and every message's text (prompt_chars.block_text_chars),
    counted without converting it: its length limit before the conversion."""
    system = [req.system] if req.HasField("system") else []
    return block_text_chars([*system, *(m.content for m in req.messages)])


def count_to_chat(req: anthropic_pb2.CountMessageTokensRequest,
                  images: dict[str, str] | None = None) -> chat_pb2.CreateChatCompletionRequest:
    """The chat request whose rendered prompt CountMessageTokens counts."""
    full = anthropic_pb2.CreateMessageRequest(model=req.model, max_tokens=1)
    full.messages.extend(req.messages)
    full.tools.extend(req.tools)
    for name in ("system", "tool_choice", "thinking", "output_config"):
        if req.HasField(name):
            getattr(full, name).CopyFrom(getattr(req, name))
    return to_chat(full, stream=False, images=images, budget=False)
