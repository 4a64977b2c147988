"""The registry of public fronts: the one place an endpoint is wired.

Every front is one object (inference/front.py's `Front`) living in its own
package: chat, completion, generate and SGLang's generate (`RequestKind`s),
the Messages and Responses APIs (run as a chat: the chat kind handed in,
as kinds never import one another), each pooling route (pooling/kind.py),
and the fronts whose answer is their preparation (renders, token counts,
tokenize), and vLLM's gRPC engine service (smg's router: vllm_grpc/).
`FRONTS` names, per front, the RPCs that serve it; the api/ adapters
build TokenwireService's, EventStreamService's and VllmEngine's handlers from
it (api/fronts.py), tools/gen_routes.py the gateway's stream and JSON
routes, and a test checks every front's shared rules from it.

A new front: its package (request reading, plan, run, stream, wire
codecs), its RPCs in the proto, and one `Entry` line here.

`KINDS` are the kinds a Session runs (SessionStart's `request` oneof,
SessionResponse's `<name>_chunk` / `<name>_result`)."""

from __future__ import annotations

from typing import Any

from tokenwire.server.core.domain import Caller
from tokenwire.server.inference.anthropic.kind import AnthropicKind
from tokenwire.server.inference.chat.kind import CHAT
from tokenwire.server.inference.completion.kind import COMPLETION
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.front import AnyFront, Entry, PreparedFront
from tokenwire.server.inference.generate.kind import GENERATE
from tokenwire.server.inference.generate.sglang import FINISH_SESSION, SGLANG
from tokenwire.server.inference.kind_base import AnyKind
from tokenwire.server.inference.pooling.kind import (
    CLASSIFY,
    COHERE_EMBED,
    EMBEDDINGS,
    POOL,
    RERANK,
    SCORE,
)
from tokenwire.server.inference.responses.kind import ResponsesKind
from tokenwire.server.inference.vllm_grpc.kind import ENGINE, ENGINE_EMBED

ANTHROPIC = AnthropicKind(CHAT)  # Anthropic's Messages API, run as a chat
RESPONSES = ResponsesKind(CHAT)  # OpenAI's Responses API, run as a chat


def _renders(kind: Any) -> AnyFront:
    """vLLM's /render of `kind`'s API: the Generate request(s) it runs as."""
    async def render(plane: DataPlane, req: Any, caller: Caller) -> Any:
        return await kind.render(plane, req, caller=caller)
    return PreparedFront(f"{kind.name}_render", render)


async def _count_tokens(plane: DataPlane, req: Any, caller: Caller) -> Any:
    return await ANTHROPIC.count_tokens(plane, req, caller=caller)


async def _tokenize(plane: DataPlane, req: Any, caller: Caller) -> Any:
    return await plane.tokenize(req)


async def _detokenize(plane: DataPlane, req: Any, caller: Caller) -> Any:
    return plane.detokenize(req)


FRONTS: tuple[Entry, ...] = (
    Entry(CHAT, unary="CreateChatCompletion", stream="StreamChatCompletion",
          events="StreamChatCompletionEvents", json="CreateChatCompletionJson"),
    Entry(_renders(CHAT), unary="RenderChatCompletion"),
    Entry(COMPLETION, unary="CreateCompletion", stream="StreamCompletion",
          events="StreamCompletionEvents", json="CreateCompletionJson"),
    Entry(_renders(COMPLETION), unary="RenderCompletion"),
    Entry(GENERATE, unary="Generate", stream="StreamGenerate",
          events="StreamGenerateEvents", json="GenerateJson"),
    Entry(SGLANG, unary="SglangGenerate"),
    Entry(FINISH_SESSION, unary="FinishSession"),
    Entry(ANTHROPIC, unary="CreateMessage", stream="StreamMessage", events="StreamMessageEvents",
          json="CreateMessageJson"),
    Entry(PreparedFront("anthropic_count_tokens", _count_tokens), unary="CountMessageTokens"),
    Entry(_renders(ANTHROPIC), unary="RenderMessage"),
    Entry(RESPONSES, unary="CreateResponse", stream="StreamResponse",
          events="StreamResponseEvents", json="CreateResponseJson"),
    Entry(_renders(RESPONSES), unary="RenderResponse"),
    Entry(EMBEDDINGS, unary="CreateEmbedding"),
    Entry(CLASSIFY, unary="Classify"),
    Entry(POOL, unary="Pool"),
    Entry(COHERE_EMBED, unary="CohereEmbed"),
    Entry(SCORE, unary="Score"),
    Entry(RERANK, unary="Rerank"),
    Entry(PreparedFront("tokenize", _tokenize), unary="Tokenize"),
    Entry(PreparedFront("detokenize", _detokenize), unary="Detokenize"),
    Entry(ENGINE, engine_stream="Generate"),  # vllm.grpc.engine.VllmEngine (smg)
    Entry(ENGINE_EMBED, engine_unary="Embed"),
)

KINDS: dict[str, AnyKind] = {kind.name: kind for kind in (CHAT, COMPLETION, GENERATE)}
