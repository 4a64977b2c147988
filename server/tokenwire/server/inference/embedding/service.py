"""CreateEmbedding: the plan's inputs embedded together (one engine request
each, run at once so the engine batches them; one failing cancels the
others), answered in OpenAI's and vLLM's shape: `data[i]` for input i, its
embedding a list of numbers or (base64) the little-endian float32 bytes."""

from __future__ import annotations

import asyncio
import base64
import struct
import time

from google.protobuf import struct_pb2

from tokenwire.server.core.domain import Caller, Engine
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.embedding.request import EmbeddingPlan, build_embedding_plan
from tokenwire.v1 import common_pb2, embeddings_pb2


def _value(vector: list[float], encoding: str) -> struct_pb2.Value:
    if encoding == "base64":
        raw = struct.pack(f"<{len(vector)}f", *vector)
        return struct_pb2.Value(string_value=base64.b64encode(raw).decode())
    listed = struct_pb2.Value()
    listed.list_value.values.extend(struct_pb2.Value(number_value=x) for x in vector)
    return listed


async def run_embedding(plan: EmbeddingPlan,
                        engine: Engine) -> embeddings_pb2.CreateEmbeddingResponse:
    tasks = [asyncio.ensure_future(engine.embed(r)) for r in plan.requests]
    try:
        found = await asyncio.gather(*tasks)
    except BaseException:  # the first error (or the call's cancellation) ends the others
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    resp = embeddings_pb2.CreateEmbeddingResponse(
        id=plan.id, object="list", created=int(time.time()), model=plan.model)
    for i, vector in enumerate(found):
        resp.data.add(index=i, object="embedding", embedding=_value(vector, plan.encoding))
    tokens = sum(len(r.prompt_token_ids) for r in plan.requests)
    resp.usage.CopyFrom(common_pb2.Usage(prompt_tokens=tokens, completion_tokens=0,
                                         total_tokens=tokens))
    return resp


async def create_embedding(
    req: embeddings_pb2.CreateEmbeddingRequest, engine: Engine, settings: ServerSettings, *,
    served_model: str, caller: Caller,
) -> embeddings_pb2.CreateEmbeddingResponse:
    plan = build_embedding_plan(req, engine, settings, served_model=served_model, caller=caller)
    return await run_embedding(plan, engine)
