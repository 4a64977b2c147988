"""A chat stream's chunks -> the Responses API's streamed typed events
(response.created, response.in_progress, response.output_item.added,
response.content_part.added, response.output_text.delta /
reasoning_text.delta / function_call_arguments.delta, their .done events,
response.output_item.done, response.completed; each numbered by
`sequence_number`), as vLLM's Responses server streams them; with token
ids asked, each delta event carries the ids generated since the last event
that carried ids (response.completed the rest: docs/agents.md)."""

from __future__ import annotations

import time
from typing import Any

from tokenwire.server.inference.responses.response import (
    Event,
    call_item,
    chat_logprobs,
    harmony_outcome,
    item_object,
    message_item,
    reasoning_item,
    response_id,
    response_object,
    set_status,
    set_usage,
    skeleton,
)
from tokenwire.v1 import chat_pb2, common_pb2, responses_pb2

# The events that carry the asked ids generated since the last such event.
DELTA_EVENTS = frozenset({"response.output_text.delta", "response.reasoning_text.delta",
                          "response.function_call_arguments.delta"})


class ResponseEvents:
    """A chat stream's chunks -> the Responses events, in OpenAI's order:
    each output item is added, its part added, its deltas, its part and
    text done, the item done; then response.completed with the whole
    Response (status "incomplete" and incomplete_details when cut by
    max_output_tokens). `harmony`: a gpt-oss model's (response.py's
    call_item and harmony_outcome)."""

    def __init__(self, req: responses_pb2.CreateResponseRequest, model: str,
                 harmony: bool = False):
        self.resp = skeleton(req, response_id(req), model, int(time.time()))
        self.harmony = harmony
        self.seq = 0
        self.item: responses_pb2.ResponseOutputItem | None = None
        self.text: list[str] = []
        self.calls: dict[int, responses_pb2.ResponseOutputItem] = {}
        self.finish = ""
        self.usage: common_pb2.Usage | None = None
        self.reasoning_chars = 0
        self.pending: list[int] = []  # asked ids no event has carried yet

    def _ev(self, etype: str, **fields: Any) -> Event:
        event = {"type": etype, "sequence_number": self.seq, **fields}
        self.seq += 1
        return event

    def start(self) -> list[Event]:
        body = response_object(self.resp)
        return [self._ev("response.created", response=body),
                self._ev("response.in_progress", response=body)]

    def _index(self) -> int:
        return len(self.resp.output)

    def _open(self, item: responses_pb2.ResponseOutputItem) -> list[Event]:
        events = self._close()
        self.item = item
        self.text = []
        added = item_object(item)
        if item.type == "message":
            added["content"] = []
        elif item.type == "reasoning":
            added["content"] = []
        events.append(self._ev("response.output_item.added", output_index=self._index(),
                               item=added))
        if item.type == "message":
            events.append(self._ev(
                "response.content_part.added", item_id=item.id, output_index=self._index(),
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": [], "logprobs": []}))
        elif item.type == "reasoning":
            events.append(self._ev(
                "response.content_part.added", item_id=item.id, output_index=self._index(),
                content_index=0, part={"type": "reasoning_text", "text": ""}))
        return events

    def _close(self) -> list[Event]:
        item, events = self.item, list[Event]()
        if item is None:
            return events
        index = self._index()
        text = "".join(self.text)
        if item.type == "message":
            item.content[0].text = text
            part = item_object(item)["content"][0]
            events.append(self._ev("response.output_text.done", item_id=item.id,
                                   output_index=index, content_index=0, text=text,
                                   logprobs=part["logprobs"]))
            events.append(self._ev("response.content_part.done", item_id=item.id,
                                   output_index=index, content_index=0, part=part))
        elif item.type == "reasoning":
            item.content[0].text = text
            events.append(self._ev("response.reasoning_text.done", item_id=item.id,
                                   output_index=index, content_index=0, text=text))
            events.append(self._ev("response.content_part.done", item_id=item.id,
                                   output_index=index, content_index=0,
                                   part={"type": "reasoning_text", "text": text}))
        else:
            item.arguments = text
            events.append(self._ev("response.function_call_arguments.done", item_id=item.id,
                                   output_index=index, name=item.name, arguments=text))
        item.status = "completed"
        events.append(self._ev("response.output_item.done", output_index=index,
                               item=item_object(item)))
        self.resp.output.append(item)
        self.item = None
        return events

    def on_chunk(self, chunk: chat_pb2.StreamChatCompletionResponse) -> list[Event]:
        events: list[Event] = []
        if chunk.HasField("usage"):
            self.usage = chunk.usage
        if chunk.system_fingerprint:
            self.resp.system_fingerprint = chunk.system_fingerprint
        self.resp.prompt_token_ids.extend(chunk.prompt_token_ids)
        if chunk.HasField("mm_placeholders"):
            self.resp.mm_placeholders.CopyFrom(chunk.mm_placeholders)
        if chunk.HasField("nvext"):  # the first chunk's prompt ids, the last's the rest
            self.resp.nvext.MergeFrom(chunk.nvext)
        for choice in chunk.choices:
            if choice.index:
                continue  # (n is 1 for a Response)
            delta = choice.delta
            self.resp.output_token_ids.extend(choice.token_ids)
            self.pending.extend(choice.token_ids)
            self.resp.weight_versions.extend(choice.weight_versions)
            if delta.reasoning_content:
                if self.item is None or self.item.type != "reasoning":
                    events += self._open(reasoning_item("", "in_progress"))
                self.text.append(delta.reasoning_content)
                self.reasoning_chars += len(delta.reasoning_content)
                events.append(self._ev(
                    "response.reasoning_text.delta", item_id=self.item.id,  # type: ignore
                    output_index=self._index(), content_index=0,
                    delta=delta.reasoning_content))
            if delta.content:
                if self.item is None or self.item.type != "message":
                    events += self._open(message_item("", None, "in_progress"))
                self.text.append(delta.content)
                logprobs = chat_logprobs(choice.logprobs) if choice.HasField("logprobs") else []
                if logprobs:
                    part = self.item.content[0]  # type: ignore[union-attr]
                    for entry in logprobs:
                        part.logprobs.add().struct_value.update(entry)
                events.append(self._ev(
                    "response.output_text.delta", item_id=self.item.id,  # type: ignore
                    output_index=self._index(), content_index=0, delta=delta.content,
                    logprobs=logprobs))
            for call in delta.tool_calls:
                events += self._tool_delta(call)
            if choice.finish_reason:
                self.finish = choice.finish_reason
        if self.pending:
            self._carry_ids(events)
        return events

    def _carry_ids(self, events: list[Event]) -> None:
        """The ids not yet sent ride on this chunk's last delta event (none:
        they wait for a later one, or for response.completed)."""
        for event in reversed(events):
            if event["type"] in DELTA_EVENTS:
                event["token_ids"] = self.pending
                self.pending = []
                return

    def _tool_delta(self, call: chat_pb2.ToolCall) -> list[Event]:
        index = call.index if call.HasField("index") else len(self.calls)
        events: list[Event] = []
        if index not in self.calls:
            item = call_item(call, "in_progress", self.harmony)
            item.arguments = ""
            self.calls[index] = item
            events += self._open(item)
        item = self.calls[index]
        item_id = item.id
        if self.item is not item:
            return events  # (a late delta of a closed call: not re-opened)
        if call.function.arguments:
            self.text.append(call.function.arguments)
            events.append(self._ev("response.function_call_arguments.delta", item_id=item_id,
                                   output_index=self._index(),
                                   delta=call.function.arguments))
        return events

    def end(self) -> list[Event]:
        events = self._close()
        if not (self.resp.output_token_ids or self.resp.HasField("nvext")):
            self.resp.ClearField("weight_versions")  # (the spans of the ids asked only)
        set_status(self.resp, self.finish)
        if self.harmony:
            harmony_outcome(self.resp, self.finish)
        if self.usage is not None:
            set_usage(self.resp, self.usage)
        completed = self._ev("response.completed", response=response_object(self.resp))
        if self.pending:  # ids no delta carried (held text, an end-of-sequence id)
            completed["token_ids"], self.pending = self.pending, []
        events.append(completed)
        return events

    def error(self, body: dict[str, Any]) -> Event:
        """The error event that ends a started stream."""
        return self._ev("error", **body)
