"""SGLang's native `POST /generate` as Generate (issue #28, docs/trainers.md):
the SGLang body becomes a GenerateRequest (same validation, admission and
engine request), and the GenerateResponse becomes SGLang's answer
({text, output_ids, meta_info{finish_reason, prompt_tokens, ...,
output_token_logprobs}}), the fields slime and AReaL read. meta_info's
weight_version is SGLang's (the version that sampled the last token);
weight_versions adds every span, so a request that straddled an update
shows it. Errors name SGLang's fields.

SGLANG is the call's front (inference/fronts.py: SglangGenerate): a thin
adapter over GENERATE, planned and run by it, that converts the body on the
way in and the answer on the way out. Not a Session kind (not in KINDS): it
has no stream. FINISH_SESSION is SkyRL's /finish_session: an
acknowledgement (the fleet's affinity hashes the session id; nothing is
held per session)."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core.domain import Caller, RunOutcome
from tokenwire.server.core.errors import InvalidArgument, TokenwireError
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.front import Front, PreparedFront
from tokenwire.server.inference.generate.kind import GENERATE
from tokenwire.server.inference.generate.service import GeneratePlan
from tokenwire.v1 import generate_pb2, sglang_pb2

# SGLang's sampling names -> Generate's (same meaning).
_SAME = ("temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
         "repetition_penalty", "ignore_eos", "skip_special_tokens", "spaces_between_special_tokens")
_RENAMED = {"min_new_tokens": "min_tokens", "sampling_seed": "seed",
            "no_stop_trim": "include_stop_str_in_output"}
# Generate's field names in errors -> the SGLang body's.
_PARAMS = {
    "token_ids": "input_ids", "request_id": "rid", "model": "lora_path",
    "sampling_params.max_tokens": "sampling_params.max_new_tokens",
    "sampling_params.logprobs": "top_logprobs_num",
    "sampling_params.prompt_logprobs": "top_logprobs_num",
    **{f"sampling_params.{ours}": f"sampling_params.{theirs}" for theirs, ours in _RENAMED.items()},
}


def _refuse(param: str, why: str) -> InvalidArgument:
    return InvalidArgument(f"{param}: {why}", param=param, reason="UNSUPPORTED_FIELD")


def score_only(req: sglang_pb2.SglangGenerateRequest) -> bool:
    """max_new_tokens 0: the prompt is scored, nothing generated is reported."""
    sp = req.sampling_params
    return sp.HasField("max_new_tokens") and sp.max_new_tokens == 0


def to_generate(req: sglang_pb2.SglangGenerateRequest) -> generate_pb2.GenerateRequest:
    """The GenerateRequest that runs `req`."""
    if req.text:
        raise _refuse("text", "give the prompt as input_ids (or use /v1/completions for text)")
    if req.HasField("image_data") and req.image_data.WhichOneof("kind") != "null_value":
        raise _refuse("image_data", "images are not served (text models)")
    if req.stream:
        raise _refuse("stream", "use POST /inference/v1/generate with \"stream\": true")
    sp = req.sampling_params
    if sp.HasField("n") and sp.n != 1:
        raise _refuse("sampling_params.n", "one choice per prompt on /generate")
    out = generate_pb2.GenerateRequest(token_ids=req.input_ids, request_id=req.rid,
                                       model=req.lora_path, session_id=req.session_id,
                                       output_mode="text")
    params = out.sampling_params
    for name in _SAME:
        if sp.HasField(name):
            setattr(params, name, getattr(sp, name))
    for theirs, ours in _RENAMED.items():
        if sp.HasField(theirs):
            setattr(params, ours, getattr(sp, theirs))
    if sp.HasField("max_new_tokens"):
        params.max_tokens = 1 if score_only(req) else sp.max_new_tokens
    params.stop_token_ids.extend(sp.stop_token_ids)
    if sp.HasField("stop"):
        params.stop.CopyFrom(sp.stop)
    if req.return_logprob:
        params.logprobs = req.top_logprobs_num
        if req.HasField("logprob_start_len") and req.logprob_start_len >= 0:
            if req.logprob_start_len >= max(len(req.input_ids), 1):
                raise InvalidArgument("logprob_start_len must be less than the prompt's length",
                                      param="logprob_start_len", reason="VALUE_OUT_OF_RANGE")
            params.prompt_logprobs = 0
    return out


def rename_param(err: TokenwireError) -> TokenwireError:
    """`err` naming the SGLang body's field instead of Generate's."""
    if err.param in _PARAMS:
        err.message = err.message.replace(err.param, _PARAMS[err.param])
        err.param = _PARAMS[err.param]
    return err


def _triple(logprob: float | None, token_id: int) -> struct_pb2.ListValue:
    """SGLang's [logprob, token id, text] with the text left null."""
    lv = struct_pb2.ListValue()
    lv.append(logprob)
    lv.append(token_id)
    lv.append(None)
    return lv


def from_generate(req: sglang_pb2.SglangGenerateRequest, resp: generate_pb2.GenerateResponse
                  ) -> sglang_pb2.SglangGenerateResponse:
    """SGLang's answer from the GenerateResponse of `to_generate(req)`."""
    choice = resp.choices[0]
    scored = score_only(req)
    out = sglang_pb2.SglangGenerateResponse(text="" if scored else choice.text)
    meta = out.meta_info
    meta.id = resp.request_id
    meta.prompt_tokens = resp.usage.prompt_tokens
    meta.completion_tokens = 0 if scored else resp.usage.completion_tokens
    meta.cached_tokens = resp.usage.prompt_tokens_details.cached_tokens
    reason = meta.finish_reason
    if scored or choice.finish_reason == "length":
        reason.type = "length"
        reason.length = 0 if scored else resp.usage.completion_tokens
    elif choice.finish_reason == "stop":
        reason.type = "stop"
        if choice.HasField("stop_reason") and choice.stop_reason.WhichOneof("kind") != "null_value":
            reason.matched.CopyFrom(choice.stop_reason)
    else:
        reason.type = choice.finish_reason or "abort"
        reason.message = "aborted"
    if not scored:
        out.output_ids.extend(choice.token_ids)
        for entry in choice.logprobs.content:
            meta.output_token_logprobs.append(_triple(entry.logprob, entry.token_id))
            if req.top_logprobs_num > 0:
                tops = meta.output_top_logprobs.add()
                for top in entry.top_logprobs[:req.top_logprobs_num]:
                    tops.append(_triple(top.logprob, top.token_id))
    start = req.logprob_start_len if req.HasField("logprob_start_len") else -1
    if req.return_logprob and start >= 0:
        for pos in range(start, len(req.input_ids)):
            token_id = req.input_ids[pos]
            native: Any = resp.prompt_logprobs[pos] if pos < len(resp.prompt_logprobs) else None
            logprob = None
            if native is not None and native.WhichOneof("kind") == "struct_value":
                entry = native.struct_value.fields.get(str(token_id))
                logprob = entry.struct_value.fields["logprob"].number_value if entry else None
            meta.input_token_logprobs.append(_triple(logprob, token_id))
    if choice.weight_versions:  # SGLang's field: the last token's; every span beside it
        meta.weight_version = choice.weight_versions[-1].version
        if not scored:  # (a scored prompt's one hidden token has no ids to span)
            meta.weight_versions.extend(choice.weight_versions)
    if req.return_routed_experts and choice.routed_experts:
        meta.routed_experts = base64.b64encode(choice.routed_experts).decode("ascii")
    return out


@dataclasses.dataclass
class SglangPlan:
    """An SGLang body and the Generate plan that runs it."""

    body: sglang_pb2.SglangGenerateRequest
    generate: GeneratePlan


class SglangKind(Front[sglang_pb2.SglangGenerateRequest, SglangPlan,
                       sglang_pb2.SglangGenerateResponse, None]):
    """SGLang's /generate as a unary kind over GENERATE."""

    name = "sglang"

    async def plan(self, plane: DataPlane, req: sglang_pb2.SglangGenerateRequest, *,
                   caller: Caller, stream: bool, dp_rank: str | None = None,
                   session_id: str | None = None) -> SglangPlan:
        try:
            plan = await GENERATE.plan(plane, to_generate(req), caller=caller, stream=stream,
                                       dp_rank=dp_rank, session_id=session_id)
        except TokenwireError as err:
            raise rename_param(err) from None
        return SglangPlan(req, plan)

    async def run(self, plane: DataPlane, plan: SglangPlan, outcome: RunOutcome | None = None
                  ) -> sglang_pb2.SglangGenerateResponse:
        return from_generate(plan.body, await GENERATE.run(plane, plan.generate, outcome))


SGLANG = SglangKind()


async def _finish_session(plane: DataPlane, req: sglang_pb2.FinishSessionRequest,
                          caller: Caller) -> sglang_pb2.FinishSessionResponse:
    if not req.session_id:
        raise InvalidArgument("session_id is required", param="session_id",
                              reason="FIELD_REQUIRED")
    return sglang_pb2.FinishSessionResponse(status="ok")


FINISH_SESSION = PreparedFront("finish_session", _finish_session)
