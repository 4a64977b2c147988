"""Dynamo's nvext, asked and answered: the extra fields a chat or
completion body may ask for (nvext.extra_fields), and the top-level
response nvext (prompt ids and logprobs, timing, worker id, the n = 1
mirror of the choice's). The choice's own nvext is in choices.py."""

from __future__ import annotations

from typing import Protocol

from tokenwire.server.core.domain import Engine, EngineRequest, PositionLogprobs
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.shared.logprobs import native_prompt_logprobs
from tokenwire.v1 import chat_pb2, common_pb2

EXTRA_FIELDS = frozenset(
    {"completion_token_ids", "engine_data", "prompt_token_ids", "prompt_logprobs", "routed_experts",
     "timing", "stop_reason", "worker_id"}
)


def check_extra_fields(nv: chat_pb2.NvExtRequest) -> frozenset[str]:
    unknown = sorted(set(nv.extra_fields) - EXTRA_FIELDS)
    if unknown:
        raise InvalidArgument(
            f"nvext.extra_fields: unknown name(s) {unknown}; known: {sorted(EXTRA_FIELDS)}",
            param="nvext.extra_fields", reason="UNKNOWN_EXTRA_FIELD",
        )
    return frozenset(nv.extra_fields)


class NvExtPlan(Protocol):
    """What the nvext builders read of a plan (chat or completion)."""

    extra_fields: frozenset[str]

    @property
    def request(self) -> EngineRequest: ...


def add_prompt_nvext(
    nv: chat_pb2.NvExtResponse, fields: frozenset[str], prompt_ids: list[int] | None,
    prompt_logprobs: tuple[Engine, list[PositionLogprobs | None] | None] | None,
) -> bool:
    """nvext.prompt_token_ids / prompt_logprobs when asked; True if any."""
    used = False
    if prompt_ids is not None and "prompt_token_ids" in fields:
        nv.prompt_token_ids.extend(prompt_ids)
        used = True
    if prompt_logprobs is not None and "prompt_logprobs" in fields:
        native_prompt_logprobs(nv.prompt_logprobs, *prompt_logprobs)
        used = True
    return used


def response_nvext(
    plan: NvExtPlan,
    worker_id: str,
    *,
    prompt_ids: list[int] | None,
    mirror: chat_pb2.ChoiceNvExt | None,
    timing_msg: common_pb2.Timing | None,
    prompt_logprobs: tuple[Engine, list[PositionLogprobs | None] | None] | None = None,
) -> chat_pb2.NvExtResponse | None:
    """The top-level nvext: prompt ids and prompt logprobs (where the prompt
    is reported), timing, worker id, n = 1 mirror."""
    fields = plan.extra_fields
    nv = chat_pb2.NvExtResponse()
    used = add_prompt_nvext(nv, fields, prompt_ids, prompt_logprobs)
    if timing_msg is not None and "timing" in fields:
        nv.timing.CopyFrom(timing_msg)
        used = True
    if timing_msg is not None and "worker_id" in fields:
        nv.worker_id = worker_id
        used = True
    if mirror is not None and plan.request.params.n == 1:
        nv.completion_token_ids.extend(mirror.completion_token_ids)
        if mirror.HasField("engine_data"):
            nv.engine_data.CopyFrom(mirror.engine_data)
        if mirror.HasField("stop_reason"):
            nv.stop_reason.CopyFrom(mirror.stop_reason)
        used = True
    return nv if used else None
