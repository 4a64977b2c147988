"""The one way an interceptor wraps a gRPC method handler: `wrap_handler`
rebuilds a handler of any cardinality (unary_unary, unary_stream,
stream_unary, stream_stream), its (de)serializers kept, so that each call
first awaits `start(request, context)` (which may refuse the call by
raising, as context.abort does) and, when `start` returns one, ends with
`finish(failed)`: the exception that ended the call, or None (GeneratorExit
when the consumer stopped a stream early, CancelledError when the call was
cancelled); the exception then goes on. A streamed response is iterated
under `aclosing`, so the inner stream is closed however the call ends.
`HandlerInterceptor`: an interceptor that holds only its choice of handler."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import grpc

# Called once as a call ends, with the exception that ended it (None: none).
Finish = Callable[[BaseException | None], None]
# Awaited as a call starts, with its request (a streaming call: the request
# iterator) and context; refuses the call by raising.
Start = Callable[[Any, grpc.aio.ServicerContext], Awaitable[Finish | None]]


@contextlib.contextmanager
def _ending(finish: Finish | None) -> Iterator[None]:
    failed: BaseException | None = None
    try:
        yield
    except BaseException as exc:
        failed = exc
        raise
    finally:
        if finish is not None:
            finish(failed)


def wrap_handler(handler: grpc.RpcMethodHandler, start: Start) -> grpc.RpcMethodHandler:
    """`handler`, each call of it between `start` and the `finish` it returns."""
    kwargs: dict[str, Any] = dict(request_deserializer=handler.request_deserializer,
                                  response_serializer=handler.response_serializer)
    if handler.unary_unary or handler.stream_unary:
        inner = handler.unary_unary or handler.stream_unary

        async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            with _ending(await start(request, context)):
                return await inner(request, context)

        make = (grpc.unary_unary_rpc_method_handler if handler.unary_unary
                else grpc.stream_unary_rpc_method_handler)
        return make(unary, **kwargs)
    inner_stream = handler.unary_stream or handler.stream_stream

    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        with _ending(await start(request, context)):
            items = inner_stream(request, context)
            closing = (contextlib.aclosing(items) if hasattr(items, "aclose")
                       else contextlib.nullcontext(items))
            async with closing as opened:
                async for item in opened:
                    yield item

    make_s = (grpc.unary_stream_rpc_method_handler if handler.unary_stream
              else grpc.stream_stream_rpc_method_handler)
    return make_s(stream, **kwargs)


class HandlerInterceptor(grpc.aio.ServerInterceptor):
    """An interceptor that keeps, wraps or replaces each method's handler
    (`intercept`); a method without one (unknown) passes untouched."""

    def intercept(self, handler: grpc.RpcMethodHandler,
                  details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        raise NotImplementedError

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        return handler if handler is None else self.intercept(handler, details)
