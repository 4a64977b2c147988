"""Cohere's official Python SDK (ClientV2), unchanged but for base_url,
through Envoy to a fake pooling server: `embed` (/v2/embed: texts with an
input_type the model defines, every embedding type) and `rerank`
(/v2/rerank) get the engine's numbers; a refused body is a 400 the SDK
raises as BadRequestError."""

from __future__ import annotations

import collections.abc

import cohere
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import fake_serving
from tokenwire.server.core.domain import RenderOptions
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.fake.pooling import fake_embedding


@pytest.fixture(scope="module")
def served() -> collections.abc.Iterator[tuple[cohere.ClientV2, FakeEngine]]:
    engine = FakeEngine(max_model_len=64)
    engine.pooling = True
    engine.instructions = {"search_query": "query: ", "search_document": "passage: "}
    with fake_serving(engine, served_model_name="fake-embed") as server:
        envoy = start_gateway(server.address)
        try:
            yield cohere.ClientV2(api_key="unused", base_url=envoy.url), engine
        finally:
            stop_gateway(envoy)


def _ids(engine: FakeEngine, prefix: str, text: str) -> list[int]:
    return engine.render_chat([{"role": "system", "content": prefix},
                               {"role": "user", "content": text}],
                              RenderOptions(add_generation_prompt=False))


def test_the_cohere_sdk_embeds(served) -> None:
    client, engine = served
    texts = ["tokenwire serves", "token ids"]
    got = client.embed(model="fake-embed", input_type="search_document", texts=texts,
                       embedding_types=["float", "ubinary", "base64"])
    want = [fake_embedding(_ids(engine, "passage: ", t)) for t in texts]
    assert got.embeddings.float_ is not None
    assert all(a == pytest.approx(b) for a, b in zip(got.embeddings.float_, want, strict=True))
    assert got.embeddings.ubinary is not None and len(got.embeddings.ubinary) == 2
    assert got.texts == texts and got.meta is not None and got.meta.billed_units is not None
    assert got.meta.billed_units.input_tokens == sum(
        len(_ids(engine, "passage: ", t)) for t in texts)
    with pytest.raises(cohere.BadRequestError):
        client.embed(model="fake-embed", input_type="clustering", texts=["x"])


def test_the_cohere_sdk_reranks(served) -> None:
    client, engine = served
    docs = ["Paris is in France", "bananas", "France borders Spain"]
    got = client.rerank(model="fake-embed", query="capital of France", documents=docs, top_n=2)
    q = fake_embedding(engine.encode("capital of France", add_special_tokens=True))
    scores = [sum(a * b for a, b in zip(q, fake_embedding(
        engine.encode(d, add_special_tokens=True)), strict=True)) for d in docs]
    best = sorted(range(3), key=lambda i: scores[i], reverse=True)[:2]
    assert [r.index for r in got.results] == best
    assert [r.relevance_score for r in got.results] == pytest.approx([scores[i] for i in best])
