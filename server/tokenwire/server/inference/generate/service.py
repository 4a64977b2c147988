"""Token-in generate (vLLM `/inference/v1/generate` shape): validation,
execution and response building (with media: the expanded prompt ids and
vLLM's mm_placeholders)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import (
    Caller,
    ChoiceOutput,
    Engine,
    EngineOutput,
    EngineRequest,
    GenerationParams,
    PositionLogprobs,
    RunOutcome,
)
from tokenwire.server.core.errors import Internal, InvalidArgument
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.chunk_bounds import DEFAULT_MESSAGE_LIMIT, ChunkBounds
from tokenwire.server.inference.shared import sampling
from tokenwire.server.inference.shared.choices import finish_choice
from tokenwire.server.inference.shared.identity import check_model, lora_of, new_request_id
from tokenwire.server.inference.shared.kv_transfer import put_kv_answer, read_kv_transfer
from tokenwire.server.inference.shared.logprobs import native_prompt_logprobs
from tokenwire.server.inference.shared.outputs import chunk_maker, final_output, media_outputs
from tokenwire.server.inference.shared.tenant_policy import check_priority, pick_cache_salt
from tokenwire.server.inference.shared.token_media import (
    TokenMedia,
    check_model_takes,
    prepare,
    token_media,
)
from tokenwire.server.inference.shared.usage import usage
from tokenwire.v1 import common_pb2, generate_pb2

OUTPUT_MODES = frozenset({"tokens", "text"})


@dataclasses.dataclass
class GeneratePlan:
    """Everything needed to run one generate request and shape its response:
    the engine request, as in ChatPlan, plus the response options."""

    request: EngineRequest
    model: str
    output_mode: str
    return_token_ids: bool
    include_usage: bool
    created: int
    extra_fields: frozenset[str] = frozenset()  # (nvext's: generate has none)
    media: TokenMedia | None = None  # content_parts or features, prepared by the kind's plan
    max_tokens_asked: int | None = None  # the body's (recomputed on the expanded prompt)


def _sampling(
    sp: common_pb2.SamplingParams, settings: ServerSettings, vocab: int, defaults: dict[str, Any],
) -> GenerationParams:
    p = sampling.default_params(defaults)
    pre = "sampling_params."
    sampling.apply_ranges(p, {
        name: (pre + name, getattr(sp, name))
        for name in ("n", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
                     "frequency_penalty", "repetition_penalty", "min_tokens", "prompt_logprobs",
                     "thinking_token_budget")
        if sp.HasField(name)
    }, settings, vocab)
    sampling.check_greedy_choices(p, pre + "n")
    if sp.HasField("seed"):
        p.seed = sp.seed
    p.stop, stop_ids = sampling.stop_strings(pre + "stop", sp.stop if sp.HasField("stop") else None,
                                             settings)
    v.token_ids(pre + "stop", stop_ids, vocab)
    p.stop_token_ids = sampling.stop_token_ids(pre + "stop_token_ids",
                                               [*sp.stop_token_ids, *stop_ids],
                                               settings, vocab)
    p.ignore_eos = bool(sp.ignore_eos)
    if sp.HasField("logprobs"):
        p.logprobs = sampling.logprobs_count(pre + "logprobs", sp.logprobs, settings)
    sampling.copy_text_flags(p, sp)
    p.logit_bias = sampling.logit_bias(pre + "logit_bias", sp.logit_bias.items(), vocab)
    return p


def build_generate_plan(
    req: generate_pb2.GenerateRequest,
    engine: Engine,
    settings: ServerSettings,
    *,
    served_model: str,
    caller: Caller,
    stream: bool,
) -> GeneratePlan:
    model = check_model(req.model, served_model, engine.lora_names())
    mode = req.output_mode or "tokens"
    if mode not in OUTPUT_MODES:
        raise InvalidArgument(f"output_mode '{mode}' is not one of tokens, text",
                              param="output_mode", reason="VALUE_NOT_ALLOWED")
    v.prompt_fits("token_ids", len(req.token_ids), engine.max_model_len)  # before the walk
    media = token_media(parts=req.content_parts,
                        features=req.features if req.HasField("features") else None,
                        typed=req.mm_features if req.HasField("mm_features") else None)
    if media is not None:
        check_model_takes(engine, media)
    prompt = v.token_ids("token_ids", req.token_ids, engine.vocab_size)
    params = _sampling(req.sampling_params, settings, engine.vocab_size, engine.sampling_defaults())
    sp = req.sampling_params
    params.max_tokens = v.max_tokens(
        "sampling_params.max_tokens",
        sp.max_tokens if sp.HasField("max_tokens") else None,
        len(prompt),
        engine.max_model_len,
    )
    sampling.check_min_tokens(params, "sampling_params.")
    params.detokenize = mode == "text" or bool(params.stop)
    params.stream_interval = v.stream_interval(req.stream_options)
    params.kv_transfer_params = read_kv_transfer(req, pass_empty=True)  # as vLLM's generate
    salt = pick_cache_salt(caller, req.cache_salt)
    priority = check_priority(req.priority if req.HasField("priority") else 0, settings, caller)
    return GeneratePlan(
        request=EngineRequest(
            request_id=new_request_id("gen", req.request_id, caller.request_id),
            prompt_token_ids=prompt,
            params=params,
            cache_salt=salt,
            priority=priority,
            stream=stream,
            lora=lora_of(model, served_model),
        ),
        model=model,
        output_mode=mode,
        return_token_ids=bool(req.return_token_ids),
        include_usage=bool(req.stream_options.include_usage),
        created=int(time.time()),
        media=media,
        max_tokens_asked=sp.max_tokens if sp.HasField("max_tokens") else None,
    )


def add_placeholders(resp: generate_pb2.GenerateResponse, plan: GeneratePlan) -> None:
    """vLLM's mm_placeholders beside the returned prompt ids (images only)."""
    mm = plan.request.multimodal
    if mm is None:
        return
    for offset, length in mm.placeholders.get("image", ()):
        resp.mm_placeholders.image.add(offset=offset, length=length)


def _add_choice(resp: generate_pb2.GenerateResponse, plan: GeneratePlan, c: ChoiceOutput,
                engine: Engine) -> None:
    """Append choice `c` to `resp`, built in place (no message copy)."""
    ch = resp.choices.add(index=c.index, token_ids=c.token_ids)
    if c.finish_reason is not None:
        ch.finish_reason = c.finish_reason
        finish_choice(ch, c)
    if c.logprobs is not None:
        with_top = bool(plan.request.params.logprobs)
        text = engine if plan.output_mode == "text" else None
        for pos in c.logprobs:
            _fill_logprob(ch.logprobs.content.add(), pos, with_top, text)
    if plan.output_mode == "text":
        ch.text = c.text


def _name(entry: Any, token_id: int, text: Engine | None) -> None:
    """`token` in both shapes clients parse: "token_id:N" (tokens mode, as
    vLLM's generate has long sent it) or the token's text and bytes (text
    mode); `token_id` is always set too."""
    if text is None:
        entry.token = f"token_id:{token_id}"
    else:
        entry.token = text.token_text(token_id)
        entry.bytes.extend(text.token_bytes(token_id))


def _fill_logprob(entry: generate_pb2.GenerateLogProbsContent, pos: PositionLogprobs,
                  with_top: bool, text: Engine | None = None) -> None:
    entry.token_id = pos.token_id
    _name(entry, pos.token_id, text)
    entry.logprob = pos.logprob
    if pos.non_finite:
        entry.non_finite = True
    if pos.rank is not None:
        entry.rank = pos.rank
    # vLLM's order: the sampled token first, then the others by rank.
    sampled = [x for x in pos.top if x.token_id == pos.token_id]
    others = [x for x in pos.top if x.token_id != pos.token_id]
    for cand in sampled + others if with_top else []:
        top = entry.top_logprobs.add(token_id=cand.token_id, logprob=cand.logprob)
        _name(top, cand.token_id, text)
        if cand.rank is not None:
            top.rank = cand.rank


def _add_prompt_logprobs(resp: generate_pb2.GenerateResponse, plan: GeneratePlan,
                         positions: list[PositionLogprobs | None] | None, engine: Engine) -> None:
    native_prompt_logprobs(resp.prompt_logprobs, engine, positions)  # vLLM's shape


def _response(plan: GeneratePlan) -> generate_pb2.GenerateResponse:
    return generate_pb2.GenerateResponse(
        request_id=plan.request.request_id,
        model=plan.model,
        created=plan.created,
        output_mode=plan.output_mode,
    )


def _outputs(engine: Engine, plan: GeneratePlan) -> AsyncIterator[EngineOutput]:
    """The plan's outputs; with content_parts, sent once more after vLLM's
    processor-cache drift, the parts prepared again (shared/outputs.py)."""
    media = plan.media
    if media is None or not media.parts:
        return media_outputs(engine, plan.request, None)

    async def again() -> None:
        await prepare(engine, plan.request, media, max_tokens_param="sampling_params.max_tokens",
                      max_tokens=plan.max_tokens_asked)
    return media_outputs(engine, plan.request, again)


async def run_generate(
    engine: Engine, plan: GeneratePlan, *, outcome: RunOutcome | None = None
) -> generate_pb2.GenerateResponse:
    final = await final_output(engine, plan.request, outcome, _outputs(engine, plan))
    resp = _response(plan)
    for c in sorted(final.choices, key=lambda c: c.index):
        _add_choice(resp, plan, c, engine)
    if plan.return_token_ids:
        resp.prompt_token_ids.extend(final.prompt_token_ids)
        add_placeholders(resp, plan)
    _add_prompt_logprobs(resp, plan, final.prompt_logprobs, engine)
    completion = sum(len(c.token_ids) for c in final.choices)
    resp.usage.CopyFrom(usage(len(final.prompt_token_ids), completion, final.num_cached_tokens))
    put_kv_answer(resp.kv_transfer_params, final.kv_transfer_params)
    return resp


async def stream_generate(
    engine: Engine, plan: GeneratePlan, *, outcome: RunOutcome | None = None,
    message_limit: int = DEFAULT_MESSAGE_LIMIT,
) -> AsyncIterator[generate_pb2.GenerateResponse]:
    first = True
    completion = 0
    cached = 0
    finished = False
    prompt_ids = plan.request.prompt_token_ids
    ids: dict[int, list[int]] | None = {} if outcome is not None else None
    new_chunk = chunk_maker(_response(plan))
    pieces = ChunkBounds(engine, plan.request.params.logprobs, message_limit).pieces
    # Nothing is sent before the first output: errors at start (admission,
    # engine validation) fail the call before its first message.
    async with contextlib.aclosing(_outputs(engine, plan)) as outputs:  # type: ignore[type-var]
        async for out in outputs:
            cached = out.num_cached_tokens
            finished = out.finished
            if ids is not None:  # only when asked: a session keeps the ids
                if out.prompt_token_ids:
                    prompt_ids = out.prompt_token_ids
                for c in out.choices:
                    ids.setdefault(c.index, []).extend(c.token_ids)
            for piece in pieces(out):  # (one, unless its chunk could pass the limit)
                resp = new_chunk()
                send = False  # tracked here: asking the message (resp.choices) costs more
                if first:
                    first = False
                    if plan.return_token_ids:
                        resp.prompt_token_ids.extend(plan.request.prompt_token_ids)
                        add_placeholders(resp, plan)
                        send = bool(plan.request.prompt_token_ids)
                    _add_prompt_logprobs(resp, plan, piece.prompt_logprobs, engine)
                    send = send or bool(piece.prompt_logprobs)
                for c in piece.choices:
                    if c.token_ids or c.text or c.finish_reason is not None:
                        _add_choice(resp, plan, c, engine)
                        completion += len(c.token_ids)
                        send = True
                if send:
                    yield resp
    if not finished:
        raise Internal("the engine ended the stream without finishing the request",
                       reason="ENGINE_OUTPUT_INCOMPLETE")
    if outcome is not None and ids is not None:
        outcome.fill(prompt_ids, ids)
    if plan.include_usage:
        resp = _response(plan)
        resp.usage.CopyFrom(usage(len(plan.request.prompt_token_ids), completion, cached))
        yield resp
