"""Logprobs into protobuf: a choice's in the OpenAI shape, and the prompt's
in vLLM's native shape (chat, completion, generate, nvext.prompt_logprobs)."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core.domain import Candidate, Engine, PositionLogprobs
from tokenwire.v1 import common_pb2


def native_prompt_logprobs(
    target: Any, engine: Engine, positions: list[PositionLogprobs | None] | None,
) -> None:
    """Prompt logprobs in vLLM's native shape (its chat, completion and
    generate answers' prompt_logprobs; Dynamo's nvext.prompt_logprobs): per
    position null (the first) or {token id: {logprob, rank, decoded_token}}.
    Logprobs come finite from the engine adapter (-inf as -9999.0, vLLM's
    clamp_prompt_logprobs), so the JSON prints."""
    for pos in positions or []:
        value = target.add()
        if pos is None:
            value.null_value = struct_pb2.NULL_VALUE
            continue
        entries = value.struct_value
        cands = list(pos.top)
        if all(c.token_id != pos.token_id for c in cands):
            cands.insert(0, Candidate(pos.token_id, pos.logprob, pos.rank))
        for cand in cands:
            entry = entries.fields[str(cand.token_id)].struct_value
            entry.fields["logprob"].number_value = cand.logprob
            if cand.rank is not None:
                entry.fields["rank"].number_value = cand.rank
            entry.fields["decoded_token"].string_value = engine.token_text(cand.token_id)


def as_token_ids(req: Any, server_default: bool) -> bool:
    """A request's return_tokens_as_token_ids when it sets one, else the
    server's (--return-tokens-as-token-ids), as vLLM."""
    if req.HasField("return_tokens_as_token_ids"):
        return bool(req.return_tokens_as_token_ids)
    return server_default


def _spelled(engine: Engine, token_id: int, as_ids: bool) -> tuple[str, bytes]:
    """A logprob entry's token and bytes: the token's text, or with
    return_tokens_as_token_ids "token_id:N" and its bytes (as vLLM)."""
    if as_ids:
        text = f"token_id:{token_id}"
        return text, text.encode()
    return engine.token_text(token_id), engine.token_bytes(token_id)


def token_logprob(engine: Engine, pos: PositionLogprobs, top_k: int,
                  as_ids: bool = False) -> common_pb2.TokenLogProb:
    token, raw = _spelled(engine, pos.token_id, as_ids)
    entry = common_pb2.TokenLogProb(token=token, logprob=pos.logprob, bytes=raw,
                                    token_id=pos.token_id)
    if pos.non_finite:
        entry.non_finite = True
    if top_k > 0:
        for cand in pos.top[:top_k]:
            token, raw = _spelled(engine, cand.token_id, as_ids)
            entry.top_logprobs.add(token=token, logprob=cand.logprob, bytes=raw,
                                   token_id=cand.token_id)
    return entry


def choice_logprobs(
    engine: Engine, positions: list[PositionLogprobs] | None, top_k: int, as_ids: bool = False,
) -> common_pb2.ChoiceLogProbs:
    return common_pb2.ChoiceLogProbs(
        content=[token_logprob(engine, p, top_k, as_ids) for p in positions or []]
    )
