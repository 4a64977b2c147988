"""CohereEmbed (vLLM's `POST /v2/embed`, Cohere's embed API v2) on an
embedding model, as vLLM serves it: `texts` (images and mixed inputs are
not served), each embedded as its own input; `input_type` picks the
model's prompt prefix (its task instructions: rendered as the system
message of a conversation when the model has a chat template, else put
before the text; a type the model does not define is refused);
`truncate` END / START cut each input to `max_tokens` (else the window)
at the end / the start, NONE refuses an input over `max_tokens`;
`embedding_types` float, binary / ubinary (sign bits, 8 per byte, signed
or not: vLLM's packing), base64 (little-endian float32)."""

from __future__ import annotations

import dataclasses
from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Caller, Engine, RenderOptions
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.pooling import PoolOutput, PoolRequest
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.pooling.service import float32_base64
from tokenwire.server.inference.shared.identity import check_model, lora_of, new_request_id
from tokenwire.server.inference.shared.tenant_policy import check_priority
from tokenwire.v1 import embeddings_pb2

TYPES = ("float", "binary", "ubinary", "base64")
TRUNCATE = ("END", "START", "NONE")


def _check(req: embeddings_pb2.CohereEmbedRequest, engine: Engine, most: int) -> str | None:
    """The body's rules (vLLM's); the input type's prompt prefix."""
    if req.images or (req.HasField("inputs") and req.inputs.values):
        raise InvalidArgument("images and mixed inputs are not served: embed texts",
                              param="images" if req.images else "inputs",
                              reason="FEATURE_DISABLED")
    if not req.texts:
        raise InvalidArgument("texts must hold at least one text", param="texts",
                              reason="FIELD_REQUIRED")
    if len(req.texts) > most:
        raise InvalidArgument(f"texts: at most {most} per call (--max-completion-prompts)",
                              param="texts", reason="TOO_MANY_ITEMS")
    for kind in req.embedding_types:
        if kind not in TYPES:
            raise InvalidArgument(f"embedding_types: {kind!r} is not one of {list(TYPES)}",
                                  param="embedding_types", reason="VALUE_NOT_ALLOWED")
    if req.truncate and req.truncate not in TRUNCATE:
        raise InvalidArgument(f"truncate must be one of {list(TRUNCATE)}, got {req.truncate!r}",
                              param="truncate", reason="VALUE_NOT_ALLOWED")
    if req.HasField("max_tokens") and not 1 <= req.max_tokens <= engine.max_model_len:
        raise InvalidArgument(f"max_tokens must be 1..{engine.max_model_len} (the context "
                              "window)", param="max_tokens", reason="VALUE_OUT_OF_RANGE")
    if req.HasField("output_dimension") and req.output_dimension < 1:
        raise InvalidArgument("output_dimension must be at least 1", param="output_dimension",
                              reason="VALUE_OUT_OF_RANGE")
    if not req.HasField("input_type"):
        return None
    instructions = engine.task_instructions()
    if req.input_type not in instructions:
        have = (f"Supported values: {', '.join(sorted(instructions))}" if instructions else
                "This model does not define any input_type task instructions.")
        raise InvalidArgument(f"Unsupported input_type {req.input_type!r}. {have}",
                              param="input_type", reason="VALUE_NOT_ALLOWED")
    return instructions[req.input_type] or None


def _cut(req: embeddings_pb2.CohereEmbedRequest) -> tuple[int | None, str | None]:
    """vLLM's truncation of a Cohere body: (truncate_prompt_tokens, side)."""
    keep = req.max_tokens if req.HasField("max_tokens") else -1
    if req.truncate == "NONE":
        return None, None
    return keep, "left" if req.truncate == "START" else None


def _prompt(engine: Engine, text: str, prefix: str | None, cut: tuple[int | None, str | None],
            chat: bool) -> list[int]:
    truncate, side = cut
    if prefix is None or not chat:
        return engine.pooling_tokens((prefix or "") + text, add_special_tokens=True,
                                     truncate=truncate, side=side)
    # vLLM's: the prefix as the system message of a conversation, rendered;
    # its ids cut as an id list's are
    ids = engine.render_chat([{"role": "system", "content": prefix},
                              {"role": "user", "content": text}],
                             RenderOptions(add_generation_prompt=False))
    keep = engine.max_model_len if truncate == -1 else truncate
    if keep is not None and len(ids) > keep:
        ids = ids[len(ids) - keep:] if side == "left" else ids[:keep]
    return ids


def _packed(vectors: list[list[float]], signed: bool) -> list[list[int]]:
    """Sign bits, most significant first, 8 per byte (vLLM's packing; signed:
    each byte less 128)."""
    out = []
    for vector in vectors:
        if len(vector) % 8:
            raise InvalidArgument("embedding_types: binary types need a dimension that is a "
                                  f"multiple of 8, got {len(vector)}",
                                  param="embedding_types", reason="VALUE_NOT_ALLOWED")
        row = []
        for i in range(0, len(vector), 8):
            byte = 0
            for x in vector[i:i + 8]:
                byte = (byte << 1) | (x >= 0)
            row.append(byte - 128 if signed else byte)
        out.append(row)
    return out


def _typed(vectors: list[list[float]], kinds: list[str]) -> struct_pb2.Struct:
    out: dict[str, Any] = {}
    for kind in kinds:
        if kind == "float":
            out[kind] = vectors
        elif kind in ("binary", "ubinary"):
            out[kind] = _packed(vectors, signed=kind == "binary")
        else:
            out[kind] = [float32_base64(x) for x in vectors]
    made = struct_pb2.Struct()
    made.update(out)
    return made


def _requests(req: embeddings_pb2.CohereEmbedRequest, engine: Engine,
              settings: ServerSettings, *, served_model: str, caller: Caller,
              ) -> tuple[str, list[PoolRequest]]:
    """The body checked, each text's prompt made (rendered, tokenized): the
    response id and one PoolRequest per text."""
    model = check_model(req.model, served_model, engine.lora_names())
    prefix = _check(req, engine, settings.max_completion_prompts)
    cut = _cut(req)
    longest = engine.max_model_len * (1 if cut[0] is None else 4)
    chat = prefix is not None and engine.has_chat_template()
    response_id = new_request_id("embd", req.request_id, caller.request_id)
    common = {"task": "embed", "priority": check_priority(req.priority, settings, caller),
              "lora": lora_of(model, served_model), "tenant": caller.tenant,
              "dimensions": req.output_dimension if req.HasField("output_dimension") else None}
    requests = []
    for i, text in enumerate(req.texts):
        param = f"texts[{i}]"
        v.text_fits(param, len(text) + len(prefix or ""), longest, engine.max_token_chars)
        ids = _prompt(engine, text, prefix, cut, chat)
        if req.truncate == "NONE" and req.HasField("max_tokens") and len(ids) > req.max_tokens:
            raise InvalidArgument(f"{param}: input of {len(ids)} tokens exceeds max_tokens="
                                  f"{req.max_tokens} with truncate=NONE. Set truncate to END or "
                                  "START to allow truncation.", param="max_tokens",
                                  reason="PROMPT_TOO_LONG")
        v.prompt_fits(param, len(ids), engine.max_model_len, generates=False)
        requests.append(PoolRequest(request_id=f"{response_id}-{i}", prompt_token_ids=ids,
                                    **common))
    return response_id, requests


@dataclasses.dataclass
class CoherePlan:
    """A Cohere embed body's response id, its texts' requests, and the body."""

    id: str
    requests: list[PoolRequest]
    req: embeddings_pb2.CohereEmbedRequest


async def prepare(plane: DataPlane, req: embeddings_pb2.CohereEmbedRequest, caller: Caller
                  ) -> CoherePlan:
    """The texts' prompts, prepared off the event loop when heavy
    (inference/offload.py)."""
    response_id, requests = await plane.offload.prepare(req, lambda: _requests(
        req, plane.engine, plane.settings, served_model=plane.served_model, caller=caller))
    return CoherePlan(response_id, requests, req)


def respond(plan: CoherePlan, found: list[PoolOutput]) -> embeddings_pb2.CohereEmbedResponse:
    """The embeddings in Cohere's shape."""
    req = plan.req
    tokens = sum(len(r.prompt_token_ids) for r in plan.requests)
    resp = embeddings_pb2.CohereEmbedResponse(
        id=plan.id, texts=list(req.texts), response_type="embeddings_by_type",
        meta=embeddings_pb2.CohereMeta(
            api_version=embeddings_pb2.CohereApiVersion(version="2"),
            billed_units=embeddings_pb2.CohereBilledUnits(input_tokens=tokens,
                                                          image_tokens=0)))
    resp.embeddings.CopyFrom(_typed([out.data for out in found],
                                    list(req.embedding_types) or ["float"]))
    return resp
