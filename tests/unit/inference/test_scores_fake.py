"""Score (/score) and Rerank (/rerank) on the fake pooling engine in vLLM's
three ways: a cross-encoder (one classifier label: each pair one prompt,
the query's ids then the document's, segment ids 0 then 1), a bi-encoder
(an embedding model: each text embedded once, the cosine) and late
interaction (token embeddings: MaxSim); 1:N and N:N, vLLM's four
spellings of the pair, usage, rerank's order and top_n, per-text cuts and
truncation; bad bodies INVALID_ARGUMENT naming the field; a model that
does not score FAILED_PRECONDITION; the server serves on."""

from __future__ import annotations

import collections.abc
import contextlib
import math
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import error_info
from tests.servers import fake_serving
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.fake.pooling import fake_embedding, fake_scores
from tokenwire.v1 import embeddings_pb2, service_pb2_grpc

KINDS = {"cross": (("classify",), ("relevant",)), "bi": (("embed",), ("a", "b", "c")),
         "late": (("token_embed",), ("a", "b", "c"))}
DOCS = ["Paris is the capital of France.", "Bananas are yellow.", "France borders Spain."]


@contextlib.contextmanager
def serving(kind: str, **settings: Any
            ) -> collections.abc.Iterator[tuple[Any, FakeEngine]]:
    engine = FakeEngine(max_model_len=64)
    engine.pooling = True
    engine.pool_tasks, engine.labels = KINDS[kind]
    with fake_serving(engine, served_model_name="fake-scorer", **settings) as server, \
            grpc.insecure_channel(server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), engine


@pytest.fixture(scope="module", params=list(KINDS))
def scorer(request) -> collections.abc.Iterator[tuple[str, Any, FakeEngine]]:
    with serving(request.param) as (stub, engine):
        yield request.param, stub, engine


def score(stub: Any, **body: Any) -> embeddings_pb2.ScoreResponse:
    return stub.Score(json_format.ParseDict(body, embeddings_pb2.ScoreRequest()), timeout=10)


def rerank(stub: Any, **body: Any) -> embeddings_pb2.RerankResponse:
    return stub.Rerank(json_format.ParseDict(body, embeddings_pb2.RerankRequest()), timeout=10)


def refused(call: Any, stub: Any, **body: Any) -> tuple[str, str, str]:
    with pytest.raises(grpc.RpcError) as exc:
        call(stub, **body)
    info = error_info(exc.value)
    return exc.value.code().name, info.metadata.get("param", ""), info.reason


def expected(kind: str, engine: FakeEngine, query: str, doc: str) -> tuple[float, int]:
    """The pair's score computed here from the fake model's definition, and
    the tokens its prompts hold."""
    q = engine.encode(query, add_special_tokens=True)
    if kind == "cross":
        d = engine.encode(doc, add_special_tokens=False)
        ids = [t + 7 * s for t, s in zip(q + d, [0] * len(q) + [1] * len(d), strict=True)]
        return fake_scores(ids, True, 1)[0], len(q) + len(d)
    d = engine.encode(doc, add_special_tokens=True)
    if kind == "bi":
        a, b = fake_embedding(q), fake_embedding(d)
        return sum(x * y for x, y in zip(a, b, strict=True)), len(d)  # normalized: the cosine
    rows_q = [fake_embedding(q[:k + 1]) for k in range(len(q))]
    rows_d = [fake_embedding(d[:k + 1]) for k in range(len(d))]
    return sum(max(sum(x * y for x, y in zip(r, s, strict=True)) for s in rows_d)
               for r in rows_q), len(d)


def test_one_query_against_each_document(scorer) -> None:
    kind, stub, engine = scorer
    query = "What is the capital of France?"
    resp = score(stub, model="fake-scorer", queries=query, documents=DOCS)
    assert (resp.object, resp.model) == ("list", "fake-scorer") and resp.id.startswith("score-")
    assert [(d.index, d.object) for d in resp.data] == [(0, "score"), (1, "score"),
                                                        (2, "score")]
    want = [expected(kind, engine, query, doc) for doc in DOCS]
    assert [d.score for d in resp.data] == pytest.approx([w[0] for w in want], abs=1e-9)
    # a cross-encoder runs each pair; the others embed the query once, then each document
    tokens = sum(w[1] for w in want) + (
        0 if kind == "cross" else len(engine.encode(query, add_special_tokens=True)))
    assert (resp.usage.prompt_tokens, resp.usage.total_tokens) == (tokens, tokens)
    assert resp.usage.completion_tokens == 0
    if kind == "cross":  # the segment ids reached the engine with each pair
        last = engine.pooled[-3:]
        assert all(r.task == "classify" and r.token_type_ids is not None for r in last)
        assert [r.request_id for r in last] == [f"{resp.id}-{i}" for i in range(3)]


def test_n_queries_pair_with_n_documents_under_every_spelling(scorer) -> None:
    kind, stub, engine = scorer
    queries = ["capital?", "fruit colour?"]
    want = [expected(kind, engine, q, d)[0] for q, d in zip(queries, DOCS[:2], strict=True)]
    for first, second in (("queries", "documents"), ("queries", "items"),
                          ("data_1", "data_2"), ("text_1", "text_2")):
        resp = score(stub, **{first: queries, second: DOCS[:2]})
        assert [d.score for d in resp.data] == pytest.approx(want, abs=1e-9), first
    one = score(stub, text_1="capital?", text_2=DOCS[0])  # 1:1, strings
    assert one.data[0].score == pytest.approx(want[0], abs=1e-9)


def test_rerank_orders_by_relevance_and_keeps_top_n(scorer) -> None:
    kind, stub, engine = scorer
    query = "What is the capital of France?"
    scores = [expected(kind, engine, query, d)[0] for d in DOCS]
    order = sorted(range(3), key=lambda i: scores[i], reverse=True)
    resp = rerank(stub, query=query, documents=DOCS)
    assert resp.id.startswith("score-") and resp.model == "fake-scorer"
    assert [r.index for r in resp.results] == order
    assert [r.document.text for r in resp.results] == [DOCS[i] for i in order]
    assert [r.relevance_score for r in resp.results] == pytest.approx(
        [scores[i] for i in order], abs=1e-9)
    assert resp.usage.prompt_tokens == resp.usage.total_tokens > 0
    body = json_format.MessageToDict(resp, preserving_proto_field_name=True)
    assert body["results"][0]["document"] == {"text": DOCS[order[0]], "multi_modal": None}
    top = rerank(stub, query=query, documents=DOCS, top_n=2)
    assert [r.index for r in top.results] == order[:2]
    assert [r.index for r in rerank(stub, query=query, documents=DOCS, top_n=9).results] == order


def test_per_text_cuts_and_truncation(scorer) -> None:
    kind, stub, engine = scorer
    long_doc = "word " * 40
    cut = score(stub, queries="q?", documents=long_doc, max_tokens_per_doc=5)
    assert cut.data[0].score == pytest.approx(
        expected(kind, engine, "q?", engine.truncate_text(long_doc, 5))[0], abs=1e-9)
    whole = score(stub, queries="q?", documents="word " * 12, truncate_prompt_tokens=6)
    ran = engine.pooled[-1 if kind == "cross" else -2:]  # the pair, or query and document
    assert all(len(r.prompt_token_ids) <= 6 for r in ran)
    assert whole.usage.prompt_tokens <= 12
    if kind == "cross":
        left = score(stub, queries="q?", documents="word " * 12, truncate_prompt_tokens=6,
                     truncation_side="left")
        assert left.usage.prompt_tokens == 6
        assert engine.pooled[-1].token_type_ids == [1] * 6  # cut with its ids


def test_bad_bodies_name_the_field(scorer) -> None:
    _, stub, _ = scorer
    assert refused(score, stub, queries=["a", "b"], documents=["x", "y", "z"]) == (
        "INVALID_ARGUMENT", "queries", "INVALID_FORMAT")
    assert refused(score, stub, queries="a", documents=[]) == (
        "INVALID_ARGUMENT", "documents", "FIELD_REQUIRED")
    assert refused(score, stub, queries="a", text_2="b") == (
        "INVALID_ARGUMENT", "queries", "FIELDS_CONFLICT")
    assert refused(score, stub) == ("INVALID_ARGUMENT", "queries", "FIELD_REQUIRED")
    assert refused(score, stub, queries="a", documents=[1]) == (
        "INVALID_ARGUMENT", "documents[0]", "INVALID_TYPE")
    assert refused(score, stub, queries={"content": [{"type": "text", "text": "a"}]},
                   documents="b") == ("INVALID_ARGUMENT", "queries", "FEATURE_DISABLED")
    assert refused(score, stub, queries="a", documents="b", max_tokens_per_doc=64) == (
        "INVALID_ARGUMENT", "max_tokens_per_doc", "VALUE_OUT_OF_RANGE")
    assert refused(score, stub, queries="a", documents="b", max_tokens_per_query=-1) == (
        "INVALID_ARGUMENT", "max_tokens_per_query", "VALUE_OUT_OF_RANGE")
    assert refused(score, stub, queries="a", documents="w" * 100) == (
        "INVALID_ARGUMENT", "documents", "PROMPT_TOO_LONG")
    assert refused(score, stub, queries="a", documents=["b"] * 1025) == (
        "INVALID_ARGUMENT", "documents", "TOO_MANY_ITEMS")
    assert refused(rerank, stub, query=["a"], documents="b") == (
        "INVALID_ARGUMENT", "query", "INVALID_TYPE")
    assert refused(rerank, stub, documents="b") == ("INVALID_ARGUMENT", "query", "FIELD_REQUIRED")
    assert refused(rerank, stub, query="a", documents="b", top_n=-1) == (
        "INVALID_ARGUMENT", "top_n", "VALUE_OUT_OF_RANGE")
    assert score(stub, queries="still", documents="serving").data  # serves on


def test_models_that_do_not_score() -> None:
    engine = FakeEngine(max_model_len=64)
    engine.pooling = True
    engine.pool_tasks = ("classify",)  # three labels: a classifier, not a cross-encoder
    with fake_serving(engine) as server, grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        assert refused(score, stub, queries="a", documents="b") == (
            "FAILED_PRECONDITION", "", "TASK_NOT_SUPPORTED")
        assert refused(rerank, stub, query="a", documents="b")[2] == "TASK_NOT_SUPPORTED"
    with fake_serving(FakeEngine(max_model_len=64)) as server, \
            grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        assert refused(score, stub, queries="a", documents="b") == (
            "FAILED_PRECONDITION", "", "MODEL_DOES_NOT_POOL")


def test_cross_encoder_template_kwargs_and_instruction() -> None:
    """instruction joins chat_template_kwargs (the kwargs' own wins), as vLLM's."""
    seen: list[dict[str, Any] | None] = []
    with serving("cross") as (stub, engine):
        inner = engine.score_prompt

        def spy(query: str, document: str, **kw: Any) -> Any:
            seen.append(kw["template_kwargs"])
            return inner(query, document, **kw)

        engine.score_prompt = spy  # type: ignore[method-assign]
        score(stub, queries="a", documents="b", instruction="Judge relevance.")
        score(stub, queries="a", documents="b", instruction="x",
              chat_template_kwargs={"instruction": "mine", "k": 1})
        score(stub, queries="a", documents="b")
    assert seen == [{"instruction": "Judge relevance."}, {"instruction": "mine", "k": 1}, None]


def test_cosine_is_the_embeddings_cosine() -> None:
    with serving("bi") as (stub, _):
        resp = score(stub, queries="same text", documents=["same text"])
    assert math.isclose(resp.data[0].score, 1.0, abs_tol=1e-9)
