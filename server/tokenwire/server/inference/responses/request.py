"""CreateResponseRequest (OpenAI's Responses request) -> the chat request it
runs as, every field validated with its Responses name: `input` (a string,
or message / function_call / function_call_output / reasoning items: chat
messages, assistant tool_calls, tool messages, reasoning_content),
`instructions` (a system message first), `input_image` parts in a
message's content or a function_call_output's output (chat's
`image_url` parts: the same URL rules, limits and rendering; `file_id`
refused, nothing is stored), function `tools` (the flat shape
-> chat's), `tool_choice`, `max_output_tokens`, `text.format` (chat's
response_format), sampling and vLLM's extensions (`kv_transfer_params`
too: chat's field, read by chat), `metadata`, `user`.
Nothing is stored: `previous_response_id` and `background` are refused.
The chat kind then plans it (responses/kind.py), and its errors are
renamed to the Responses fields (`chat_param`)."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core import multimodal as mm
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.shared.messages import REASONING_EFFORTS, json_of
from tokenwire.server.inference.shared.prompt_chars import block_text_chars
from tokenwire.v1 import chat_pb2, responses_pb2

ROLES = frozenset({"user", "assistant", "system", "developer"})
TOOL_CHOICES = frozenset({"auto", "none", "required"})
LOGPROBS_INCLUDE = "message.output_text.logprobs"
MAX_TOP_LOGPROBS = 20  # OpenAI's (and vLLM's) bound on top_logprobs
DETAILS = frozenset({"auto", "low", "high", "original"})  # input_image.detail: accepted, not used
# Fields with the same name and meaning in both requests (copied when set).
SAME_OPTIONAL = ("temperature", "top_p", "parallel_tool_calls", "top_k",
                 "min_p", "repetition_penalty", "seed", "presence_penalty",
                 "frequency_penalty", "ignore_eos", "skip_special_tokens",
                 "include_stop_str_in_output", "priority", "return_token_ids",
                 "include_reasoning")
SAME_PLAIN = ("model", "user", "cache_salt", "request_id", "session_id")
# A chat field's name as the Responses request spells it (errors name it so).
PARAMS = {"max_tokens": "max_output_tokens", "max_completion_tokens": "max_output_tokens",
          "messages": "input", "response_format": "text.format",
          "logprobs": "top_logprobs"}


def _bad(message: str, param: str, reason: str) -> InvalidArgument:
    return InvalidArgument(message, param=param, reason=reason)


def chat_param(param: str) -> str:
    """The Responses name of a chat request's field (`param` of an error)."""
    head, dot, rest = param.partition(".")
    base, bracket, index = head.partition("[")
    if base in PARAMS:
        return PARAMS[base] + bracket + index + dot + rest
    return param


def image_param(param: str, images: dict[str, str]) -> str:
    """The Responses name of a chat error's field: an image part's
    (`images`: chat's part -> its input_image's image_url, as to_chat
    recorded them), else chat_param's."""
    for key, name in images.items():
        if param == key or param.startswith(key + "."):
            return name
    return chat_param(param)


def _text(param: str, value: Any) -> str:
    """A string, or a list of text parts (input_text / output_text / text) joined."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _bad(f"{param} must be a string or a list of content parts", param,
                   "INVALID_TYPE")
    return "".join(_part_text(f"{param}[{i}]", part) for i, part in enumerate(value))


def _part_text(param: str, part: Any) -> str:
    """A text part's text (input_text / output_text / text / reasoning_text / summary_text)."""
    ptype = part.get("type") if isinstance(part, dict) else None
    if ptype not in ("input_text", "output_text", "text", "reasoning_text", "summary_text"):
        raise _bad(f"{param}.type must be input_text or output_text here (input_image goes "
                   "in a message's content; files and audio are not supported)",
                   f"{param}.type", "VALUE_NOT_ALLOWED")
    if not isinstance(part.get("text"), str):
        raise _bad(f"{param}.text must be a string", f"{param}.text", "INVALID_TYPE")
    return str(part["text"])


def _image(param: str, part: dict[str, Any]) -> dict[str, Any]:
    """An input_image part as chat's image_url part (chat's URL rules:
    core/multimodal.py); a file_id is refused (nothing is stored)."""
    if part.get("file_id") is not None:
        raise _bad(f"{param}.file_id is not supported: tokenwire stores no files; send the "
                   "image as image_url (a data URL)", f"{param}.file_id", "FEATURE_DISABLED")
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        raise _bad(f"{param}.image_url must be a URL (data:image/png;base64,...)",
                   f"{param}.image_url", "FIELD_REQUIRED")
    mm.check_url(f"{param}.image_url", url)
    detail = part.get("detail")
    if detail is not None and detail not in DETAILS:
        raise _bad(f"{param}.detail must be one of {sorted(DETAILS)}", f"{param}.detail",
                   "VALUE_NOT_ALLOWED")
    return {"type": "image_url", "image_url": {"url": url}}


def _content(param: str, value: Any) -> struct_pb2.Value:
    """A message's content for chat: its text (parts joined), or with an
    input_image part, chat's parts in order (text and image_url), so a
    chat error's part index is the Responses part index."""
    if not isinstance(value, list) or not any(
            isinstance(p, dict) and p.get("type") == "input_image" for p in value):
        return struct_pb2.Value(string_value=_text(param, value))
    out = struct_pb2.Value()
    for i, part in enumerate(value):
        if isinstance(part, dict) and part.get("type") == "input_image":
            chat_part = _image(f"{param}[{i}]", part)
        else:
            chat_part = {"type": "text", "text": _part_text(f"{param}[{i}]", part)}
        out.list_value.values.add().struct_value.update(chat_part)
    return out


def _note_images(param: str, field: str, content: struct_pb2.Value, index: int,
                 images: dict[str, str]) -> None:
    """`images` gets each image part of chat message `index` -> the
    Responses field it came from (`param.field[j].image_url`)."""
    for j, part in enumerate(content.list_value.values):
        if part.struct_value.fields["type"].string_value == "image_url":
            images[f"messages[{index}].content[{j}]"] = f"{param}.{field}[{j}].image_url"


def _str_field(param: str, item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise _bad(f"{param}.{key} must be a non-empty string", f"{param}.{key}",
                   "FIELD_REQUIRED")
    return value


def _assistant(out: list[chat_pb2.ChatMessage]) -> chat_pb2.ChatMessage:
    """The assistant message the next function_call / reasoning item joins
    (the last message when it is an assistant's without text after calls)."""
    if out and out[-1].role == "assistant":
        return out[-1]
    out.append(chat_pb2.ChatMessage(role="assistant"))
    return out[-1]


def _item(param: str, item: Any, out: list[chat_pb2.ChatMessage],
          images: dict[str, str]) -> None:
    if not isinstance(item, dict):
        raise _bad(f"{param} must be an object (an input item)", param, "INVALID_TYPE")
    itype = item.get("type", "message")
    if itype == "message":
        role = item.get("role")
        if role not in ROLES:
            raise _bad(f"{param}.role must be one of user, assistant, system, developer",
                       f"{param}.role", "VALUE_NOT_ALLOWED")
        content = _content(f"{param}.content", item.get("content"))
        merge = (role == "assistant" and out and out[-1].role == "assistant"
                 and not out[-1].tool_calls and not out[-1].HasField("content"))
        if not merge:
            out.append(chat_pb2.ChatMessage(role=role))
        out[-1].content.CopyFrom(content)  # (merged: after its reasoning item)
        _note_images(param, "content", content, len(out) - 1, images)
    elif itype == "function_call":
        call_id = _str_field(param, item, "call_id")
        name = _str_field(param, item, "name")
        args = item.get("arguments", "")
        if not isinstance(args, str):
            raise _bad(f"{param}.arguments must be a JSON string", f"{param}.arguments",
                       "INVALID_TYPE")
        _assistant(out).tool_calls.append(chat_pb2.ToolCall(
            id=call_id, type="function",
            function=chat_pb2.FunctionCall(name=name, arguments=args)))
    elif itype == "function_call_output":
        call_id = _str_field(param, item, "call_id")
        # A string, or input_text / input_image parts: the tool message's
        # content as vLLM passes it (its images rendered where the tool
        # message is).
        content = _content(f"{param}.output", item.get("output"))
        out.append(chat_pb2.ChatMessage(role="tool", tool_call_id=call_id, content=content))
        _note_images(param, "output", content, len(out) - 1, images)
    elif itype == "reasoning":
        parts = item.get("content") or item.get("summary") or []
        text = _text(f"{param}.content", parts)
        msg = _assistant(out)
        msg.reasoning_content = (msg.reasoning_content or "") + text
    else:
        raise _bad(f"{param}.type '{itype}' is not supported (message, function_call, "
                   "function_call_output and reasoning are)", f"{param}.type",
                   "VALUE_NOT_ALLOWED")


def _messages(req: responses_pb2.CreateResponseRequest,
              images: dict[str, str]) -> list[chat_pb2.ChatMessage]:
    out: list[chat_pb2.ChatMessage] = []
    if req.HasField("instructions"):
        out.append(chat_pb2.ChatMessage(
            role="system", content=struct_pb2.Value(string_value=req.instructions)))
    kind = req.input.WhichOneof("kind") if req.HasField("input") else None
    if kind == "string_value":
        out.append(chat_pb2.ChatMessage(role="user", content=req.input))
        return out
    if kind is None and req.nvext.token_data:
        return out  # a token-in prompt (nvext.token_data): no input to render
    if kind != "list_value":
        raise _bad("input must be a string or a list of input items", "input",
                   "FIELD_REQUIRED" if kind in (None, "null_value") else "INVALID_TYPE")
    items = json_of(req.input, "input")
    if not items:
        raise _bad("input must hold at least one item", "input", "FIELD_REQUIRED")
    for i, item in enumerate(items):
        _item(f"input[{i}]", item, out, images)
    for msg in out:  # an assistant turn of calls only renders with null content
        if msg.role == "assistant" and not msg.HasField("content") and not msg.tool_calls:
            msg.content.string_value = ""
    return out


def _tools(req: responses_pb2.CreateResponseRequest) -> list[chat_pb2.Tool]:
    tools = []
    for i, tool in enumerate(req.tools):
        if tool.type != "function":
            raise _bad(f"tools[{i}].type must be 'function' (built-in tools are not "
                       "supported)", f"tools[{i}].type", "VALUE_NOT_ALLOWED")
        if not tool.name:
            raise _bad(f"tools[{i}].name must be a non-empty string", f"tools[{i}].name",
                       "FIELD_REQUIRED")
        fn = chat_pb2.FunctionDefinition(name=tool.name, description=tool.description)
        if tool.HasField("parameters"):
            fn.parameters.CopyFrom(tool.parameters)
        if tool.HasField("strict"):
            fn.strict = tool.strict
        tools.append(chat_pb2.Tool(type="function", function=fn))
    return tools


def _tool_choice(req: responses_pb2.CreateResponseRequest) -> struct_pb2.Value | None:
    if not req.HasField("tool_choice"):
        return None
    choice = json_of(req.tool_choice, "tool_choice")
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise _bad("tool_choice must be auto, none, required or a function",
                       "tool_choice", "VALUE_NOT_ALLOWED")
        return req.tool_choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice.get("name") or (choice.get("function") or {}).get("name")
        if not isinstance(name, str) or not name:
            raise _bad("tool_choice.name must name a function", "tool_choice.name",
                       "FIELD_REQUIRED")
        out = struct_pb2.Value()
        out.struct_value.update({"type": "function", "function": {"name": name}})
        return out
    raise _bad("tool_choice must be auto, none, required or {\"type\": \"function\", "
               "\"name\"}", "tool_choice", "VALUE_NOT_ALLOWED")


def _text_format(req: responses_pb2.CreateResponseRequest) -> chat_pb2.ResponseFormat | None:
    fmt = json_of(req.text, "text").get("format") if req.HasField("text") else None
    if fmt is None:
        return None
    ftype = fmt.get("type") if isinstance(fmt, dict) else None
    if ftype == "text":
        return None
    if ftype == "json_object":
        return chat_pb2.ResponseFormat(type="json_object")
    if ftype == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, dict):
            raise _bad("text.format.schema must be a JSON Schema object", "text.format.schema",
                       "FIELD_REQUIRED")
        out = chat_pb2.ResponseFormat(type="json_schema")
        out.json_schema.name = str(fmt.get("name") or "response")
        out.json_schema.schema.update(schema)
        if isinstance(fmt.get("strict"), bool):
            out.json_schema.strict = fmt["strict"]
        return out
    raise _bad("text.format.type must be text, json_object or json_schema",
               "text.format.type", "VALUE_NOT_ALLOWED")


def _logprobs(req: responses_pb2.CreateResponseRequest,
              chat: chat_pb2.CreateChatCompletionRequest) -> None:
    """vLLM's rule: the output text's logprobs (with top_logprobs
    alternatives) only when include asks "message.output_text.logprobs";
    top_logprobs alone asks nothing (checked, echoed)."""
    if LOGPROBS_INCLUDE in req.include:
        chat.logprobs = True
        if req.HasField("top_logprobs"):
            chat.top_logprobs = req.top_logprobs
    elif req.HasField("top_logprobs") and not 0 <= req.top_logprobs <= MAX_TOP_LOGPROBS:
        raise _bad(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}", "top_logprobs",
                   "VALUE_OUT_OF_RANGE")


def refuse_stateful(req: responses_pb2.CreateResponseRequest) -> None:
    """Nothing is stored (bounded memory): no continuation from a stored
    response, no background run."""
    if req.previous_response_id:
        raise _bad("previous_response_id is not supported: tokenwire stores no responses; "
                   "send the earlier turns as input items", "previous_response_id",
                   "FEATURE_DISABLED")
    if req.background:
        raise _bad("background is not supported: tokenwire stores no responses",
                   "background", "FEATURE_DISABLED")


def text_chars(req: responses_pb2.CreateResponseRequest) -> int:
    """The characters of text a Responses body holds at least: instructions
    and its input's text (prompt_chars.block_text_chars), counted without
    converting it: its length limit before the conversion."""
    values: list[Any] = [req.instructions] if req.HasField("instructions") else []
    if req.HasField("input"):
        values.append(req.input)
    return block_text_chars(values)


def _effort(req: responses_pb2.CreateResponseRequest) -> str | None:
    """reasoning.effort (null or absent: unset), as vLLM's Responses request
    passes it on: chat's reasoning_effort."""
    if not req.HasField("reasoning") or "effort" not in req.reasoning.fields:
        return None
    value = req.reasoning.fields["effort"]
    if value.WhichOneof("kind") == "null_value":
        return None
    if value.WhichOneof("kind") != "string_value" or value.string_value not in REASONING_EFFORTS:
        raise _bad(f"reasoning.effort must be one of {list(REASONING_EFFORTS)}",
                   "reasoning.effort", "VALUE_NOT_ALLOWED")
    return value.string_value


def to_chat(req: responses_pb2.CreateResponseRequest, *, stream: bool,
            images: dict[str, str] | None = None) -> chat_pb2.CreateChatCompletionRequest:
    """The chat request `req` runs as (every Responses field checked here
    or, renamed, by the chat kind's plan: `images` gets each image part's
    chat field -> its Responses field, for image_param)."""
    refuse_stateful(req)
    chat = chat_pb2.CreateChatCompletionRequest(stream=stream)
    chat.messages.extend(_messages(req, {} if images is None else images))
    chat.tools.extend(_tools(req))
    choice = _tool_choice(req)
    if choice is not None:
        chat.tool_choice.CopyFrom(choice)
    fmt = _text_format(req)
    if fmt is not None:
        chat.response_format.CopyFrom(fmt)
    if req.HasField("max_output_tokens"):
        chat.max_tokens = req.max_output_tokens
    for name in SAME_OPTIONAL:
        if req.HasField(name):
            setattr(chat, name, getattr(req, name))
    for name in SAME_PLAIN:
        setattr(chat, name, getattr(req, name))
    if not chat.cache_salt and req.prompt_cache_key:
        chat.cache_salt = req.prompt_cache_key
    _logprobs(req, chat)
    if req.HasField("stop"):
        chat.stop.CopyFrom(req.stop)
    chat.stop_token_ids.extend(req.stop_token_ids)
    for key, bias in req.logit_bias.items():
        chat.logit_bias[key] = bias
    if req.HasField("chat_template_kwargs"):
        chat.chat_template_kwargs.CopyFrom(req.chat_template_kwargs)
    effort = _effort(req)
    if effort is not None:
        chat.reasoning_effort = effort
    if req.HasField("nvext"):
        chat.nvext.CopyFrom(req.nvext)
    for name in ("kv_transfer_params", "ec_transfer_params"):  # chat's path reads them
        if req.HasField(name):
            getattr(chat, name).CopyFrom(getattr(req, name))
    if stream:
        chat.stream_options.include_usage = True  # response.completed carries usage
    return chat

