"""CreateEmbedding, Classify and Pool: the plan's inputs pooled together (one
engine request each, run at once so the engine batches them; one failing
cancels the others), answered in OpenAI's / vLLM's shapes: `data[i]` for
input i — an embedding as numbers or (base64) its little-endian float32
bytes; a classification as its class scores and the top class's label; a
/pooling output as numbers, one list per token (token-level tasks), or
base64 of all its float32 values."""

from __future__ import annotations

import asyncio
import base64
import struct
import time
from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core.domain import Caller, Engine
from tokenwire.server.core.pooling import PoolOutput, PoolRequest
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.offload import Offload
from tokenwire.server.inference.pooling.request import PoolPlan, build_pool_plan
from tokenwire.v1 import common_pb2, embeddings_pb2


def float32_base64(vector: list[float]) -> str:
    """OpenAI's / vLLM's base64 of an embedding: its little-endian float32 bytes."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()


def _value(vector: list[float], encoding: str) -> struct_pb2.Value:
    if encoding == "base64":
        return struct_pb2.Value(string_value=float32_base64(vector))
    listed = struct_pb2.Value()
    listed.list_value.values.extend(struct_pb2.Value(number_value=x) for x in vector)
    return listed


async def run_pool(requests: list[PoolRequest], engine: Engine) -> list[PoolOutput]:
    """Every input pooled at once (the engine batches them); the first
    error, or the call's cancellation, cancels the others."""
    tasks = [asyncio.ensure_future(engine.pool(r)) for r in requests]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:  # the first error (or the call's cancellation) ends the others
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _pooled(req: Any, response: Any, engine: Engine, settings: ServerSettings, *,
                  offload: Offload, task: str | None, served_model: str,
                  caller: Caller) -> tuple[Any, PoolPlan, list[PoolOutput]]:
    """The request planned (off the event loop when heavy, a request's own
    template within its time bound: inference/offload.py) and run; its
    response (of type `response`) with the header and usage every pooling
    answer has, and the outputs."""
    plan = await offload.prepare(req, lambda: build_pool_plan(
        req, engine, settings, task=task, served_model=served_model, caller=caller))
    found = await run_pool(plan.requests, engine)
    tokens = sum(len(r.prompt_token_ids) for r in plan.requests)
    resp = response(id=plan.id, object="list", created=int(time.time()), model=plan.model,
                    usage=common_pb2.Usage(prompt_tokens=tokens, completion_tokens=0,
                                           total_tokens=tokens))
    return resp, plan, found


async def create_embedding(
    req: embeddings_pb2.CreateEmbeddingRequest, engine: Engine, settings: ServerSettings, *,
    served_model: str, offload: Offload, caller: Caller,
) -> embeddings_pb2.CreateEmbeddingResponse:
    resp, plan, found = await _pooled(req, embeddings_pb2.CreateEmbeddingResponse, engine,
                                      settings, task="embed", served_model=served_model,
                                      offload=offload, caller=caller)
    for i, out in enumerate(found):
        resp.data.add(index=i, object="embedding", embedding=_value(out.data, plan.encoding))
    return resp


async def pool(
    req: embeddings_pb2.PoolRequest, engine: Engine, settings: ServerSettings, *,
    served_model: str, offload: Offload, caller: Caller,
) -> embeddings_pb2.PoolResponse:
    resp, plan, found = await _pooled(req, embeddings_pb2.PoolResponse, engine, settings,
                                      task=None, served_model=served_model, offload=offload,
                                      caller=caller)
    for i, out in enumerate(found):
        if out.rows is not None and plan.encoding == "float":  # one list per token
            data = struct_pb2.Value()
            data.list_value.values.extend(_value(row, "float") for row in out.rows)
        else:
            data = _value(out.data, plan.encoding)
        resp.data.add(index=i, object="pooling", data=data)
    return resp


async def classify(
    req: embeddings_pb2.ClassifyRequest, engine: Engine, settings: ServerSettings, *,
    served_model: str, offload: Offload, caller: Caller,
) -> embeddings_pb2.ClassifyResponse:
    resp, _, found = await _pooled(req, embeddings_pb2.ClassifyResponse, engine, settings,
                                   task="classify", served_model=served_model,
                                   offload=offload, caller=caller)
    for i, out in enumerate(found):
        item = resp.data.add(index=i, probs=out.data, num_classes=len(out.data))
        if out.label is not None:
            item.label = out.label
    return resp
