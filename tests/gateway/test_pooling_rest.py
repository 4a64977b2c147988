"""/v1/embeddings over REST: the official openai SDK, unchanged but for
base_url, through Envoy to a fake pooling server. The SDK asks for base64 by
default and decodes it: its numbers are the engine's, as float32; asked for
floats it gets the same numbers; usage and order as OpenAI's; a bad body is
a 400 in OpenAI's error shape naming the field. /classify answers vLLM's
JSON shape."""

from __future__ import annotations

import collections.abc
import struct

import httpx
import openai
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import fake_serving
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.fake.pooling import LABELS, fake_embedding, fake_scores


@pytest.fixture(scope="module")
def served() -> collections.abc.Iterator[tuple[openai.OpenAI, str, FakeEngine]]:
    engine = FakeEngine(max_model_len=64)
    engine.pooling = True
    with fake_serving(engine, served_model_name="fake-embed") as server:
        envoy = start_gateway(server.address)
        try:
            yield (openai.OpenAI(base_url=f"{envoy.url}/v1", api_key="unused", max_retries=0),
                   envoy.url, engine)
        finally:
            stop_gateway(envoy)


def f32(values: list[float]) -> list[float]:
    return [struct.unpack("<f", struct.pack("<f", x))[0] for x in values]


def test_the_openai_sdk_gets_the_engines_numbers(served) -> None:
    client, _, engine = served
    texts = ["hello there", "another"]
    ids = [engine.encode(t, add_special_tokens=True) for t in texts]
    got = client.embeddings.create(model="fake-embed", input=texts)  # base64 on the wire
    assert [d.index for d in got.data] == [0, 1] and got.model == "fake-embed"
    assert [list(d.embedding) for d in got.data] == [f32(fake_embedding(i)) for i in ids]
    assert got.usage.prompt_tokens == got.usage.total_tokens == sum(map(len, ids))
    floats = client.embeddings.create(model="fake-embed", input=texts[0],
                                      encoding_format="float", dimensions=3)
    assert floats.data[0].embedding == fake_embedding(ids[0], 3)
    by_ids = client.embeddings.create(model="fake-embed", input=ids, encoding_format="float")
    assert [d.embedding for d in by_ids.data] == [fake_embedding(i) for i in ids]


def test_a_bad_body_is_a_400_naming_the_field(served) -> None:
    client, url, _ = served
    with pytest.raises(openai.BadRequestError) as exc:
        client.embeddings.create(model="fake-embed", input=["a", [1, 2]])  # type: ignore[list-item]
    assert exc.value.status_code == 400
    assert exc.value.body["param"] == "input"  # type: ignore[index]
    raw = httpx.post(f"{url}/v1/embeddings", json={"input": "x", "encoding_format": "bytes"})
    assert raw.status_code == 400 and raw.json()["error"]["param"] == "encoding_format"


def test_classify_answers_vllms_shape(served) -> None:
    _, url, engine = served
    engine.pool_tasks = ("classify",)  # a classifier's pooling task
    try:
        r = httpx.post(f"{url}/classify", json={"model": "fake-embed", "input": ["good", "bad"]})
    finally:
        del engine.pool_tasks
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"id", "object", "created", "model", "data", "usage"}
    for i, (item, text) in enumerate(zip(body["data"], ["good", "bad"], strict=True)):
        scores = fake_scores(engine.encode(text, add_special_tokens=True))
        assert item == {"index": i, "label": LABELS[scores.index(max(scores))],
                        "probs": scores, "num_classes": 3}


def test_score_and_rerank_answer_vllms_shapes(served) -> None:
    """/score and /rerank (and their /v1, /v2 routes) through Envoy, on an
    embedding model (a bi-encoder): vLLM's keys, the same numbers on every
    route, a bad body a 400 naming the field."""
    _, url, _ = served
    body = {"model": "fake-embed", "queries": "capital of France",
            "documents": ["Paris", "bananas"]}
    scored = [httpx.post(f"{url}{route}", json=body) for route in ("/score", "/v1/score")]
    assert [r.status_code for r in scored] == [200, 200], scored[0].text
    first = scored[0].json()
    assert set(first) == {"id", "object", "created", "model", "data", "usage"}
    assert first["id"].startswith("score-") and first["object"] == "list"
    assert [set(d) for d in first["data"]] == [{"index", "object", "score"}] * 2
    assert [d["index"] for d in first["data"]] == [0, 1]
    assert [d["score"] for d in scored[1].json()["data"]] == [d["score"] for d in first["data"]]
    query = {"model": "fake-embed", "query": "capital of France",
             "documents": ["Paris", "bananas"], "top_n": 1}
    ranked = [httpx.post(f"{url}{route}", json=query)
              for route in ("/rerank", "/v1/rerank", "/v2/rerank")]
    assert [r.status_code for r in ranked] == [200] * 3, ranked[0].text
    answer = ranked[0].json()
    assert set(answer) == {"id", "model", "usage", "results"}
    assert set(answer["usage"]) == {"prompt_tokens", "total_tokens"}
    best = max(first["data"], key=lambda d: d["score"])
    assert answer["results"] == [{"index": best["index"], "relevance_score": best["score"],
                                  "document": {"text": query["documents"][best["index"]],
                                               "multi_modal": None}}]
    assert all(r.json()["results"] == answer["results"] for r in ranked[1:])
    bad = httpx.post(f"{url}/score", json={"queries": ["a", "b"], "documents": ["c", "d", "e"]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "queries"
    assert httpx.post(f"{url}/rerank", json=query).status_code == 200
