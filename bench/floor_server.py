"""The floor under any Python gRPC streaming server: a bare grpc.aio server
(uvloop, like tokenwire) that answers StreamChatCompletion with prebuilt-shape
chunks, one per event-loop turn, and does nothing else. `bench.frontend`
compares tokenwire's CPU per token with this. `--small`: chunks with the
choice only (no id, object, created, model or fingerprint: about 10 bytes,
E's size), to see what the chunk's size costs apart from its count.

    python -m bench.floor_server --port 50099 [--small]
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator

import grpc

from tokenwire.v1 import chat_pb2, service_pb2_grpc


class FloorServicer(service_pb2_grpc.TokenwireServiceServicer):
    def __init__(self, small: bool = False):
        self.small = small

    async def StreamChatCompletion(  # type: ignore[override]
        self, request: chat_pb2.CreateChatCompletionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[chat_pb2.StreamChatCompletionResponse]:
        for i in range(request.max_tokens):
            chunk = chat_pb2.StreamChatCompletionResponse() if self.small else (
                chat_pb2.StreamChatCompletionResponse(
                    id="chatcmpl-floor", object="chat.completion.chunk", created=1,
                    model="floor", system_fingerprint="tokenwire-floor",
                ))
            choice = chunk.choices.add(index=0)
            choice.delta.content = "a"
            choice.token_ids.append(100 + i)
            await asyncio.sleep(0)
            yield chunk


async def serve(port: int, small: bool = False) -> None:
    server = grpc.aio.server()
    service_pb2_grpc.add_TokenwireServiceServicer_to_server(FloorServicer(small), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--small", action="store_true", help="chunks with the choice only")
    ns = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    asyncio.run(serve(ns.port, ns.small))


if __name__ == "__main__":
    main()
