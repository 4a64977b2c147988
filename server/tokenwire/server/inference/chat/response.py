"""Domain outputs -> chat protobuf responses (unary and streamed chunks)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from tokenwire.server.core.domain import ChoiceOutput, Engine, EngineOutput, EngineTimes
from tokenwire.server.inference.chat.request import ChatPlan
from tokenwire.server.inference.reasoning import ReasoningStream, split_text
from tokenwire.server.inference.shared.choices import ChoiceAccumulator, finish_choice
from tokenwire.server.inference.shared.logprobs import add_prompt_logprobs, choice_logprobs
from tokenwire.server.inference.shared.nvext import add_prompt_nvext, response_nvext
from tokenwire.server.inference.shared.outputs import chunk_maker
from tokenwire.server.inference.shared.usage import timing, usage
from tokenwire.server.inference.tool_calls import ParsedCall, StreamParser, parse_text
from tokenwire.v1 import chat_pb2, common_pb2


def _finish_reason(reason: str | None, tool_calls: int = 0) -> str:
    if reason is None:
        return ""
    if reason == "stop" and tool_calls:
        return "tool_calls"
    return reason


def _add_calls(target: Any, calls: list[ParsedCall], first_index: int, *, indexed: bool) -> None:
    for k, call in enumerate(calls):
        tc = target.add(id=call.id, type="function")
        tc.function.name = call.name
        tc.function.arguments = call.arguments
        if indexed:
            tc.index = first_index + k


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
        reasoning, text = (
            split_text(out.text, plan.reasoning_markers) if plan.reasoning_markers
            else (None, out.text)
        )
        content, calls = parse_text(text) if plan.parse_tool_calls else (text, [])
        message = chat_pb2.ResponseMessage(role="assistant")
        if content or not calls:
            message.content = content
        if reasoning is not None:
            message.reasoning_content = reasoning
        _add_calls(message.tool_calls, calls, 0, indexed=False)
        choice = resp.choices.add(
            index=out.index,
            message=message,
            finish_reason=_finish_reason(out.finish_reason, len(calls)),
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
    add_prompt_logprobs(resp.prompt_logprobs, engine, plan.request.params.prompt_logprobs or 0,
                        final.prompt_logprobs)
    resp.usage.CopyFrom(usage(len(final.prompt_token_ids), completion_len, final.num_cached_tokens))
    nvr = response_nvext(
        plan, worker_id, prompt_ids=final.prompt_token_ids, mirror=mirror,
        timing_msg=timing(plan.received, final.times, first_seen),
        prompt_logprobs=(engine, final.prompt_logprobs),
    )
    if nvr is not None:
        resp.nvext.CopyFrom(nvr)
    return resp


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
        self.tool_parsers = (
            {i: StreamParser() for i in range(plan.request.params.n)} if plan.parse_tool_calls
            else {}
        )
        markers = plan.reasoning_markers
        self.reasoners = (
            {i: ReasoningStream(markers) for i in range(plan.request.params.n)} if markers else {}
        )

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
        logprobs it carries (asked with prompt_logprobs)."""
        chunk = self._chunk()
        if first is not None:
            add_prompt_logprobs(chunk.prompt_logprobs, self.engine,
                                self.plan.request.params.prompt_logprobs or 0,
                                first.prompt_logprobs)
        for i in range(self.plan.request.params.n):
            chunk.choices.add(index=i,
                              delta=chat_pb2.ChatCompletionDelta(role="assistant", content=""))
        if self.plan.return_token_ids:
            chunk.prompt_token_ids.extend(self.prompt_ids)
        add_prompt_nvext(chunk.nvext, self.plan.extra_fields, self.prompt_ids,
                         (self.engine, first.prompt_logprobs if first is not None else None))
        return chunk

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
            send = True
            ch = chunk.choices.add(index=c.index)
            self._set_text(ch, c)
            if plan.ids_wanted:
                ch.token_ids.extend(c.token_ids)
            if plan.logprobs:
                ch.logprobs.CopyFrom(choice_logprobs(self.engine, c.logprobs, plan.top_logprobs,
                                                     plan.as_token_ids))
            if c.finish_reason is not None:
                parser = self.tool_parsers.get(c.index)
                ch.finish_reason = _finish_reason(c.finish_reason, parser.calls if parser else 0)
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

    def _set_text(self, ch: chat_pb2.ChatCompletionChunkChoice, c: ChoiceOutput) -> None:
        text = c.text
        reasoner = self.reasoners.get(c.index)
        if reasoner is not None:
            thought, text = reasoner.feed(text)
            if c.finish_reason is not None:
                more_thought, more_text = reasoner.flush()
                thought, text = thought + more_thought, text + more_text
            if thought:
                ch.delta.reasoning_content = thought
        parser = self.tool_parsers.get(c.index)
        if parser is None:
            ch.delta.content = text
            return
        before = parser.calls
        content, calls = parser.feed(text)
        if c.finish_reason is not None:
            content += parser.flush()
        ch.delta.content = content
        _add_calls(ch.delta.tool_calls, calls, before, indexed=True)

    def _usage(self) -> common_pb2.Usage:
        completion = sum(len(a.token_ids) for a in self.accs.values())
        return usage(len(self.prompt_ids), completion, self.cached)

    def usage_chunk(self) -> chat_pb2.StreamChatCompletionResponse:
        chunk = self._chunk()
        chunk.usage.CopyFrom(self._usage())
        return chunk
