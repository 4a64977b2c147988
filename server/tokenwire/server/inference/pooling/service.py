"""CreateEmbedding, Classify and Pool: the plan's inputs pooled together (one
engine request each, run at once so the engine batches them; one failing
cancels the others), answered in OpenAI's / vLLM's shapes: `data[i]` for
input i — an embedding as numbers or (base64) its little-endian float32
bytes; a classification as its class scores and the top class's label; a
/pooling output as numbers, one list per token (token-level tasks: the
engine's array turned into numbers only here, off the event loop when
many; refused before it runs when it cannot fit one message), or base64 of
all its float32 values."""

from __future__ import annotations

import asyncio
import base64
import struct
import time
from collections.abc import Awaitable
from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core.domain import Caller, Engine
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.pooling import PoolOutput, PoolRequest
from tokenwire.server.inference.data_plane import DataPlane
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


def prepare(plane: DataPlane, req: Any, caller: Caller, task: str | None
            ) -> Awaitable[PoolPlan]:
    """The plan of a /v1/embeddings, /classify or /pooling body (`task`:
    the route's, None: the body's), prepared off the event loop when heavy
    (a request's own template within its time bound: inference/offload.py)."""
    return plane.offload.prepare(req, lambda: build_pool_plan(
        req, plane.engine, plane.settings, task=task, served_model=plane.served_model,
        caller=caller))


def header(plan: PoolPlan, response: Any, found: list[PoolOutput]) -> Any:
    """A response of type `response` with the header and usage every pooling
    answer has."""
    tokens = sum(len(r.prompt_token_ids) for r in plan.requests)
    return response(id=plan.id, object="list", created=int(time.time()), model=plan.model,
                    usage=common_pb2.Usage(prompt_tokens=tokens, completion_tokens=0,
                                           total_tokens=tokens))


def embedding_response(plan: PoolPlan, found: list[PoolOutput]
                       ) -> embeddings_pb2.CreateEmbeddingResponse:
    resp = header(plan, embeddings_pb2.CreateEmbeddingResponse, found)
    for i, out in enumerate(found):
        resp.data.add(index=i, object="embedding", embedding=_value(out.data, plan.encoding))
    return resp  # type: ignore[no-any-return]


def _rows_value(rows: Any, encoding: str) -> struct_pb2.Value:
    """A token-level output (the engine's array) in the response: a list
    per token, or base64 of all its float32 values in order."""
    if encoding == "base64":
        return struct_pb2.Value(string_value=base64.b64encode(
            rows.astype("<f4").tobytes()).decode())
    data = struct_pb2.Value()
    data.list_value.values.extend(_value(row, "float") for row in rows.tolist())
    return data


# The bytes one number of a token-level output takes in the response at
# least: a float in its row's list (a Value of 8 bytes and its tag, framed
# in the list: 11); in base64, its 4 float32 bytes as 4/3 characters.
FLOAT_BYTES = 11
ROWS_INLINE = 8192  # numbers of token-level rows put in the response on the event loop


async def _rows_fit(plan: PoolPlan, engine: Engine, limit: int) -> int:
    """Refuse, before the engine runs, a token-level task whose rows (every
    input's tokens x the task's numbers per token, as they serialize) cannot
    fit one response message; the numbers they hold (0: not token-level)."""
    first = plan.requests[0]
    width = await engine.token_width(first.task, first.dimensions)
    if not width:
        return 0
    tokens = sum(len(r.prompt_token_ids) for r in plan.requests)
    numbers = tokens * width
    least = (numbers * FLOAT_BYTES if plan.encoding == "float"
             else -(-numbers * 4 // 3))
    if least > limit:
        param = plan.param
        task = first.task or "the model's token-level task"
        per = ("11 bytes a number as floats; encoding_format base64 takes 16/3"
               if plan.encoding == "float" else "16/3 bytes a number in base64")
        raise InvalidArgument(
            f"{param}: the output would hold {tokens} tokens x {width} numbers per token "
            f"({task}), at least {least} bytes "
            f"({per}), more than the {limit}-byte message limit; send fewer or shorter "
            "inputs", param=param, reason="RESPONSE_TOO_LARGE")
    return numbers


async def rows_fit(plane: DataPlane, plan: PoolPlan) -> PoolPlan:
    """/pooling's plan, refused before it runs when a token-level task's
    rows cannot fit one message; the numbers they hold noted (`numbers`)."""
    plan.numbers = await _rows_fit(plan, plane.engine, plane.settings.max_message_bytes)
    return plan


async def pool_response(plane: DataPlane, plan: PoolPlan, found: list[PoolOutput]
                        ) -> embeddings_pb2.PoolResponse:
    """/pooling's answer: its rows put in the response off the event loop when many."""
    resp = header(plan, embeddings_pb2.PoolResponse, found)

    def fill() -> embeddings_pb2.PoolResponse:
        for i, out in enumerate(found):
            data = (_value(out.data, plan.encoding) if out.rows is None
                    else _rows_value(out.rows, plan.encoding))
            resp.data.add(index=i, object="pooling", data=data)
        return resp  # type: ignore[no-any-return]

    return await plane.offload.run(fill, own_template=False, heavy=plan.numbers > ROWS_INLINE)


def classify_response(plan: PoolPlan, found: list[PoolOutput]) -> embeddings_pb2.ClassifyResponse:
    resp = header(plan, embeddings_pb2.ClassifyResponse, found)
    for i, out in enumerate(found):
        item = resp.data.add(index=i, probs=out.data, num_classes=len(out.data))
        if out.label is not None:
            item.label = out.label
    return resp  # type: ignore[no-any-return]
