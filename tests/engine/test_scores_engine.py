"""/score and /rerank on the real engine with a cross-encoder: a tiny
random BERT reranker (BertForSequenceClassification, one label; built
here) served by `tokenwire serve --runner pooling`. Each pair's score is
the model's own (Hugging Face: the sigmoid of the logit of the
tokenizer's text pair, segment ids included) for 1:N and N:N, rerank orders
the documents by it and keeps top_n, max_tokens_per_doc cuts the document
as vLLM does, truncation is the tokenizer's (special tokens kept); a
generation request is refused and the server serves on. (The bi-encoder:
test_pooling_engine.py.)"""

from __future__ import annotations

import collections.abc
import math
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

from tests.engine.checkpoints import build_bert_cross_encoder
from tests.servers import ProcessServer
from tokenwire.v1 import completion_pb2, embeddings_pb2, service_pb2_grpc

QUERY = "What is the capital of France?"
DOCS = ["Paris is the capital of France.", "Bananas are yellow.", "France borders Spain."]


@pytest.fixture(scope="module")
def reranker(tmp_path_factory) -> collections.abc.Iterator[tuple[Path, object]]:
    folder = build_bert_cross_encoder(tmp_path_factory.mktemp("bert") / "reranker")
    server = ProcessServer(["--model", str(folder), "--runner", "pooling",
                            "--max-model-len", "128", "--kv-cache-bytes",
                            str(32 << 20)]).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            yield folder, service_pb2_grpc.TokenwireServiceStub(ch)
    finally:
        assert server.stop(120) == 0, server.log_tail()


def hf_score(folder: Path, query: str, document: str, segments: bool = True,
             max_length: int | None = None) -> float:
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = BertForSequenceClassification.from_pretrained(str(folder)).eval()
    inputs = tokenizer(query, document, return_tensors="pt", truncation=max_length is not None,
                       max_length=max_length)
    if not segments:
        inputs["token_type_ids"] = torch.zeros_like(inputs["token_type_ids"])
    with torch.no_grad():
        logit = model(**inputs).logits[0, 0]
    return float(torch.sigmoid(logit))


def test_scores_are_the_models_own(reranker) -> None:
    folder, stub = reranker
    resp = stub.Score(json_format.ParseDict({"queries": QUERY, "documents": DOCS},
                                            embeddings_pb2.ScoreRequest()), timeout=120)
    want = [hf_score(folder, QUERY, d) for d in DOCS]
    assert [d.index for d in resp.data] == [0, 1, 2]
    assert max(abs(d.score - w) for d, w in zip(resp.data, want, strict=True)) < 1e-4
    assert len({round(w, 3) for w in want}) == 3
    # the pair's segment ids reached the model: without them its score is another
    assert abs(resp.data[0].score - hf_score(folder, QUERY, DOCS[0], segments=False)) > 1e-3
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokens = sum(len(tokenizer(QUERY, d)["input_ids"]) for d in DOCS)
    assert resp.usage.prompt_tokens == resp.usage.total_tokens == tokens
    pairs = stub.Score(json_format.ParseDict(
        {"text_1": ["capital?", "fruit?"], "text_2": DOCS[:2]}, embeddings_pb2.ScoreRequest()),
        timeout=120)
    assert max(abs(d.score - hf_score(folder, q, t)) for d, q, t in zip(
        pairs.data, ["capital?", "fruit?"], DOCS[:2], strict=True)) < 1e-4


def test_rerank_and_cuts(reranker) -> None:
    folder, stub = reranker
    want = [hf_score(folder, QUERY, d) for d in DOCS]
    order = sorted(range(3), key=lambda i: want[i], reverse=True)
    resp = stub.Rerank(json_format.ParseDict({"query": QUERY, "documents": DOCS, "top_n": 2},
                                             embeddings_pb2.RerankRequest()), timeout=120)
    assert [r.index for r in resp.results] == order[:2]
    assert [r.document.text for r in resp.results] == [DOCS[i] for i in order[:2]]
    assert all(math.isclose(r.relevance_score, want[r.index], abs_tol=1e-4)
               for r in resp.results)
    # max_tokens_per_doc: the document cut to its first 4 tokens (vLLM: at a character end)
    cut = stub.Score(json_format.ParseDict(
        {"queries": QUERY, "documents": DOCS[0], "max_tokens_per_doc": 4},
        embeddings_pb2.ScoreRequest()), timeout=120)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    first = tokenizer.decode(tokenizer(DOCS[0], add_special_tokens=False)["input_ids"][:4])
    assert math.isclose(cut.data[0].score, hf_score(folder, QUERY, first), abs_tol=1e-4)
    short = stub.Score(json_format.ParseDict(
        {"queries": QUERY, "documents": DOCS[0], "truncate_prompt_tokens": 12},
        embeddings_pb2.ScoreRequest()), timeout=120)
    assert short.usage.prompt_tokens == 12
    # vLLM's: the tokenizer truncates the pair (the longer text first, both
    # [SEP]s kept), not the ids
    assert math.isclose(short.data[0].score, hf_score(folder, QUERY, DOCS[0], max_length=12),
                        abs_tol=1e-4)


def test_generation_is_refused_and_it_serves_on(reranker) -> None:
    _, stub = reranker
    with pytest.raises(grpc.RpcError) as exc:
        stub.CreateCompletion(json_format.ParseDict(
            {"prompt": "paris", "max_tokens": 2}, completion_pb2.CreateCompletionRequest()),
            timeout=60)
    assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert stub.Rerank(json_format.ParseDict({"query": "a", "documents": ["b"]},
                                             embeddings_pb2.RerankRequest()), timeout=120).results
