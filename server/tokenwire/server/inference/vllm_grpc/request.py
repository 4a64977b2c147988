"""A `vllm.grpc.engine.GenerateRequest` (smg-grpc-proto) read into
tokenwire's domain: its ids, its sampling parameters as vLLM's gRPC
servicer reads them (proto3 zeros mean "unset" where vLLM's default is not
zero: top_p, repetition_penalty, n), every field checked as tokenwire checks
its own generate's, and a clear INVALID_ARGUMENT for what this front does
not take (text prompts, router-processed media); a KV-transfer handshake
(`kv_transfer_params_json`, or the legacy typed `kv_transfer_params`) is
read as vLLM's servicer reads it and passed to the engine."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from google.protobuf import struct_pb2
from smg_grpc_proto.generated import vllm_engine_pb2 as pb

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import (
    Caller,
    Engine,
    EngineRequest,
    GenerationParams,
    StructuredOutput,
)
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.shared import sampling
from tokenwire.server.inference.shared.identity import new_request_id
from tokenwire.server.inference.shared.tenant_policy import check_priority, pick_cache_salt

PRE = "sampling_params."
# What this front refuses, and why (the message names the field).
_NOT_TAKEN = {
    "mm_inputs": "router-processed media is not taken: send the ids with their media to "
                 "tokenwire.v1 Generate (content_parts / mm_features)",
    "extra_mm_inputs": "router-processed media is not taken",
    "media_refs": "media references are not taken (this worker advertises no mm_processor)",
}
KV_JSON = "kv_transfer_params_json"


def kv_transfer_params(req: pb.GenerateRequest) -> dict[str, Any] | None:
    """The handshake as vLLM's servicer (smg-grpc-servicer) reads it: the
    JSON field (an object), else the legacy typed one (Mooncake's host and
    port); None: none, or an empty object (not passed to the engine)."""
    if req.HasField(KV_JSON):
        try:
            params = json.loads(req.kv_transfer_params_json)
        except ValueError as exc:
            raise InvalidArgument(f"{KV_JSON} is not JSON: {exc}", param=KV_JSON,
                                  reason="INVALID_FORMAT") from exc
        if not isinstance(params, dict):
            raise InvalidArgument(f"{KV_JSON} must be a JSON object", param=KV_JSON,
                                  reason="INVALID_TYPE")
        return params or None
    if req.HasField("kv_transfer_params"):
        legacy = req.kv_transfer_params
        if not legacy.remote_host or not 1 <= legacy.remote_port <= 65535:
            raise InvalidArgument(
                "kv_transfer_params: remote_host must be set and remote_port in [1, 65535]",
                param="kv_transfer_params", reason="VALUE_OUT_OF_RANGE")
        return {"remote_host": legacy.remote_host, "remote_port": legacy.remote_port}
    return None


@dataclasses.dataclass
class EnginePlan:
    """One VllmEngine Generate: the engine request and how to answer it."""

    request: EngineRequest
    stream: bool  # chunks then a complete per choice (True), or completes only
    extra_fields: frozenset[str] = frozenset()  # (none: the kinds' plan step reads it)

    @property
    def logprobs(self) -> int | None:
        return self.request.params.logprobs


def _opt(msg: Any, name: str) -> Any:
    return getattr(msg, name) if msg.HasField(name) else None


def _ranges(sp: pb.SamplingParams) -> dict[str, tuple[str, Any]]:
    """The fields to check and set: proto3 zeros that vLLM's servicer reads
    as "unset" are left to the defaults (the model's generation config)."""
    present: dict[str, tuple[str, Any]] = {}
    if sp.HasField("temperature"):
        present["temperature"] = (PRE + "temperature", sp.temperature)
    for name in ("top_p", "repetition_penalty", "n", "top_k"):  # 0: unset
        if getattr(sp, name):
            present[name] = (PRE + name, getattr(sp, name))
    for name in ("min_p", "presence_penalty", "frequency_penalty", "min_tokens"):
        if getattr(sp, name):
            present[name] = (PRE + name, getattr(sp, name))
    if sp.HasField("prompt_logprobs"):
        present["prompt_logprobs"] = (PRE + "prompt_logprobs", sp.prompt_logprobs)
    return present


def _structured(sp: pb.SamplingParams) -> StructuredOutput | None:
    kind = sp.WhichOneof("constraint")
    if kind is None:
        return None
    if kind == "json_schema":
        try:
            schema = json.loads(sp.json_schema)
        except ValueError as exc:
            raise InvalidArgument(f"{PRE}json_schema is not JSON: {exc}", param=PRE + "json_schema",
                                  reason="INVALID_FORMAT") from exc
        if not isinstance(schema, dict):
            raise InvalidArgument(f"{PRE}json_schema must be a JSON object",
                                  param=PRE + "json_schema", reason="INVALID_TYPE")
        return StructuredOutput(json_schema=schema)
    if kind == "json_object":
        return StructuredOutput(json_object=True) if sp.json_object else None
    if kind == "choice":
        if not sp.choice.choices:
            raise InvalidArgument(f"{PRE}choice.choices must not be empty",
                                  param=PRE + "choice.choices", reason="EMPTY_VALUE")
        return StructuredOutput(choice=list(sp.choice.choices))
    text = getattr(sp, kind)
    if not text:
        raise InvalidArgument(f"{PRE}{kind} must not be empty", param=PRE + kind,
                              reason="EMPTY_VALUE")
    return StructuredOutput(**{kind: text})


def _stop(sp: pb.SamplingParams) -> struct_pb2.Value | None:
    if not sp.stop:
        return None
    value = struct_pb2.Value()
    value.list_value.values.extend(struct_pb2.Value(string_value=s) for s in sp.stop)
    return value


def sampling_params(sp: pb.SamplingParams, settings: ServerSettings, vocab: int,
                    defaults: dict[str, Any]) -> GenerationParams:
    p = sampling.default_params(defaults)
    sampling.apply_ranges(p, _ranges(sp), settings, vocab)
    sampling.check_greedy_choices(p, PRE + "n")
    p.seed = _opt(sp, "seed")
    p.stop, _ = sampling.stop_strings(PRE + "stop", _stop(sp), settings)
    p.stop_token_ids = sampling.stop_token_ids(PRE + "stop_token_ids", sp.stop_token_ids,
                                               settings, vocab)
    p.ignore_eos = sp.ignore_eos
    if sp.HasField("logprobs"):
        p.logprobs = sampling.logprobs_count(PRE + "logprobs", sp.logprobs, settings)
    # vLLM's gRPC servicer passes these as sent (proto3: false unless set).
    p.skip_special_tokens = sp.skip_special_tokens
    p.spaces_between_special_tokens = sp.spaces_between_special_tokens
    p.include_stop_str_in_output = sp.include_stop_str_in_output
    p.logit_bias = sampling.logit_bias(PRE + "logit_bias", sp.logit_bias.items(), vocab)
    p.structured = _structured(sp)
    p.detokenize = bool(p.stop)  # ids out; text only to match stop strings
    return p


def _prompt(req: pb.GenerateRequest, engine: Engine) -> list[int]:
    kind = req.WhichOneof("input")
    if kind != "tokenized":
        raise InvalidArgument(
            "tokenized.input_ids is required: this worker takes token ids (a router tokenizes; "
            "text goes to tokenwire.v1's chat or completion)", param="tokenized",
            reason="PROMPT_EMPTY" if kind is None else "UNSUPPORTED_FIELD")
    v.prompt_fits("tokenized.input_ids", len(req.tokenized.input_ids), engine.max_model_len)
    ids = v.token_ids("tokenized.input_ids", req.tokenized.input_ids, engine.vocab_size)
    keep = _opt(req.sampling_params, "truncate_prompt_tokens")
    if keep is not None:  # vLLM's: the last k ids; -1: the model's length
        if keep == -1:
            keep = engine.max_model_len
        if keep < 1:
            raise InvalidArgument(f"{PRE}truncate_prompt_tokens must be -1 or >= 1, got {keep}",
                                  param=PRE + "truncate_prompt_tokens",
                                  reason="VALUE_OUT_OF_RANGE")
        ids = ids[-keep:]
    return ids


def build_plan(req: pb.GenerateRequest, engine: Engine, settings: ServerSettings, *,
               caller: Caller) -> EnginePlan:
    for field, why in _NOT_TAKEN.items():
        if req.HasField(field) if field != "extra_mm_inputs" else req.extra_mm_inputs:
            raise InvalidArgument(f"{field}: {why}", param=field, reason="UNSUPPORTED_FIELD")
    kv = kv_transfer_params(req)
    prompt = _prompt(req, engine)
    sp = req.sampling_params
    params = sampling_params(sp, settings, engine.vocab_size, engine.sampling_defaults())
    params.max_tokens = v.max_tokens(PRE + "max_tokens", _opt(sp, "max_tokens"), len(prompt),
                                     engine.max_model_len)
    sampling.check_min_tokens(params, PRE)
    params.kv_transfer_params = kv
    request = EngineRequest(
        request_id=new_request_id("vllm", req.request_id, caller.request_id),
        prompt_token_ids=prompt,
        params=params,
        cache_salt=pick_cache_salt(caller, ""),
        priority=check_priority(0, settings, caller),
        stream=req.stream,
    )
    if sp.grammar_from_first_token:  # the router shaped the constraint from the first token
        request.reasoning_ended = True
    return EnginePlan(request=request, stream=req.stream)
