"""Score and Rerank (vLLM's /score and /rerank) on a pooling model that
scores, in vLLM's three ways (the engine says which, `score_type`):
- a cross-encoder (a classifier with one label): each (query, document)
  pair is one prompt, made by the engine as vLLM makes it, its
  classification the score;
- a bi-encoder (an embedding model): each query and each document
  embedded once, the score the cosine of a pair's embeddings;
- late interaction (token embeddings): MaxSim of a pair's rows.
One query is scored against every document (1:N), N queries against N
documents (N:N). The texts are checked, cut and tokenized off the event
loop when heavy, as MaxSim of many rows is (inference/offload.py). The
inputs run at once (one failing cancels the others); usage counts every
prompt the engine ran. Rerank orders the documents by
score (a stable sort, as vLLM's) and keeps the best top_n."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf import struct_pb2

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Caller, Engine
from tokenwire.server.core.errors import FailedPrecondition, InvalidArgument
from tokenwire.server.core.pooling import PoolOutput, PoolRequest
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.pooling.request import kept, tokenize_cut
from tokenwire.server.inference.shared.identity import check_model, lora_of, new_request_id
from tokenwire.server.inference.shared.messages import struct_to_dict
from tokenwire.server.inference.shared.tenant_policy import check_priority
from tokenwire.v1 import common_pb2, embeddings_pb2

# vLLM's four spellings of a /score pair, in the order its request union tries them.
PAIRS = (("queries", "documents"), ("queries", "items"), ("data_1", "data_2"),
         ("text_1", "text_2"))
T = TypeVar("T")
TASKS = {"cross-encoder": "classify", "bi-encoder": "embed", "late-interaction": "token_embed"}
MAXSIM_INLINE = 1024  # late interaction's tokens (queries' and documents') scored inline


@dataclasses.dataclass
class ScorePlan:
    id: str
    model: str
    kind: str  # the engine's score type
    documents: list[str]  # as given (rerank returns them)
    requests: list[PoolRequest]  # cross-encoder: one per pair; else the queries, then the documents
    queries: int  # how many of `requests` are queries (bi-encoder, late interaction)
    top_n: int = 0  # rerank: how many documents it returns (0: every one)


def _texts(param: str, value: struct_pb2.Value, *, one: bool = False) -> list[str]:
    """A side of the pairs: a string or (unless `one`) a list of strings."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return [value.string_value]
    if kind == "list_value" and not one:
        out = []
        for i, item in enumerate(value.list_value.values):
            if item.WhichOneof("kind") != "string_value":
                _not_text(f"{param}[{i}]", item)
            out.append(item.string_value)
        return out
    _not_text(param, value, one)
    raise AssertionError  # (unreachable)


def _not_text(param: str, value: struct_pb2.Value, one: bool = False) -> None:
    if value.WhichOneof("kind") == "struct_value":
        raise InvalidArgument(f"{param}: multimodal score inputs ({{\"content\": [...]}}) are "
                              "not served; give text", param=param, reason="FEATURE_DISABLED")
    want = "a string" if one else "a string or a list of strings"
    raise InvalidArgument(f"{param} must be {want}", param=param, reason="INVALID_TYPE")


def _item(param: str, texts: list[str], i: int) -> str:
    """The field of text i, for errors ("documents" when it is the only one)."""
    return param if len(texts) == 1 else f"{param}[{i}]"


def _score_sides(req: embeddings_pb2.ScoreRequest) -> tuple[str, list[str], str, list[str]]:
    given = [name for name in ("queries", "documents", "items", "data_1", "data_2", "text_1",
                               "text_2") if req.HasField(name)]
    for first, second in PAIRS:
        if set(given) == {first, second}:
            return (first, _texts(first, getattr(req, first)),
                    second, _texts(second, getattr(req, second)))
    raise InvalidArgument(
        "give the pairs as queries + documents, queries + items, data_1 + data_2 or "
        f"text_1 + text_2 (got {', '.join(given) or 'none'})",
        param=given[0] if given else "queries", reason="FIELDS_CONFLICT" if given else
        "FIELD_REQUIRED")


def _check_counts(first: str, queries: list[str], second: str, documents: list[str],
                  most: int) -> None:
    """vLLM's rules (1:1, 1:N or N:N; neither side empty), and a bound."""
    if len(queries) > 1 and len(queries) != len(documents):
        raise InvalidArgument(f"{first}: input lengths must be either 1:1, 1:N or N:N (got "
                              f"{len(queries)} and {len(documents)})", param=first,
                              reason="INVALID_FORMAT")
    for param, side in ((first, queries), (second, documents)):
        if not side:
            raise InvalidArgument(f"{param}: at least one text must be given", param=param,
                                  reason="FIELD_REQUIRED")
    if len(documents) > most:
        raise InvalidArgument(f"{second}: at most {most} documents per call "
                              "(--max-score-documents)", param=second,
                              reason="TOO_MANY_ITEMS")


def _per_text(req: Any, engine: Engine) -> tuple[int, int]:
    out = []
    for name in ("max_tokens_per_query", "max_tokens_per_doc"):
        value = getattr(req, name)
        if value < 0:
            raise InvalidArgument(f"{name} must be a non-negative integer", param=name,
                                  reason="VALUE_OUT_OF_RANGE")
        if value >= engine.max_model_len:
            raise InvalidArgument(f"{name} ({value}) must be less than max_model_len "
                                  f"({engine.max_model_len})", param=name,
                                  reason="VALUE_OUT_OF_RANGE")
        out.append(int(value))
    return out[0], out[1]


def _named(param: str, make: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """make(*args, **kwargs), its InvalidArgument naming `param` when it
    names nothing."""
    try:
        return make(*args, **kwargs)
    except InvalidArgument as exc:
        exc.param = exc.param or param
        raise


def _template_kwargs(req: Any) -> dict[str, Any] | None:
    kwargs = (struct_to_dict(req.chat_template_kwargs, "chat_template_kwargs")
              if req.HasField("chat_template_kwargs") else {})
    if req.HasField("instruction"):
        kwargs.setdefault("instruction", req.instruction)  # vLLM's: the kwargs' one wins
    return kwargs or None


async def score_kind(engine: Engine) -> str:
    if not engine.pooling:
        raise FailedPrecondition(
            "the served model generates: scores need a pooling model (start the server with "
            "--runner pooling: a cross-encoder, an embedding model)", reason="MODEL_DOES_NOT_POOL")
    kind = await engine.score_type()
    if kind not in TASKS:
        raise FailedPrecondition(
            "the served model does not score: /score and /rerank need a cross-encoder (a "
            "classifier with one label), an embedding model or a token-embedding model"
            + (" (JinaForRanking's scorer is not served)" if kind else ""),
            reason="TASK_NOT_SUPPORTED")
    return kind


async def prepare(plane: DataPlane, req: Any, caller: Caller) -> ScorePlan:
    """The plan of a ScoreRequest or a RerankRequest (its query against each
    document): checked, cut and tokenized off the event loop when heavy
    (inference/offload.py)."""
    engine = plane.engine
    kind = await score_kind(engine)
    return await plane.offload.prepare(req, lambda: _score_plan(
        req, engine, plane.settings, kind, served_model=plane.served_model, caller=caller))


def _score_plan(req: Any, engine: Engine, settings: ServerSettings, kind: str, *,
                served_model: str, caller: Caller) -> ScorePlan:
    model = check_model(req.model, served_model, engine.lora_names())
    if isinstance(req, embeddings_pb2.RerankRequest):
        if req.top_n < 0:
            raise InvalidArgument("top_n must be at least 0 (0: every document)",
                                  param="top_n", reason="VALUE_OUT_OF_RANGE")
        if not req.HasField("query"):
            raise InvalidArgument("query is required", param="query", reason="FIELD_REQUIRED")
        first, queries = "query", _texts("query", req.query, one=True)
        second = "documents"
        documents = _texts(second, req.documents) if req.HasField(second) else []
    else:
        first, queries, second, documents = _score_sides(req)
    _check_counts(first, queries, second, documents, settings.max_score_documents)
    per_query, per_doc = _per_text(req, engine)
    keep, _ = kept(req, engine)
    # A text may exceed the window when it is cut (up to 4 windows, as
    # embeddings' inputs): no caller makes the server tokenize unbounded text.
    longest = engine.max_model_len * (4 if keep or per_query or per_doc else 1)
    for param, texts in ((first, queries), (second, documents)):
        for i, text in enumerate(texts):
            v.text_fits(_item(param, texts, i), len(text), longest, engine.max_token_chars)
    response_id = new_request_id("score", req.request_id, caller.request_id)
    common = {"task": TASKS[kind], "priority": check_priority(req.priority, settings, caller),
              "lora": lora_of(model, served_model), "tenant": caller.tenant,
              "use_activation": req.use_activation if req.HasField("use_activation") else None}

    cut = dict(zip(("truncate", "side"), tokenize_cut(req), strict=True))  # (checked: kept)
    prompts: list[tuple[list[int], list[int] | None]] = []
    if kind == "cross-encoder":
        kwargs = _template_kwargs(req)
        for i, document in enumerate(documents):
            prompts.append(_named(
                _item(second, documents, i), engine.score_prompt,
                queries[0 if len(queries) == 1 else i], document, max_query_tokens=per_query,
                max_doc_tokens=per_doc, template_kwargs=kwargs, **cut))
    else:
        for param, texts, most in ((first, queries, per_query), (second, documents, per_doc)):
            for i, text in enumerate(texts):
                ids = _named(_item(param, texts, i), engine.pooling_tokens,
                             engine.truncate_text(text, most) if most else text,
                             add_special_tokens=True, **cut)
                prompts.append((ids, None))
    names = ([_item(second, documents, i) for i in range(len(documents))]
             if kind == "cross-encoder" else
             [_item(p, t, i) for p, t in ((first, queries), (second, documents))
              for i in range(len(t))])
    for param, (ids, _) in zip(names, prompts, strict=True):
        v.prompt_fits(param, len(ids), engine.max_model_len, generates=False)
    requests = [PoolRequest(request_id=f"{response_id}-{i}", prompt_token_ids=ids,
                            token_type_ids=types, **common)
                for i, (ids, types) in enumerate(prompts)]
    return ScorePlan(response_id, model, kind, documents, requests,
                     0 if kind == "cross-encoder" else len(queries),
                     req.top_n if isinstance(req, embeddings_pb2.RerankRequest) else 0)


def _scores(plan: ScorePlan, found: list[PoolOutput], engine: Engine) -> list[float]:
    if plan.queries == 0:  # a cross-encoder: one output per pair, its one class
        return [out.data[0] for out in found]
    queries, documents = found[:plan.queries], found[plan.queries:]
    return [engine.similarity(queries[0 if len(queries) == 1 else i], doc)
            for i, doc in enumerate(documents)]


async def _scored(plane: DataPlane, plan: ScorePlan, found: list[PoolOutput]
                  ) -> tuple[list[float], int]:
    """Each document's score and the prompt tokens."""
    tokens = sum(len(r.prompt_token_ids) for r in plan.requests)
    # MaxSim (a matrix product per pair) off the event loop when it is large
    scores = await plane.offload.run(
        lambda: _scores(plan, found, plane.engine), own_template=False,
        heavy=plan.kind == "late-interaction" and tokens > MAXSIM_INLINE)
    return scores, tokens


async def score_response(plane: DataPlane, plan: ScorePlan, found: list[PoolOutput]
                         ) -> embeddings_pb2.ScoreResponse:
    scores, tokens = await _scored(plane, plan, found)
    resp = embeddings_pb2.ScoreResponse(
        id=plan.id, object="list", created=int(time.time()), model=plan.model,
        usage=common_pb2.Usage(prompt_tokens=tokens, completion_tokens=0, total_tokens=tokens))
    for i, value in enumerate(scores):
        resp.data.add(index=i, object="score", score=value)
    return resp


async def rerank_response(plane: DataPlane, plan: ScorePlan, found: list[PoolOutput]
                          ) -> embeddings_pb2.RerankResponse:
    scores, tokens = await _scored(plane, plan, found)
    order = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
    if 0 < plan.top_n < len(order):
        order = order[:plan.top_n]
    resp = embeddings_pb2.RerankResponse(
        id=plan.id, model=plan.model,
        usage=embeddings_pb2.RerankUsage(prompt_tokens=tokens, total_tokens=tokens))
    for i in order:
        result = resp.results.add(index=i, relevance_score=scores[i])
        result.document.text = plan.documents[i]
        result.document.multi_modal.null_value = struct_pb2.NULL_VALUE
    return resp
