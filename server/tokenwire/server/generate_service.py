"""Token-in generate (vLLM `/inference/v1/generate` shape): validation,
execution and response building."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator

from tokenwire.server import validation as v
from tokenwire.server.chat_request import check_model, new_request_id, stop_strings
from tokenwire.server.chat_response import stop_reason_value, usage
from tokenwire.server.domain import ChoiceOutput, Engine, EngineRequest, GenerationParams, started
from tokenwire.server.errors import Internal, InvalidArgument
from tokenwire.server.settings import ServerSettings
from tokenwire.v1 import common_pb2, generate_pb2

OUTPUT_MODES = frozenset({"tokens", "text"})


@dataclasses.dataclass
class GeneratePlan:
    request: EngineRequest
    model: str
    output_mode: str
    return_token_ids: bool
    include_usage: bool
    created: int


def _sampling(sp: common_pb2.SamplingParams, settings: ServerSettings, vocab: int) -> GenerationParams:
    p = GenerationParams()
    pre = "sampling_params."
    if sp.HasField("n"):
        p.n = v.int_range(pre + "n", sp.n, 1, settings.max_n)
    if sp.HasField("temperature"):
        p.temperature = v.in_range(pre + "temperature", sp.temperature, 0.0, 100.0)
    if sp.HasField("top_p"):
        p.top_p = v.in_range(pre + "top_p", sp.top_p, 0.0, 1.0, lo_open=True)
    if sp.HasField("top_k"):
        p.top_k = v.int_range(pre + "top_k", sp.top_k, -1, vocab)
    if sp.HasField("min_p"):
        p.min_p = v.in_range(pre + "min_p", sp.min_p, 0.0, 1.0)
    if sp.HasField("presence_penalty"):
        p.presence_penalty = v.in_range(pre + "presence_penalty", sp.presence_penalty, -2.0, 2.0)
    if sp.HasField("frequency_penalty"):
        p.frequency_penalty = v.in_range(pre + "frequency_penalty", sp.frequency_penalty, -2.0, 2.0)
    if sp.HasField("repetition_penalty"):
        p.repetition_penalty = v.in_range(
            pre + "repetition_penalty", sp.repetition_penalty, 0.0, 100.0, lo_open=True
        )
    if p.n > 1 and p.temperature == 0.0:
        raise InvalidArgument(
            "sampling_params.n > 1 needs temperature > 0", param=pre + "n"
        )
    if sp.HasField("min_tokens"):
        p.min_tokens = v.int_range(pre + "min_tokens", sp.min_tokens, 0)
    if sp.HasField("seed"):
        p.seed = sp.seed
    p.stop = stop_strings(pre + "stop", sp.stop if sp.HasField("stop") else None, settings.max_stop_strings)
    if len(sp.stop_token_ids) > settings.max_stop_token_ids:
        raise InvalidArgument(
            f"sampling_params.stop_token_ids may hold at most {settings.max_stop_token_ids} ids",
            param=pre + "stop_token_ids",
        )
    p.stop_token_ids = v.token_ids(pre + "stop_token_ids", sp.stop_token_ids, vocab)
    p.ignore_eos = bool(sp.ignore_eos)
    if sp.HasField("logprobs"):
        p.logprobs = v.int_range(pre + "logprobs", sp.logprobs, 0, settings.max_top_logprobs)
    if sp.HasField("prompt_logprobs"):
        p.prompt_logprobs = v.int_range(
            pre + "prompt_logprobs", sp.prompt_logprobs, 0, settings.max_top_logprobs
        )
    if sp.HasField("skip_special_tokens"):
        p.skip_special_tokens = sp.skip_special_tokens
    if sp.HasField("spaces_between_special_tokens"):
        p.spaces_between_special_tokens = sp.spaces_between_special_tokens
    if sp.HasField("include_stop_str_in_output"):
        p.include_stop_str_in_output = sp.include_stop_str_in_output
    for tid, bias in sp.logit_bias.items():
        if tid >= vocab:
            raise InvalidArgument(f"logit_bias key {tid} is not a token id", param=pre + "logit_bias")
        p.logit_bias[int(tid)] = v.in_range(pre + f"logit_bias[{tid}]", bias, -100.0, 100.0)
    if sp.HasField("thinking_token_budget"):
        if not settings.reasoning_parser:
            raise InvalidArgument(
                "sampling_params.thinking_token_budget needs --reasoning-parser",
                param=pre + "thinking_token_budget",
            )
        p.thinking_token_budget = v.int_range(pre + "thinking_token_budget", sp.thinking_token_budget, 0)
    return p


def build_generate_plan(
    req: generate_pb2.GenerateRequest,
    engine: Engine,
    settings: ServerSettings,
    *,
    served_model: str,
    tenant: str | None,
    stream: bool,
) -> GeneratePlan:
    model = check_model(req.model, served_model)
    mode = req.output_mode or "tokens"
    if mode not in OUTPUT_MODES:
        raise InvalidArgument(f"output_mode '{mode}' is not one of tokens, text", param="output_mode")
    prompt = v.token_ids("token_ids", req.token_ids, engine.vocab_size)
    v.prompt_fits("token_ids", len(prompt), engine.max_model_len)
    params = _sampling(req.sampling_params, settings, engine.vocab_size)
    sp = req.sampling_params
    params.max_tokens = v.max_tokens(
        "sampling_params.max_tokens",
        sp.max_tokens if sp.HasField("max_tokens") else None,
        len(prompt),
        engine.max_model_len,
    )
    params.detokenize = mode == "text" or bool(params.stop)
    salt = tenant or req.cache_salt or None
    priority = req.priority if req.HasField("priority") else 0
    if priority and settings.scheduling_policy != "priority":
        raise InvalidArgument("priority needs the priority scheduler", param="priority")
    return GeneratePlan(
        request=EngineRequest(
            request_id=new_request_id("gen", req.request_id),
            prompt_token_ids=prompt,
            params=params,
            cache_salt=salt,
            priority=priority,
            stream=stream,
        ),
        model=model,
        output_mode=mode,
        return_token_ids=bool(req.return_token_ids),
        include_usage=bool(req.stream_options.include_usage),
        created=int(time.time()),
    )


def _choice(plan: GeneratePlan, c: ChoiceOutput) -> generate_pb2.GenerateChoice:
    ch = generate_pb2.GenerateChoice(index=c.index, token_ids=c.token_ids)
    if c.finish_reason is not None:
        ch.finish_reason = c.finish_reason
        sr = stop_reason_value(c.stop_reason)
        if sr is not None:
            ch.stop_reason.CopyFrom(sr)
    if c.logprobs is not None:
        for pos in c.logprobs:
            entry = ch.logprobs.content.add(token_id=pos.token_id, logprob=pos.logprob)
            if pos.rank is not None:
                entry.rank = pos.rank
            # vLLM's order: the sampled token first, then the others by rank.
            sampled = [x for x in pos.top if x.token_id == pos.token_id]
            others = [x for x in pos.top if x.token_id != pos.token_id]
            for cand in sampled + others if plan.request.params.logprobs else []:
                top = entry.top_logprobs.add(token_id=cand.token_id, logprob=cand.logprob)
                if cand.rank is not None:
                    top.rank = cand.rank
    if plan.output_mode == "text":
        ch.text = c.text
    return ch


def _response(plan: GeneratePlan) -> generate_pb2.GenerateResponse:
    return generate_pb2.GenerateResponse(
        request_id=plan.request.request_id,
        model=plan.model,
        created=plan.created,
        output_mode=plan.output_mode,
    )


async def run_generate(engine: Engine, plan: GeneratePlan) -> generate_pb2.GenerateResponse:
    final = None
    async for out in engine.generate(plan.request):
        final = out
    if final is None or not final.finished:
        raise Internal("the engine ended the request without a final output")
    resp = _response(plan)
    for c in sorted(final.choices, key=lambda c: c.index):
        resp.choices.append(_choice(plan, c))
    if plan.return_token_ids:
        resp.prompt_token_ids.extend(final.prompt_token_ids)
    completion = sum(len(c.token_ids) for c in final.choices)
    resp.usage.CopyFrom(usage(len(final.prompt_token_ids), completion, final.num_cached_tokens))
    return resp


async def stream_generate(
    engine: Engine, plan: GeneratePlan
) -> AsyncIterator[generate_pb2.GenerateResponse]:
    first = True
    completion = 0
    cached = 0
    finished = False
    async for out in await started(engine.generate(plan.request)):
        resp = _response(plan)
        if first and plan.return_token_ids:
            resp.prompt_token_ids.extend(plan.request.prompt_token_ids)
        first = False
        for c in out.choices:
            if c.token_ids or c.text or c.finish_reason is not None:
                resp.choices.append(_choice(plan, c))
                completion += len(c.token_ids)
        cached = out.num_cached_tokens
        finished = out.finished
        if resp.choices or resp.prompt_token_ids:
            yield resp
    if not finished:
        raise Internal("the engine ended the stream without finishing the request")
    if plan.include_usage:
        resp = _response(plan)
        resp.usage.CopyFrom(usage(len(plan.request.prompt_token_ids), completion, cached))
        yield resp
