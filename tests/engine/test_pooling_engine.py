"""/v1/embeddings on the real engine: the tiny random Llama served as a
pooling model (`--runner pooling --convert embed`, vLLM's own flags) by
`tokenwire serve`. Each input's embedding is the model's own (Hugging Face:
the last token's final hidden state, L2-normalized, as vLLM's embedding
pooler takes it), a text and its ids give the same numbers, base64 is their
float32 bytes, a batch answers in input order; vLLM's own rules refuse
`dimensions` on a model without matryoshka support; the pooling model
refuses generation and the server serves on. /classify on a tiny
sequence-classification Llama (a reward model's shape, built here): each
input's class scores are the model's own softmaxed logits, labelled by its
id2label."""

from __future__ import annotations

import base64
import collections.abc
import struct

import grpc
import pytest
from google.protobuf import json_format

from tests.engine.checkpoints import build_classifier
from tests.rpc import chat_request, error_info
from tests.servers import ROOT, ProcessServer
from tokenwire.v1 import embeddings_pb2, service_pb2_grpc, tokenize_pb2

TINY = ROOT / ".models" / "tiny-random-llama"


@pytest.fixture(scope="module")
def stub() -> collections.abc.Iterator[service_pb2_grpc.TokenwireServiceStub]:
    server = ProcessServer(["--model", str(TINY), "--runner", "pooling", "--convert", "embed",
                            "--kv-cache-bytes", str(64 << 20)]).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            yield service_pb2_grpc.TokenwireServiceStub(ch)
    finally:
        assert server.stop(120) == 0, server.log_tail()


def embed(stub, **body) -> embeddings_pb2.CreateEmbeddingResponse:
    return stub.CreateEmbedding(json_format.ParseDict(
        body, embeddings_pb2.CreateEmbeddingRequest()), timeout=120)


def vectors(resp) -> list[list[float]]:
    return [list(json_format.MessageToDict(d)["embedding"]) for d in resp.data]


def hf_embedding(ids: list[int]) -> list[float]:
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(TINY), dtype=torch.float32)
    with torch.no_grad():
        last = model(torch.tensor([ids])).last_hidden_state[0, -1]
    return torch.nn.functional.normalize(last, dim=0).tolist()


def test_embeddings_are_the_models_own(stub) -> None:
    texts = ["The capital of France is Paris.", "tokenwire embeds"]
    resp = embed(stub, input=texts)
    ids = [list(stub.Tokenize(tokenize_pb2.TokenizeRequest(prompt=t), timeout=30).tokens)
           for t in texts]
    assert [d.index for d in resp.data] == [0, 1]
    assert resp.usage.prompt_tokens == resp.usage.total_tokens == sum(map(len, ids))
    got = vectors(resp)
    for vector, prompt in zip(got, ids, strict=True):
        want = hf_embedding(prompt)
        assert len(vector) == len(want)
        assert max(abs(a - b) for a, b in zip(vector, want, strict=True)) < 1e-4
    assert vectors(embed(stub, input=ids)) == got  # the same ids, the same numbers
    b64 = embed(stub, input=texts, encoding_format="base64")
    decoded = [list(struct.unpack(f"<{len(got[0])}f", base64.b64decode(
        d.embedding.string_value))) for d in b64.data]
    assert decoded == [[struct.unpack("<f", struct.pack("<f", x))[0] for x in v] for v in got]


def test_vllms_rules_and_generation_are_refused_and_it_serves_on(stub) -> None:
    with pytest.raises(grpc.RpcError) as exc:
        embed(stub, input="x", dimensions=8)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(exc.value).metadata["param"] == "dimensions"
    assert "Matryoshka" in exc.value.details()
    with pytest.raises(grpc.RpcError) as exc:
        stub.CreateChatCompletion(chat_request(), timeout=60)
    assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(exc.value).reason == "MODEL_DOES_NOT_GENERATE"
    assert len(vectors(embed(stub, input="still serving"))[0]) == 64


LABELS = ("bad", "okay", "good")


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> collections.abc.Iterator[tuple[object, object]]:
    folder = build_classifier(TINY, tmp_path_factory.mktemp("classifier"), LABELS)
    server = ProcessServer(["--model", str(folder), "--runner", "pooling",
                            "--kv-cache-bytes", str(64 << 20)]).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            yield service_pb2_grpc.TokenwireServiceStub(ch), folder
    finally:
        assert server.stop(120) == 0, server.log_tail()


@pytest.fixture(scope="module")
def prm(classifier) -> collections.abc.Iterator[tuple[object, object]]:
    """The same classifier served with pooling task token_classify (a process
    reward model's: vLLM serves one pooling task per server)."""
    _, folder = classifier
    server = ProcessServer(["--model", str(folder), "--runner", "pooling",
                            "--pooler-config", '{"task": "token_classify"}',
                            "--kv-cache-bytes", str(64 << 20)]).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            yield service_pb2_grpc.TokenwireServiceStub(ch), folder
    finally:
        assert server.stop(120) == 0, server.log_tail()


def test_classify_answers_the_models_own_scores(classifier) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification

    stub, folder = classifier
    texts = ["A fine answer.", "no", "The capital of France is Paris."]
    resp = stub.Classify(json_format.ParseDict({"input": texts},
                                               embeddings_pb2.ClassifyRequest()), timeout=120)
    model = AutoModelForSequenceClassification.from_pretrained(str(folder), dtype=torch.float32)
    for i, (item, text) in enumerate(zip(resp.data, texts, strict=True)):
        ids = list(stub.Tokenize(tokenize_pb2.TokenizeRequest(prompt=text), timeout=30).tokens)
        with torch.no_grad():
            want = torch.softmax(model(torch.tensor([ids])).logits[0], dim=0).tolist()
        assert (item.index, item.num_classes) == (i, len(LABELS))
        assert max(abs(a - b) for a, b in zip(item.probs, want, strict=True)) < 1e-4
        assert item.label == LABELS[max(range(3), key=want.__getitem__)]
    # An embeddings call on a classifier: vLLM's task check, not served.
    with pytest.raises(grpc.RpcError) as exc:
        embed(stub, input="x")
    assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(exc.value).reason == "TASK_NOT_SUPPORTED"


def test_a_rollout_is_classified_as_its_rendered_conversation(classifier) -> None:
    """vLLM's chat form: a reward model scores a conversation (`messages`),
    rendered by the model's chat template without a generation prompt —
    the scores of those ids, equal to the model's own."""
    import torch
    from transformers import AutoModelForSequenceClassification

    stub, folder = classifier
    rollout = [{"role": "user", "content": "What is 2+2?"},
               {"role": "assistant", "content": "4"}]
    resp = stub.Classify(json_format.ParseDict({"messages": rollout},
                                               embeddings_pb2.ClassifyRequest()), timeout=120)
    ids = list(stub.Tokenize(json_format.ParseDict(
        {"messages": rollout, "add_generation_prompt": False}, tokenize_pb2.TokenizeRequest()),
        timeout=30).tokens)
    assert resp.usage.prompt_tokens == len(ids)
    model = AutoModelForSequenceClassification.from_pretrained(str(folder), dtype=torch.float32)
    with torch.no_grad():
        want = torch.softmax(model(torch.tensor([ids])).logits[0], dim=0).tolist()
    assert max(abs(a - b) for a, b in zip(resp.data[0].probs, want, strict=True)) < 1e-4


def test_pooling_gives_the_models_per_token_scores(prm) -> None:
    """vLLM's /pooling on the classifier served with pooling task
    token_classify (a process reward model's shape): a row per token, each
    the model's own softmaxed scores at that token, named or not; another
    task refused by name, and /classify not served (vLLM's rule)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    stub, folder = prm
    ids = list(stub.Tokenize(tokenize_pb2.TokenizeRequest(prompt="Step 1. Step 2."),
                             timeout=30).tokens)
    model = AutoModelForSequenceClassification.from_pretrained(str(folder), dtype=torch.float32)
    with torch.no_grad():
        hidden = model.model(torch.tensor([ids])).last_hidden_state[0]
        want = torch.softmax(model.score(hidden), dim=-1).tolist()
    resp = stub.Pool(json_format.ParseDict({"input": ids, "task": "token_classify"},
                                           embeddings_pb2.PoolRequest()), timeout=120)
    rows = json_format.MessageToDict(resp.data[0])["data"]
    assert len(rows) == len(ids) and all(len(r) == len(LABELS) for r in rows)
    assert max(abs(a - b) for r, w in zip(rows, want, strict=True)
               for a, b in zip(r, w, strict=True)) < 1e-4
    default = stub.Pool(json_format.ParseDict({"input": ids}, embeddings_pb2.PoolRequest()),
                        timeout=120)
    assert json_format.MessageToDict(default.data[0])["data"] == rows
    with pytest.raises(grpc.RpcError) as exc:
        stub.Pool(json_format.ParseDict({"input": ids, "task": "classify"},
                                        embeddings_pb2.PoolRequest()), timeout=120)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(exc.value).metadata["param"] == "task"
    with pytest.raises(grpc.RpcError) as exc:
        stub.Classify(json_format.ParseDict({"input": "x"}, embeddings_pb2.ClassifyRequest()),
                      timeout=120)
    assert error_info(exc.value).reason == "TASK_NOT_SUPPORTED"


def test_scores_are_the_cosine_of_the_models_embeddings(stub) -> None:
    """An embedding model scores as vLLM's bi-encoder: each text embedded
    once (the query once for every document), the cosine of a pair."""
    import math

    query, docs = "The capital of France", ["Paris is in France.", "tokenwire embeds"]
    resp = stub.Score(json_format.ParseDict({"queries": query, "documents": docs},
                                            embeddings_pb2.ScoreRequest()), timeout=120)
    ids = [list(stub.Tokenize(tokenize_pb2.TokenizeRequest(prompt=t), timeout=30).tokens)
           for t in [query, *docs]]
    q = hf_embedding(ids[0])
    for d, doc_ids in zip(resp.data, ids[1:], strict=True):
        e = hf_embedding(doc_ids)
        assert math.isclose(d.score, sum(a * b for a, b in zip(q, e, strict=True)),
                            abs_tol=1e-4)  # both normalized: the cosine
    assert resp.usage.prompt_tokens == sum(map(len, ids))
    ranked = stub.Rerank(json_format.ParseDict({"query": query, "documents": docs},
                                               embeddings_pb2.RerankRequest()), timeout=120)
    assert [r.relevance_score for r in ranked.results] == sorted(
        (d.score for d in resp.data), reverse=True)


def test_cohere_embed_gives_the_same_embeddings(stub) -> None:
    """Cohere's /v2/embed on the real engine: the texts' embeddings are
    /v1/embeddings' (the model defines no input_type: refused, as vLLM)."""
    texts = ["The capital of France", "Paris"]
    resp = stub.CohereEmbed(json_format.ParseDict(
        {"texts": texts, "embedding_types": ["float", "ubinary"]},
        embeddings_pb2.CohereEmbedRequest()), timeout=120)
    body = json_format.MessageToDict(resp, preserving_proto_field_name=True)
    assert body["embeddings"]["float"] == vectors(embed(stub, input=texts))
    assert [len(row) for row in body["embeddings"]["ubinary"]] == [
        len(body["embeddings"]["float"][0]) // 8] * 2
    with pytest.raises(grpc.RpcError) as exc:
        stub.CohereEmbed(json_format.ParseDict({"texts": ["x"], "input_type": "search_query"},
                                               embeddings_pb2.CohereEmbedRequest()), timeout=60)
    assert error_info(exc.value).metadata["param"] == "input_type"
