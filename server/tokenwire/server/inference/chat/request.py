"""CreateChatCompletionRequest (proto) -> a validated ChatPlan (domain).

All request validation for chat happens here, before the engine is called;
what every kind reads alike is in inference/shared/ (sampling, identity,
tenant policy, messages, nvext).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping
from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import (
    Caller,
    Engine,
    EngineRequest,
    GenerationParams,
    RenderOptions,
    StructuredOutput,
)
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.parsing import HiddenReasoning, ParseSpec, RequestParsers
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.chat.media import ChatMedia, refuse_raw_prompt
from tokenwire.server.inference.shared import sampling
from tokenwire.server.inference.shared.identity import check_model, lora_of, new_request_id
from tokenwire.server.inference.shared.logprobs import as_token_ids
from tokenwire.server.inference.shared.messages import (
    check_render_flags,
    has_media,
    messages_to_dicts,
    render_options,
    struct_to_dict,
)
from tokenwire.server.inference.shared.nvext import check_extra_fields
from tokenwire.server.inference.shared.prompt_chars import rendered_chars
from tokenwire.server.inference.shared.sampling import opt, sampling_from_body
from tokenwire.server.inference.shared.tenant_policy import body_priority, pick_cache_salt
from tokenwire.server.inference.shared.token_media import TokenMedia, check_model_takes, token_media
from tokenwire.v1 import chat_pb2

TOOL_CHOICES = frozenset({"none", "auto", "required"})


@dataclasses.dataclass
class ChatPlan:
    """Everything needed to run one chat request and shape its response:
    the engine request, as in GeneratePlan, plus the response options."""

    request: EngineRequest
    model: str
    render: RenderOptions  # how the prompt is (or the next turn would be) rendered
    logprobs: bool
    top_logprobs: int
    return_token_ids: bool
    extra_fields: frozenset[str]
    include_usage: bool
    continuous_usage: bool
    speculative_prefill: bool
    # The configured parsers of tool calls and reasoning, for this request
    # (Engine.chat_parsers); None: the text goes out as generated.
    parsing: RequestParsers | None = None
    as_token_ids: bool = False  # return_tokens_as_token_ids: logprob tokens spelled "token_id:N"
    received: float = dataclasses.field(default_factory=time.time)
    weight_version: str = ""  # the weight version current when the request was planned
    role: str = "assistant"  # the reply's role: --response-role, or the last message's (vLLM's)
    # Messages with images, rendered after the plan is built (chat/media.py).
    media: ChatMedia | None = None
    # Token ids with their media (nvext.content_parts / features), prepared
    # after the plan is built (chat/kind.py); the max_tokens field as asked.
    token_media: TokenMedia | None = None
    max_tokens_asked: tuple[str, int | None] = ("max_tokens", None)

    @property
    def fingerprint(self) -> str:
        """system_fingerprint: the weight version (tokenwire-<model> if unknown)."""
        return self.weight_version or f"tokenwire-{self.model}"

    @functools.cached_property
    def ids_wanted(self) -> bool:
        """Per-choice token_ids (and stream deltas of them) are wanted (read
        per streamed token: worked out once)."""
        return self.return_token_ids or bool(
            self.extra_fields & {"completion_token_ids", "engine_data"}
        )


def check_tool_choice(value: struct_pb2.Value, tools: list[dict[str, Any]] | None) -> None:
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return
    if kind == "string_value":
        if value.string_value not in TOOL_CHOICES:
            raise InvalidArgument(
                f"tool_choice '{value.string_value}' is not one of {sorted(TOOL_CHOICES)}",
                param="tool_choice", reason="VALUE_NOT_ALLOWED",
            )
        if value.string_value == "required" and not tools:
            raise InvalidArgument("tool_choice 'required' needs tools",
                                  param="tool_choice", reason="MISSING_DEPENDENCY")
        return
    if kind == "struct_value":
        d = struct_to_dict(value.struct_value)
        name = (d.get("function") or {}).get("name")
        known = {t["function"]["name"] for t in tools or []}
        if d.get("type") != "function" or not isinstance(name, str) or name not in known:
            raise InvalidArgument(
                "tool_choice must name a function of tools: {\"type\": \"function\", "
                "\"function\": {\"name\": ...}}",
                param="tool_choice", reason="INVALID_FORMAT",
            )
        return
    raise InvalidArgument("tool_choice must be a string or an object",
                          param="tool_choice", reason="INVALID_TYPE")


def parsing_of(req: chat_pb2.CreateChatCompletionRequest, engine: Engine,
               settings: ServerSettings, options: RenderOptions) -> RequestParsers | None:
    """The request's parsing by the server's parsers; None without any (and
    then tools with a tool_choice other than "none" are refused, as vLLM does)."""
    choice: str | dict[str, Any] | None = None
    kind = req.tool_choice.WhichOneof("kind") if req.HasField("tool_choice") else None
    if kind == "string_value":
        choice = req.tool_choice.string_value
    elif kind == "struct_value":
        choice = struct_to_dict(req.tool_choice.struct_value)
    spec = ParseSpec(
        tools=options.tools, tool_choice=choice,
        parallel_tool_calls=(req.parallel_tool_calls if req.HasField("parallel_tool_calls")
                             else None),
        template_kwargs=options.template_kwargs,
        include_reasoning=(req.include_reasoning if req.HasField("include_reasoning") else True),
    )
    parsers = engine.chat_parsers(settings.parser_config())
    if parsers is None:
        if options.tools and choice != "none":  # vLLM's answer without the flags
            raise InvalidArgument(
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                "to be set" if choice in (None, "auto") else
                f"tool_choice={_choice_text(choice)} requires --tool-call-parser to be set",
                param="tool_choice", reason="FEATURE_DISABLED")
        return None
    parsing = parsers.for_request(spec)
    if parsing is not None and not spec.include_reasoning:
        return HiddenReasoning(parsing)
    return parsing


def _choice_text(choice: str | dict[str, Any]) -> str:
    if isinstance(choice, dict):
        return f'function "{(choice.get("function") or {}).get("name")}"'
    return f'"{choice}"'


def structured_output(rf: chat_pb2.ResponseFormat) -> StructuredOutput | None:
    if not rf.type or rf.type == "text":
        return None
    if rf.type == "json_object":
        return StructuredOutput(json_object=True)
    if rf.type == "json_schema":
        if not rf.json_schema.HasField("schema"):
            raise InvalidArgument(
                "response_format.json_schema.schema is required for type 'json_schema'",
                param="response_format", reason="FIELD_REQUIRED",
            )
        return StructuredOutput(json_schema=struct_to_dict(rf.json_schema.schema))
    raise InvalidArgument(
        f"response_format.type '{rf.type}' is not one of text, json_object, json_schema",
        param="response_format", reason="VALUE_NOT_ALLOWED",
    )


def sampling_from_chat(
    req: chat_pb2.CreateChatCompletionRequest, settings: ServerSettings, vocab_size: int,
    defaults: Mapping[str, Any] | None = None,
) -> tuple[GenerationParams, bool, int]:
    """Sampling parameters of a chat request (max_tokens is set later)."""
    p = sampling_from_body(req, settings, vocab_size, defaults)
    # OpenAI logprobs / top_logprobs.
    want_lp = bool(req.logprobs) if req.HasField("logprobs") else False
    top = 0
    if req.HasField("top_logprobs"):
        top = sampling.logprobs_count("top_logprobs", req.top_logprobs, settings)
        if top > 0 and not want_lp:
            raise InvalidArgument("top_logprobs needs logprobs: true",
                                  param="top_logprobs", reason="MISSING_DEPENDENCY")
    if want_lp:
        p.logprobs = top
    if "engine_data" in set(req.nvext.extra_fields) and p.logprobs is None:
        p.logprobs = 0  # engine_data carries the sampled tokens' logprobs
    if req.HasField("response_format"):
        p.structured = structured_output(req.response_format)
    return p, want_lp, top


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


def build_chat_plan(
    req: chat_pb2.CreateChatCompletionRequest,
    engine: Engine,
    settings: ServerSettings,
    *,
    served_model: str,
    caller: Caller,
    stream: bool,
) -> ChatPlan:
    model = check_model(req.model, served_model, engine.lora_names())
    request_id = new_request_id("chatcmpl", req.request_id, caller.request_id)
    nv = req.nvext
    media: ChatMedia | None = None
    ids_media: TokenMedia | None = None
    given_param, given_ids = given_prompt_ids(req)
    if not given_ids:
        # Cheap limit first: a text too long for the window by its length
        # alone (messages with every rendered field, tools, template
        # kwargs) is refused before anything is converted, rendered or
        # tokenized. (The rendered text itself is bounded by the engine:
        # engine/guarded.py.)
        param, chars = rendered_chars(req)
        v.text_fits(param, chars, engine.max_model_len, engine.max_token_chars)
    extra_fields = check_extra_fields(nv)
    params, want_lp, top = sampling_from_chat(req, settings, engine.vocab_size,
                                              engine.sampling_defaults())

    # Tool calls and reasoning are parsed from the output by the configured
    # parsers (whether or not the prompt was rendered here), as vLLM does.
    options = render_options(req, trust_template=settings.trust_request_chat_template)
    tools = options.tools
    if req.HasField("tool_choice"):
        check_tool_choice(req.tool_choice, tools)
    parsing = parsing_of(req, engine, settings, options)
    if parsing is not None:
        parsing.adjust(params)  # structured outputs for required / named; special tokens
    if (settings.exclude_tools_when_tool_choice_none and tools
            and req.tool_choice.WhichOneof("kind") == "string_value"
            and req.tool_choice.string_value == "none"):
        # vLLM's --exclude-tools-when-tool-choice-none: the template renders no tools
        options = dataclasses.replace(options, tools=None)

    # The prompt: token ids as given, raw text, or the rendered template.
    if given_ids:
        prompt_param = given_param
        v.prompt_fits(prompt_param, len(given_ids), engine.max_model_len)  # before the walk
        prompt = v.token_ids(prompt_param, given_ids, engine.vocab_size)
        ids_media = _token_media(nv)
        if ids_media is not None:
            check_model_takes(engine, ids_media)
    else:
        prompt_param = "messages"
        messages = messages_to_dicts(req.messages, media=True)
        check_render_flags(req)
        if options.continue_final_message and messages[-1]["role"] != "assistant":
            raise InvalidArgument(
                "continue_final_message needs the last message to be from the assistant",
                param="continue_final_message", reason="INVALID_FINAL_MESSAGE",
            )
        add_special = req.add_special_tokens if req.HasField("add_special_tokens") else False
        raw = nv.HasField("use_raw_prompt") and nv.use_raw_prompt
        if has_media(messages):
            if raw:
                raise refuse_raw_prompt()
            asked = ("max_completion_tokens" if req.HasField("max_completion_tokens")
                     else "max_tokens")
            media = ChatMedia(messages, options, asked, opt(req, asked))
            prompt = []  # rendered with its images after the plan (chat/media.py)
        elif raw:
            text = "".join(m["content"] for m in messages)
            prompt = engine.encode(text, add_special_tokens=add_special)
        else:
            prompt = engine.render_chat(messages, options)
            if add_special:
                prompt = engine.encode("", add_special_tokens=True) + prompt
    if not given_ids:
        _no_media_without_ids(nv)
    if media is None:  # else checked once expanded (chat/media.py)
        v.prompt_fits(prompt_param, len(prompt), engine.max_model_len)

    if req.HasField("max_completion_tokens"):
        params.max_tokens = v.max_tokens(
            "max_completion_tokens", req.max_completion_tokens, len(prompt), engine.max_model_len
        )
    else:
        params.max_tokens = v.max_tokens(
            "max_tokens", opt(req, "max_tokens"), len(prompt), engine.max_model_len
        )
    sampling.check_min_tokens(params)
    params.stream_interval = v.stream_interval(req.stream_options)

    priority = body_priority(req, settings, caller)
    force_usage = settings.enable_force_include_usage  # vLLM's: both, on every stream
    ended, reasoning_kwargs = (None, None) if parsing is None else parsing.engine_reasoning(prompt)

    return ChatPlan(
        request=EngineRequest(
            request_id=request_id,
            prompt_token_ids=prompt,
            params=params,
            cache_salt=pick_cache_salt(caller, nv.cache_salt, req.cache_salt),
            priority=priority,
            stream=stream,
            lora=lora_of(model, served_model),
            reasoning_ended=ended,
            reasoning_kwargs=reasoning_kwargs,
        ),
        model=model,
        render=options,
        logprobs=want_lp,
        top_logprobs=top,
        return_token_ids=bool(req.return_token_ids) if req.HasField("return_token_ids") else False,
        extra_fields=extra_fields,
        include_usage=force_usage or bool(req.stream_options.include_usage),
        continuous_usage=force_usage or bool(req.stream_options.continuous_usage_stats),
        speculative_prefill=bool(nv.agent_hints.speculative_prefill),
        parsing=parsing,
        as_token_ids=as_token_ids(req, settings.return_tokens_as_token_ids),
        role=_reply_role(req, settings),
        media=media,
        token_media=ids_media,
        max_tokens_asked=(("max_completion_tokens", req.max_completion_tokens)
                          if req.HasField("max_completion_tokens")
                          else ("max_tokens", opt(req, "max_tokens"))),
    )


def _token_media(nv: chat_pb2.NvExtRequest) -> TokenMedia | None:
    """nvext's media of a token-in prompt (inference/shared/token_media.py)."""
    return token_media(parts=nv.content_parts,
                       features=nv.features if nv.HasField("features") else None,
                       typed=nv.mm_features if nv.HasField("mm_features") else None,
                       prefix="nvext.")


def _no_media_without_ids(nv: chat_pb2.NvExtRequest) -> None:
    """Media for a token-in prompt with no ids: refused (images in messages
    are image_url parts)."""
    for name in ("content_parts", "features", "mm_features"):
        given = nv.content_parts if name == "content_parts" else nv.HasField(name)
        if given:
            raise InvalidArgument(
                f"nvext.{name} goes with nvext.token_data (the ids holding its image tokens); "
                "images in messages are image_url parts", param=f"nvext.{name}",
                reason="MISSING_DEPENDENCY")


def _reply_role(req: chat_pb2.CreateChatCompletionRequest, settings: ServerSettings) -> str:
    """vLLM's: --response-role when the request adds the generation prompt
    (its default), else the role of the last message (which it continues)."""
    add_gen = req.add_generation_prompt if req.HasField("add_generation_prompt") else True
    if add_gen or not req.messages:
        return settings.response_role
    return req.messages[-1].role or settings.response_role
