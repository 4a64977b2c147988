"""Domain outputs -> chat protobuf responses (unary and streamed chunks)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from tokenwire.server.core.domain import ChoiceOutput, Engine, EngineOutput, EngineTimes
from tokenwire.server.core.parsing import ChoiceParser, ParsedToolCall, ToolCallDelta
from tokenwire.server.inference.chat.request import ChatPlan
from tokenwire.server.inference.shared.choices import ChoiceAccumulator, finish_choice
from tokenwire.server.inference.shared.kv_transfer import put_kv_answer
from tokenwire.server.inference.shared.logprobs import choice_logprobs, native_prompt_logprobs
from tokenwire.server.inference.shared.nvext import add_prompt_nvext, response_nvext
from tokenwire.server.inference.shared.outputs import chunk_maker
from tokenwire.server.inference.shared.usage import reasoning_tokens, timing, usage
from tokenwire.v1 import chat_pb2, common_pb2, multimodal_pb2


def _finish_reason(reason: str | None, tool_finish: bool = False) -> str:
    """vLLM's: a "stop" after tool calls (auto or required) is "tool_calls"."""
    if reason is None:
        return ""
    if reason == "stop" and tool_finish:
        return "tool_calls"
    return reason


def _add_calls(target: Any, calls: list[ParsedToolCall]) -> None:
    for call in calls:
        tc = target.add(id=call.id, type="function")
        tc.function.name = call.name
        tc.function.arguments = call.arguments


def _add_call_deltas(target: Any, calls: list[ToolCallDelta]) -> None:
    """vLLM's DeltaToolCalls: id, type and name on a call's first piece only."""
    for call in calls:
        tc = target.add(index=call.index)
        if call.id is not None:
            tc.id, tc.type = call.id, "function"
        if call.name is not None:
            tc.function.name = call.name
        if call.arguments is not None:
            tc.function.arguments = call.arguments


def build_chat_response(
    plan: ChatPlan, engine: Engine, final: EngineOutput, *, created: int, worker_id: str,
    first_seen: float | None,
) -> chat_pb2.CreateChatCompletionResponse:
    resp = chat_pb2.CreateChatCompletionResponse(
        id=plan.request.request_id,
        object="chat.completion",
        created=created,
        model=plan.model,
        system_fingerprint=plan.fingerprint,
    )
    completion_len = 0
    mirror = None
    for out in sorted(final.choices, key=lambda c: c.index):
        acc = ChoiceAccumulator(out.index)
        acc.add(out)
        completion_len += len(out.token_ids)
        message = chat_pb2.ResponseMessage(role=plan.role)
        tool_finish = False
        if plan.parsing is None:
            message.content = out.text
        else:  # text only: the choice's ids, logprobs and spans go out as generated
            parsed = plan.parsing.parse(out.text, out.token_ids, final.prompt_token_ids)
            if parsed.content is not None:
                message.content = parsed.content
            if parsed.reasoning is not None:
                message.reasoning_content = message.reasoning = parsed.reasoning
            _add_calls(message.tool_calls, parsed.tool_calls)
            tool_finish = parsed.tool_finish
        if plan.echo is not None:  # vLLM's: "" + no content is ""
            message.content = plan.echo + message.content
        choice = resp.choices.add(
            index=out.index,
            message=message,
            finish_reason=_finish_reason(out.finish_reason, tool_finish),
        )
        if plan.logprobs:
            choice.logprobs.CopyFrom(choice_logprobs(engine, out.logprobs, plan.top_logprobs,
                                                     plan.as_token_ids))
        if plan.ids_wanted:
            choice.token_ids.extend(out.token_ids)
        nv = finish_choice(choice, out, plan, acc, final.prompt_token_ids)
        if nv is not None and out.index == 0:
            mirror = nv
    if plan.return_token_ids:
        resp.prompt_token_ids.extend(final.prompt_token_ids)
        add_placeholders(resp.mm_placeholders, plan)
    native_prompt_logprobs(resp.prompt_logprobs, engine, final.prompt_logprobs)  # vLLM's shape
    reasoning = reasoning_tokens(plan.parsing, (c.token_ids for c in final.choices))
    resp.usage.CopyFrom(usage(len(final.prompt_token_ids), completion_len,
                              final.num_cached_tokens, reasoning))
    put_kv_answer(resp.kv_transfer_params, final.kv_transfer_params)
    nvr = response_nvext(
        plan, worker_id, prompt_ids=final.prompt_token_ids, mirror=mirror,
        timing_msg=timing(plan.received, final.times, first_seen),
        prompt_logprobs=(engine, final.prompt_logprobs),
    )
    if nvr is not None:
        resp.nvext.CopyFrom(nvr)
    return resp


def add_placeholders(msg: multimodal_pb2.MultiModalPlaceholders, plan: ChatPlan) -> None:
    """Where each image's placeholder tokens sit in the prompt ids (vLLM's
    mm_placeholders), for a prompt with images."""
    prepared = plan.request.multimodal
    if prepared is None:
        return
    for offset, length in prepared.placeholders.get("image", []):
        msg.image.add(offset=offset, length=length)


class ChatStreamBuilder:
    """Turns a sequence of delta EngineOutputs into chunk messages."""

    def __init__(self, plan: ChatPlan, engine: Engine, *, created: int, worker_id: str):
        self.plan = plan
        self.engine = engine
        self.created = created
        self.worker_id = worker_id
        self._id = plan.request.request_id
        self._model = plan.model
        self._fingerprint = plan.fingerprint
        self.accs = {i: ChoiceAccumulator(i) for i in range(plan.request.params.n)}
        self.first_seen: float | None = None
        self.prompt_ids: list[int] = plan.request.prompt_token_ids
        self.cached = 0
        self.times: EngineTimes | None = None
        self._mirror: chat_pb2.ChoiceNvExt | None = None
        # One parser per choice (stateful), made at its first output.
        self.parsers: dict[int, ChoiceParser] = {}

    @functools.cached_property
    def _chunk(self) -> Callable[[], chat_pb2.StreamChatCompletionResponse]:
        """A new chunk with the fields every chunk repeats."""
        return chunk_maker(chat_pb2.StreamChatCompletionResponse(
            id=self._id,
            object="chat.completion.chunk",
            created=self.created,
            model=self._model,
            system_fingerprint=self._fingerprint,
        ))

    def first_chunk(self, first: EngineOutput | None = None
                    ) -> chat_pb2.StreamChatCompletionResponse:
        """The role chunk; with the engine's first output, also the prompt
        logprobs it carries (asked with prompt_logprobs; vLLM's shape)."""
        chunk = self._chunk()
        if first is not None:
            native_prompt_logprobs(chunk.prompt_logprobs, self.engine, first.prompt_logprobs)
        for i in range(self.plan.request.params.n):
            chunk.choices.add(index=i,
                              delta=chat_pb2.ChatCompletionDelta(role=self.plan.role,
                                                                    content=""))
        if self.plan.return_token_ids:
            chunk.prompt_token_ids.extend(self.prompt_ids)
            add_placeholders(chunk.mm_placeholders, self.plan)
        add_prompt_nvext(chunk.nvext, self.plan.extra_fields, self.prompt_ids,
                         (self.engine, first.prompt_logprobs if first is not None else None))
        return chunk

    def echo_chunks(self) -> list[chat_pb2.StreamChatCompletionResponse]:
        """vLLM's echo, streamed: after the role chunk, a chunk per choice
        with the last message's text (none without text)."""
        if not self.plan.echo:
            return []
        out = []
        for i in range(self.plan.request.params.n):
            chunk = self._chunk()
            chunk.choices.add(index=i, delta=chat_pb2.ChatCompletionDelta(content=self.plan.echo))
            if self.plan.continuous_usage:
                chunk.usage.CopyFrom(self._usage())  # (nothing generated yet)
            out.append(chunk)
        return out

    def on_output(self, out: EngineOutput) -> chat_pb2.StreamChatCompletionResponse | None:
        if self.first_seen is None and any(c.token_ids for c in out.choices):
            self.first_seen = time.time()
        if out.prompt_token_ids:
            self.prompt_ids = out.prompt_token_ids
        self.cached = out.num_cached_tokens
        if out.times is not None:
            self.times = out.times
        chunk = self._chunk()
        plan = self.plan
        send = False  # tracked here: asking the message (chunk.choices) costs more
        for c in out.choices:
            acc = self.accs.get(c.index)
            if acc is None:
                acc = self.accs[c.index] = ChoiceAccumulator(c.index)
            acc.add(c)
            if not c.token_ids and not c.text and c.finish_reason is None:
                continue
            if plan.parsing is None:
                ch = chunk.choices.add(index=c.index)
                ch.delta.content = c.text
            else:
                parsed = self._parsed(chunk, c)
                if parsed is None:  # text held back, and nothing else to carry
                    continue
                ch = parsed
            send = True
            if plan.ids_wanted:
                ch.token_ids.extend(c.token_ids)
            if plan.logprobs:
                ch.logprobs.CopyFrom(choice_logprobs(self.engine, c.logprobs, plan.top_logprobs,
                                                     plan.as_token_ids))
            if c.finish_reason is not None:
                parser = self.parsers.get(c.index)
                ch.finish_reason = _finish_reason(c.finish_reason,
                                                  parser is not None and parser.tool_finish)
                nv = finish_choice(ch, c, plan, acc, self.prompt_ids)
                if nv is not None and c.index == 0:
                    self._mirror = nv
        if plan.continuous_usage and send:
            chunk.usage.CopyFrom(self._usage())
        if out.finished:
            nvr = response_nvext(
                plan, self.worker_id, prompt_ids=None, mirror=self._mirror,
                timing_msg=timing(plan.received, self.times, self.first_seen),
            )
            if nvr is not None:
                chunk.nvext.CopyFrom(nvr)
                send = True
        return chunk if send else None

    def _parsed(self, chunk: chat_pb2.StreamChatCompletionResponse, c: ChoiceOutput
                ) -> chat_pb2.ChatCompletionChunkChoice | None:
        """The choice's delta through its parser: text, reasoning and tool-call
        pieces as the parser releases them; None when it holds everything back
        and the chunk would carry nothing else (no ids or logprobs wanted, not
        finished). Ids are never held: they go out in the chunk they came in."""
        parser = self.parsers.get(c.index)
        if parser is None:
            assert self.plan.parsing is not None
            parser = self.parsers[c.index] = self.plan.parsing.stream_parser(self.prompt_ids)
        finished = c.finish_reason is not None
        parsed = parser.delta(c.text, c.token_ids, finished=finished)
        if parsed is None:
            if not (finished or self.plan.ids_wanted or self.plan.logprobs):
                return None
            ch = chunk.choices.add(index=c.index)
            ch.delta.SetInParent()  # an empty delta, as vLLM's DeltaMessage()
            return ch
        ch = chunk.choices.add(index=c.index)
        if parsed.content is not None:
            ch.delta.content = parsed.content
        if parsed.reasoning is not None:
            ch.delta.reasoning_content = ch.delta.reasoning = parsed.reasoning
        if parsed.tool_calls:
            _add_call_deltas(ch.delta.tool_calls, parsed.tool_calls)
        return ch

    def _usage(self) -> common_pb2.Usage:
        completion = sum(len(a.token_ids) for a in self.accs.values())
        reasoning = reasoning_tokens(self.plan.parsing,
                                     (a.token_ids for a in self.accs.values()))
        return usage(len(self.prompt_ids), completion, self.cached, reasoning)

    def usage_chunk(self) -> chat_pb2.StreamChatCompletionResponse:
        chunk = self._chunk()
        chunk.usage.CopyFrom(self._usage())
        return chunk
