"""CreateChatCompletionRequest (proto) -> a validated ChatPlan (domain).

All request validation for chat happens here, before the engine is called.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format, struct_pb2

from tokenwire.server import sampling_rules as rules
from tokenwire.server import validation as v
from tokenwire.server.domain import Engine, GenerationParams, RenderOptions, StructuredOutput
from tokenwire.server.errors import InvalidArgument, NotFound
from tokenwire.server.settings import ServerSettings
from tokenwire.v1 import chat_pb2

EXTRA_FIELDS = frozenset(
    {"completion_token_ids", "engine_data", "prompt_token_ids", "timing", "stop_reason", "worker_id"}
)
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
TOOL_CHOICES = frozenset({"none", "auto", "required"})
MAX_CACHE_SALT = 1024


@dataclasses.dataclass
class ChatPlan:
    """Everything needed to run one chat request and shape its response."""

    request_id: str
    model: str
    prompt_token_ids: list[int]
    params: GenerationParams
    cache_salt: str | None
    priority: int
    logprobs: bool
    top_logprobs: int
    return_token_ids: bool
    extra_fields: frozenset[str]
    include_usage: bool
    continuous_usage: bool
    speculative_prefill: bool
    parse_tool_calls: bool = False
    reasoning_markers: tuple[str, str] | None = None  # split reasoning_content when set
    received: float = dataclasses.field(default_factory=time.time)

    @property
    def ids_wanted(self) -> bool:
        """Per-choice token_ids (and stream deltas of them) are wanted."""
        return self.return_token_ids or bool(
            self.extra_fields & {"completion_token_ids", "engine_data"}
        )


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


def check_model(requested: str, served: str) -> str:
    if requested and requested != served:
        raise NotFound(
            f"model '{requested}' is not served here; this server serves '{served}'",
            param="model",
            reason="MODEL_NOT_FOUND",
        )
    return served


def new_request_id(prefix: str, requested: str) -> str:
    if requested:
        if len(requested) > 256:
            raise InvalidArgument("request_id must be at most 256 characters", param="request_id")
        return requested
    return f"{prefix}-{uuid.uuid4().hex}"


def pick_cache_salt(tenant_header: str | None, nvext_salt: str, root_salt: str) -> str | None:
    """x-tenant-id metadata > nvext.cache_salt > root cache_salt; '' = absent."""
    salt = tenant_header or nvext_salt or root_salt or None
    if salt is not None and len(salt) > MAX_CACHE_SALT:
        raise InvalidArgument(
            f"cache_salt must be at most {MAX_CACHE_SALT} characters", param="cache_salt"
        )
    return salt


def stop_strings(param: str, value: struct_pb2.Value | None, limit: int) -> list[str]:
    """`stop`: a string, a list of strings, or null."""
    if value is None:
        return []
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return []
    if kind == "string_value":
        items = [value.string_value]
    elif kind == "list_value":
        items = []
        for i, item in enumerate(value.list_value.values):
            if item.WhichOneof("kind") != "string_value":
                raise InvalidArgument(f"{param}[{i}] must be a string", param=param)
            items.append(item.string_value)
    else:
        raise InvalidArgument(f"{param} must be a string or a list of strings", param=param)
    if len(items) > limit:
        raise InvalidArgument(f"{param} may hold at most {limit} strings, got {len(items)}", param=param)
    for i, s in enumerate(items):
        if not s:
            raise InvalidArgument(f"{param}[{i}] must not be empty", param=param)
    return items


def _content_text(param: str, content: struct_pb2.Value, allow_null: bool) -> str | None:
    kind = content.WhichOneof("kind")
    if kind is None or kind == "null_value":
        if not allow_null:
            raise InvalidArgument(f"{param} must be a string or a list of text parts", param=param)
        return None
    if kind == "string_value":
        return content.string_value
    if kind != "list_value":
        raise InvalidArgument(f"{param} must be a string or a list of text parts", param=param)
    texts = []
    for i, part in enumerate(content.list_value.values):
        pparam = f"{param}[{i}]"
        if part.WhichOneof("kind") != "struct_value":
            raise InvalidArgument(f"{pparam} must be an object like {{\"type\": \"text\", \"text\": ...}}", param=param)
        fields = part.struct_value.fields
        ptype = fields["type"].string_value if "type" in fields else ""
        if ptype != "text":
            raise InvalidArgument(
                f"{pparam}.type '{ptype}' is not supported: this model takes text parts only",
                param=param,
            )
        if "text" not in fields or fields["text"].WhichOneof("kind") != "string_value":
            raise InvalidArgument(f"{pparam}.text must be a string", param=param)
        texts.append(fields["text"].string_value)
    return "".join(texts)


def messages_to_dicts(messages: Sequence[chat_pb2.ChatMessage]) -> list[dict[str, Any]]:
    """Validate messages and turn them into template-ready dicts."""
    if not messages:
        raise InvalidArgument("messages must hold at least one message", param="messages")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        param = f"messages[{i}]"
        if m.role not in ROLES:
            raise InvalidArgument(
                f"{param}.role '{m.role}' is not one of {sorted(ROLES)}", param=f"{param}.role"
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
            raise InvalidArgument(f"{param}.type must be 'function', got '{t.type}'", param=param)
        if not t.function.name:
            raise InvalidArgument(f"{param}.function.name must not be empty", param=param)
        fn: dict[str, Any] = {"name": t.function.name}
        if t.function.description:
            fn["description"] = t.function.description
        if t.function.HasField("parameters"):
            fn["parameters"] = struct_to_dict(t.function.parameters)
        out.append({"type": "function", "function": fn})
    return out


def check_tool_choice(value: struct_pb2.Value, tools: list[dict[str, Any]] | None) -> None:
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return
    if kind == "string_value":
        if value.string_value not in TOOL_CHOICES:
            raise InvalidArgument(
                f"tool_choice '{value.string_value}' is not one of {sorted(TOOL_CHOICES)}",
                param="tool_choice",
            )
        if value.string_value == "required" and not tools:
            raise InvalidArgument("tool_choice 'required' needs tools", param="tool_choice")
        return
    if kind == "struct_value":
        d = struct_to_dict(value.struct_value)
        name = (d.get("function") or {}).get("name")
        known = {t["function"]["name"] for t in tools or []}
        if d.get("type") != "function" or not isinstance(name, str) or name not in known:
            raise InvalidArgument(
                "tool_choice must name a function of tools: {\"type\": \"function\", "
                "\"function\": {\"name\": ...}}",
                param="tool_choice",
            )
        return
    raise InvalidArgument("tool_choice must be a string or an object", param="tool_choice")


def structured_output(rf: chat_pb2.ResponseFormat) -> StructuredOutput | None:
    if not rf.type or rf.type == "text":
        return None
    if rf.type == "json_object":
        return StructuredOutput(json_object=True)
    if rf.type == "json_schema":
        if not rf.json_schema.HasField("schema"):
            raise InvalidArgument(
                "response_format.json_schema.schema is required for type 'json_schema'",
                param="response_format",
            )
        return StructuredOutput(json_schema=struct_to_dict(rf.json_schema.schema))
    raise InvalidArgument(
        f"response_format.type '{rf.type}' is not one of text, json_object, json_schema",
        param="response_format",
    )


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def sampling_from_chat(
    req: chat_pb2.CreateChatCompletionRequest, settings: ServerSettings, vocab_size: int
) -> tuple[GenerationParams, bool, int]:
    """Sampling parameters of a chat request (max_tokens is set later)."""
    nv = req.nvext
    p = GenerationParams()
    present: dict[str, tuple[str, Any]] = {
        name: (name, getattr(req, name))
        for name in ("n", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
                     "frequency_penalty", "repetition_penalty", "min_tokens", "prompt_logprobs")
        if req.HasField(name)
    }
    for name in ("top_k", "repetition_penalty"):  # older Dynamo put these in nvext
        if name not in present and nv.HasField(name):
            present[name] = (f"nvext.{name}", getattr(nv, name))
    if nv.HasField("max_thinking_tokens"):
        present["thinking_token_budget"] = ("nvext.max_thinking_tokens", nv.max_thinking_tokens)
    rules.apply_ranges(p, present, settings, vocab_size)
    if nv.HasField("greed_sampling") and nv.greed_sampling:
        p.temperature = 0.0
    rules.check_greedy_choices(p, "n")
    if req.HasField("seed"):
        p.seed = v.int_range("seed", req.seed, -(2**63), 2**63 - 1)
    p.stop = stop_strings("stop", req.stop if req.HasField("stop") else None, settings.max_stop_strings)
    p.stop_token_ids = rules.stop_token_ids("stop_token_ids", req.stop_token_ids, settings, vocab_size)
    ignore_eos = _opt(req, "ignore_eos")
    if ignore_eos is None and nv.HasField("ignore_eos"):
        ignore_eos = nv.ignore_eos
    p.ignore_eos = bool(ignore_eos)
    # OpenAI logprobs / top_logprobs.
    want_lp = bool(req.logprobs) if req.HasField("logprobs") else False
    top = 0
    if req.HasField("top_logprobs"):
        top = v.int_range("top_logprobs", req.top_logprobs, 0, settings.max_top_logprobs)
        if top > 0 and not want_lp:
            raise InvalidArgument("top_logprobs needs logprobs: true", param="top_logprobs")
    if want_lp:
        p.logprobs = top
    if "engine_data" in set(nv.extra_fields) and p.logprobs is None:
        p.logprobs = 0  # engine_data carries the sampled tokens' logprobs
    rules.copy_text_flags(p, req)
    p.logit_bias = rules.logit_bias("logit_bias", req.logit_bias.items(), vocab_size)
    if req.HasField("response_format"):
        p.structured = structured_output(req.response_format)
    return p, want_lp, top


def build_chat_plan(
    req: chat_pb2.CreateChatCompletionRequest,
    engine: Engine,
    settings: ServerSettings,
    *,
    served_model: str,
    tenant: str | None,
) -> ChatPlan:
    model = check_model(req.model, served_model)
    request_id = new_request_id("chatcmpl", req.request_id)
    nv = req.nvext
    unknown = sorted(set(nv.extra_fields) - EXTRA_FIELDS)
    if unknown:
        raise InvalidArgument(
            f"nvext.extra_fields: unknown name(s) {unknown}; known: {sorted(EXTRA_FIELDS)}",
            param="nvext.extra_fields",
        )
    params, want_lp, top = sampling_from_chat(req, settings, engine.vocab_size)

    # Tool calls are parsed from the output when tools are offered and the
    # tool choice is not "none" (whether or not the prompt was rendered here).
    tools = tools_to_dicts(req.tools)
    if req.HasField("tool_choice"):
        check_tool_choice(req.tool_choice, tools)
    parse_tool_calls = bool(tools) and req.tool_choice.string_value != "none"

    # The prompt: token ids as given, raw text, or the rendered template.
    if len(nv.token_data) > 0:
        prompt_param = "nvext.token_data"
        prompt = v.token_ids(prompt_param, nv.token_data, engine.vocab_size)
    else:
        prompt_param = "messages"
        messages = messages_to_dicts(req.messages)
        add_gen = req.add_generation_prompt if req.HasField("add_generation_prompt") else True
        cont = req.continue_final_message if req.HasField("continue_final_message") else False
        if cont:
            if req.HasField("add_generation_prompt") and add_gen:
                raise InvalidArgument(
                    "continue_final_message and add_generation_prompt cannot both be true",
                    param="continue_final_message",
                )
            add_gen = False
            if messages[-1]["role"] != "assistant":
                raise InvalidArgument(
                    "continue_final_message needs the last message to be from the assistant",
                    param="continue_final_message",
                )
        add_special = req.add_special_tokens if req.HasField("add_special_tokens") else False
        if nv.HasField("use_raw_prompt") and nv.use_raw_prompt:
            text = "".join(m["content"] for m in messages)
            prompt = engine.encode(text, add_special_tokens=add_special)
        else:
            kwargs = (
                struct_to_dict(req.chat_template_kwargs)
                if req.HasField("chat_template_kwargs")
                else {}
            )
            options = RenderOptions(
                add_generation_prompt=add_gen,
                continue_final_message=cont,
                chat_template=req.chat_template if req.HasField("chat_template") else None,
                template_kwargs=kwargs,
                tools=tools,
            )
            prompt = engine.render_chat(messages, options)
            if add_special:
                prompt = engine.encode("", add_special_tokens=True) + prompt
    v.prompt_fits(prompt_param, len(prompt), engine.max_model_len)

    if req.HasField("max_completion_tokens"):
        params.max_tokens = v.max_tokens(
            "max_completion_tokens", req.max_completion_tokens, len(prompt), engine.max_model_len
        )
    else:
        params.max_tokens = v.max_tokens(
            "max_tokens", _opt(req, "max_tokens"), len(prompt), engine.max_model_len
        )
    if params.min_tokens > params.max_tokens:
        raise InvalidArgument(
            f"min_tokens ({params.min_tokens}) exceeds max_tokens ({params.max_tokens})",
            param="min_tokens",
        )
    params.stream_interval = v.stream_interval(req.stream_options)

    priority = 0
    if req.HasField("priority"):
        priority = req.priority
    elif nv.agent_hints.HasField("priority"):
        priority = nv.agent_hints.priority
    if priority != 0 and settings.scheduling_policy != "priority":
        raise InvalidArgument(
            "priority needs the server's priority scheduler (--scheduling-policy priority)",
            param="priority",
        )

    return ChatPlan(
        request_id=request_id,
        model=model,
        prompt_token_ids=prompt,
        params=params,
        cache_salt=pick_cache_salt(tenant, nv.cache_salt, req.cache_salt),
        priority=priority,
        logprobs=want_lp,
        top_logprobs=top,
        return_token_ids=bool(req.return_token_ids) if req.HasField("return_token_ids") else False,
        extra_fields=frozenset(nv.extra_fields),
        include_usage=bool(req.stream_options.include_usage),
        continuous_usage=bool(req.stream_options.continuous_usage_stats),
        speculative_prefill=bool(nv.agent_hints.speculative_prefill),
        parse_tool_calls=parse_tool_calls,
        reasoning_markers=engine.reasoning_markers if settings.reasoning_parser else None,
    )
