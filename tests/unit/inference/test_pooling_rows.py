"""Token-level pooling outputs stay arrays (issue #42 M-3): the engine's
output (tokens x numbers per token) is held in the domain as the array it
came as, not as Python lists of numbers (the adapter held a flat list and a
list of rows: ~33x the engine's tensor); rows become numbers only in the
/pooling response; late interaction's MaxSim runs on the arrays. A /pooling
body whose token-level output cannot fit one response message (every
token's numbers as they serialize) is refused before the engine runs,
naming the field and the rule."""

from __future__ import annotations

import base64
import collections.abc
from typing import Any

import grpc
import numpy as np
import pytest
from google.protobuf import json_format

from tests.rpc import error_info
from tests.servers import fake_serving
from tokenwire.server.core.pooling import PoolRequest
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.fake.pooling import DIMENSIONS, fake_embedding
from tokenwire.v1 import embeddings_pb2, service_pb2_grpc

LIMIT = 64 * 1024  # the server's message limit here
FLOAT_BYTES = 11  # a number in a row's list, serialized (a Value: tag and 8 bytes, framed)
WINDOW = 4096


@pytest.fixture(scope="module")
def token_embedder() -> collections.abc.Iterator[tuple[Any, FakeEngine]]:
    engine = FakeEngine(max_model_len=WINDOW)
    engine.pooling = True
    engine.pool_tasks = ("token_embed", "embed")  # a late-interaction model's
    with fake_serving(engine, max_model_len=WINDOW, max_message_bytes=LIMIT) as server, \
            grpc.insecure_channel(server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), engine


def pool(stub: Any, **body: Any) -> embeddings_pb2.PoolResponse:
    return stub.Pool(json_format.ParseDict(body, embeddings_pb2.PoolRequest()), timeout=30)


async def test_a_token_level_output_is_the_engines_array() -> None:
    engine = FakeEngine(max_model_len=WINDOW)
    engine.pooling = True
    engine.pool_tasks = ("token_embed", "embed")
    ids = list(range(5, 505))
    out = await engine.pool(PoolRequest("r", ids, task="token_embed"))
    assert isinstance(out.rows, np.ndarray) and out.rows.shape == (len(ids), DIMENSIONS)
    assert out.data == []  # no second copy as a flat list
    assert out.rows[-1].tolist() == fake_embedding(ids)
    # MaxSim on the arrays: each query row's best document row, summed
    other = await engine.pool(PoolRequest("d", ids[:7], task="token_embed"))
    want = sum(max(sum(a * b for a, b in zip(q, d, strict=True)) for d in other.rows.tolist())
               for q in out.rows.tolist())
    assert engine.similarity(out, other) == pytest.approx(want, abs=1e-9)


def _tokens_over_the_limit() -> int:
    """Input tokens whose rows (as floats) cannot fit LIMIT, within the window."""
    tokens = LIMIT // (DIMENSIONS * FLOAT_BYTES) + 1
    assert tokens < WINDOW
    return tokens


def test_rows_that_cannot_fit_a_message_are_refused_before_the_engine_runs(
        token_embedder) -> None:
    stub, engine = token_embedder
    ids = [7] * _tokens_over_the_limit()
    before = len(engine.pooled)
    with pytest.raises(grpc.RpcError) as exc:
        pool(stub, input=ids)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(exc.value)
    assert info is not None and info.reason == "RESPONSE_TOO_LARGE"
    assert info.metadata["param"] == "input"
    details = exc.value.details()
    assert f"{len(ids)} tokens x {DIMENSIONS} numbers per token" in details
    assert f"{LIMIT}-byte message limit" in details, details
    assert len(engine.pooled) == before  # the engine never ran it
    # a conversation names its field
    with pytest.raises(grpc.RpcError) as exc:
        pool(stub, messages=[{"role": "user", "content": "x" * len(ids)}])
    info = error_info(exc.value)
    assert info is not None and info.metadata["param"] == "messages"
    assert len(engine.pooled) == before


def test_rows_that_fit_are_answered_as_before(token_embedder) -> None:
    stub, _ = token_embedder
    ids = [5 + i % 250 for i in range(_tokens_over_the_limit())]
    # base64 (4/3 bytes a float32 value) fits where floats do not
    b64 = pool(stub, input=ids, encoding_format="base64").data[0].data.string_value
    want = np.array([fake_embedding(ids[:k + 1]) for k in range(len(ids))], dtype="<f4")
    assert b64 and np.frombuffer(base64.b64decode(b64), "<f4").tolist() \
        == want.ravel().tolist()
    few = ids[:40]  # as floats: a list per token, the fake's numbers exactly
    rows = json_format.MessageToDict(pool(stub, input=few).data[0])["data"]
    assert rows == [fake_embedding(few[:k + 1]) for k in range(len(few))]
