"""CreateChatCompletionRequest (proto) -> a validated ChatPlan (domain).

All request validation for chat happens here, before the engine is called,
in a few named steps over the body read once (chat/body.py): the sampling,
the tools and their parsing, the prompt by its mode, the token budget, then
the plan. What every kind reads alike is in inference/shared/ (the body's
head and tail, sampling, messages, token media).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any

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
from tokenwire.server.inference.chat.body import ChatBody
from tokenwire.server.inference.chat.media import ChatMedia, refuse_raw_prompt
from tokenwire.server.inference.shared import sampling
from tokenwire.server.inference.shared.messages import (
    check_render_flags,
    has_media,
    messages_to_dicts,
    render_options,
    struct_to_dict,
)
from tokenwire.server.inference.shared.openai_body import engine_request, read_tail
from tokenwire.server.inference.shared.sampling import sampling_from_body
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
    # echo: the text put before each choice's content ("" when the last
    # message's role is not the reply's); None: echo not asked.
    echo: str | None = None

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


def build_chat_plan(
    req: chat_pb2.CreateChatCompletionRequest,
    engine: Engine,
    settings: ServerSettings,
    *,
    served_model: str,
    caller: Caller,
    stream: bool,
) -> ChatPlan:
    """The body read once, then its steps in the order their checks run:
    sampling, tools and parsing, the prompt (by its mode), the token budget,
    the plan."""
    body = ChatBody.read(req, engine, settings, served_model=served_model, caller=caller)
    params, top = chat_sampling(body, engine, settings)
    options, parsing = tools_and_parsing(body, engine, settings, params)
    prompt = chat_prompt(body, engine, options)
    token_budget(body, engine, params, prompt)
    return assemble(body, params, top, options, parsing, prompt,
                    settings=settings, caller=caller, stream=stream)


def chat_sampling(body: ChatBody, engine: Engine, settings: ServerSettings
                  ) -> tuple[GenerationParams, int]:
    """The sampling fields chat spells as completion does (shared/sampling.py),
    then chat's own: logprobs / top_logprobs (checked, returned), and
    response_format; max_tokens is set by token_budget."""
    p = sampling_from_body(body.req, settings, engine.vocab_size, engine.sampling_defaults())
    top = 0
    if body.top_logprobs is not None:
        top = sampling.logprobs_count("top_logprobs", body.top_logprobs, settings)
        if top > 0 and not body.logprobs:
            raise InvalidArgument("top_logprobs needs logprobs: true",
                                  param="top_logprobs", reason="MISSING_DEPENDENCY")
    if body.logprobs:
        p.logprobs = top
    if body.echo and p.prompt_logprobs is None:
        p.prompt_logprobs = top  # vLLM's: echo asks the prompt's logprobs too
    if "engine_data" in body.head.extra_fields and p.logprobs is None:
        p.logprobs = 0  # engine_data carries the sampled tokens' logprobs
    if body.response_format is not None:
        p.structured = structured_output(body.response_format)
    p.kv_transfer_params = body.kv_transfer
    return p, top


def tools_and_parsing(body: ChatBody, engine: Engine, settings: ServerSettings,
                      params: GenerationParams) -> tuple[RenderOptions, RequestParsers | None]:
    """The render options with the tools, tool_choice checked against them,
    and the configured parsers of tool calls and reasoning for this request
    (whether or not the prompt is rendered here, as vLLM does), which adjust
    `params`."""
    options = render_options(body.req, trust_template=settings.trust_request_chat_template)
    check_tool_choice(body.tool_choice_kind, body.tool_choice, options.tools)
    parsing = parsing_of(body, engine, settings, options)
    if parsing is not None:
        parsing.adjust(params)  # structured outputs for required / named; special tokens
    if (settings.exclude_tools_when_tool_choice_none and options.tools
            and body.tool_choice == "none"):
        # vLLM's --exclude-tools-when-tool-choice-none: the template renders no tools
        options = dataclasses.replace(options, tools=None)
    return options, parsing


def check_tool_choice(kind: str | None, choice: str | dict[str, Any] | None,
                      tools: list[dict[str, Any]] | None) -> None:
    """tool_choice (its Value's `kind`, read as `choice`): one of TOOL_CHOICES
    ("required" needs tools), or a function of `tools` named."""
    if kind is None or kind == "null_value":
        return
    if kind == "string_value":
        if choice not in TOOL_CHOICES:
            raise InvalidArgument(
                f"tool_choice '{choice}' is not one of {sorted(TOOL_CHOICES)}",
                param="tool_choice", reason="VALUE_NOT_ALLOWED",
            )
        if choice == "required" and not tools:
            raise InvalidArgument("tool_choice 'required' needs tools",
                                  param="tool_choice", reason="MISSING_DEPENDENCY")
        return
    if kind == "struct_value":
        d = choice if isinstance(choice, dict) else {}
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


def parsing_of(body: ChatBody, engine: Engine, settings: ServerSettings,
               options: RenderOptions) -> RequestParsers | None:
    """The request's parsing by the server's parsers; None without any (and
    then tools with a tool_choice other than "none" are refused, as vLLM does)."""
    choice = body.tool_choice
    spec = ParseSpec(
        tools=options.tools, tool_choice=choice, parallel_tool_calls=body.parallel_tool_calls,
        template_kwargs=options.template_kwargs, include_reasoning=body.include_reasoning,
        history_tool_calls=sum(len(m.tool_calls) for m in body.req.messages
                               if m.role == "assistant"),  # as vLLM counts them
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
        return StructuredOutput(json_schema=struct_to_dict(rf.json_schema.schema,
                                                          "response_format.json_schema.schema"))
    raise InvalidArgument(
        f"response_format.type '{rf.type}' is not one of text, json_object, json_schema",
        param="response_format", reason="VALUE_NOT_ALLOWED",
    )


@dataclasses.dataclass(frozen=True)
class ChatPrompt:
    """The prompt a chat runs: its ids (none yet for messages with images,
    rendered after the plan: `media`), the field they came in, and a
    token-in prompt's media (prepared after the plan)."""

    ids: list[int]
    param: str
    media: ChatMedia | None = None
    token_media: TokenMedia | None = None
    last: dict[str, Any] | None = None  # the last message (modes raw and template)


def chat_prompt(body: ChatBody, engine: Engine, options: RenderOptions) -> ChatPrompt:
    """The prompt by its mode: token ids as given (with nvext's media), or
    the messages (with images, raw text, or the template's rendering)."""
    if body.mode == "ids":
        prompt = _given_prompt(body, engine)
    else:
        prompt = _messages_prompt(body, engine, options)
        _no_media_without_ids(body.nv_media)
    if prompt.media is None:  # else checked once expanded (chat/media.py)
        v.prompt_fits(prompt.param, len(prompt.ids), engine.max_model_len)
    return prompt


def _given_prompt(body: ChatBody, engine: Engine) -> ChatPrompt:
    """Mode "ids": the ids as given, with nvext's media (prepared after the plan)."""
    param = body.prompt_param
    v.prompt_fits(param, len(body.given_ids), engine.max_model_len)  # before the walk
    ids = v.token_ids(param, body.given_ids, engine.vocab_size)
    nv = body.req.nvext
    media = token_media(parts=nv.content_parts,
                        features=nv.features if "features" in body.nv_media else None,
                        typed=nv.mm_features if "mm_features" in body.nv_media else None,
                        prefix="nvext.")
    if media is not None:
        check_model_takes(engine, media)
    return ChatPrompt(ids, param, token_media=media)


def _messages_prompt(body: ChatBody, engine: Engine, options: RenderOptions) -> ChatPrompt:
    """Modes "raw" and "template": the messages with images (rendered after
    the plan: chat/media.py), their text joined (raw), or rendered."""
    messages = _template_messages(body.req, options)
    if has_media(messages):
        if body.mode == "raw":
            raise refuse_raw_prompt()
        return ChatPrompt([], "messages", media=ChatMedia(messages, options,
                                                          *body.max_tokens_asked),
                          last=messages[-1])
    if body.mode == "raw":
        text = "".join(m["content"] for m in messages)
        return ChatPrompt(engine.encode(text, add_special_tokens=body.add_special), "messages",
                          last=messages[-1])
    ids = engine.render_chat(messages, options)
    if body.add_special:
        ids = engine.encode("", add_special_tokens=True) + ids
    return ChatPrompt(ids, "messages", last=messages[-1])


def echo_text(body: ChatBody, last: dict[str, Any] | None) -> str | None:
    """vLLM's echo: the last message's text when its role is the reply's
    (its text parts joined by newlines), else ""; None: not asked."""
    if not body.echo:
        return None
    if last is None or last.get("role") != body.role:
        return ""
    content = last.get("content") or ""
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if p.get("type") == "text")
    return str(content)


def _template_messages(req: chat_pb2.CreateChatCompletionRequest, options: RenderOptions
                       ) -> list[dict[str, Any]]:
    """The messages, checked and template-ready (image parts kept), with the
    render flags they go with."""
    messages = messages_to_dicts(req.messages, media=True)
    check_render_flags(req)
    if options.continue_final_message and messages[-1]["role"] != "assistant":
        raise InvalidArgument(
            "continue_final_message needs the last message to be from the assistant",
            param="continue_final_message", reason="INVALID_FINAL_MESSAGE",
        )
    return messages


def _no_media_without_ids(given: tuple[str, ...]) -> None:
    """Media for a token-in prompt with no ids: refused (images in messages
    are image_url parts)."""
    if given:
        name = given[0]
        raise InvalidArgument(
            f"nvext.{name} goes with nvext.token_data (the ids holding its image tokens); "
            "images in messages are image_url parts", param=f"nvext.{name}",
            reason="MISSING_DEPENDENCY")


def token_budget(body: ChatBody, engine: Engine, params: GenerationParams,
                 prompt: ChatPrompt) -> None:
    """max_tokens as the body asks it (ChatBody.max_tokens_asked, the one
    decision) within the prompt's room, min_tokens against it, the stream
    interval. (Messages with images: set again once expanded, chat/media.py.)"""
    param, asked = body.max_tokens_asked
    params.max_tokens = v.max_tokens(param, asked, len(prompt.ids), engine.max_model_len)
    sampling.check_min_tokens(params)
    params.stream_interval = v.stream_interval(body.req.stream_options)


def assemble(body: ChatBody, params: GenerationParams, top: int, options: RenderOptions,
             parsing: RequestParsers | None, prompt: ChatPrompt, *, settings: ServerSettings,
             caller: Caller, stream: bool) -> ChatPlan:
    """The plan: the engine request with the body's tail (priority, cache
    salt: shared/openai_body.py) and the response options."""
    head, tail = body.head, read_tail(body.req, settings, caller)
    request = engine_request(head, tail, prompt.ids, params, stream=stream)
    if parsing is not None:
        request.reasoning_ended, request.reasoning_kwargs = parsing.engine_reasoning(prompt.ids)
    return ChatPlan(
        request=request, model=head.model, render=options, parsing=parsing,
        extra_fields=head.extra_fields, as_token_ids=tail.as_token_ids,
        include_usage=tail.include_usage, continuous_usage=tail.continuous_usage,
        logprobs=body.logprobs, top_logprobs=top, return_token_ids=body.return_token_ids,
        speculative_prefill=body.speculative_prefill, role=body.role,
        media=prompt.media, token_media=prompt.token_media,
        max_tokens_asked=body.max_tokens_asked, echo=echo_text(body, prompt.last),
    )
