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
