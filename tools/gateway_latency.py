"""Added latency of the gateway: the same short request as direct gRPC and
as REST through Envoy, side by side (interleaved), median of N each.

Usage (a server and its gateway running, e.g. `make run`):
    python tools/gateway_latency.py [--grpc 127.0.0.1:50051] [--rest http://127.0.0.1:8080] [-n 20]

Three ways (direct gRPC, gRPC through Envoy, REST through Envoy) for two
requests: a chat completion of one token (greedy), and ListModels /
GET /v1/models (no engine work: the serving-layer cost alone). Both
clients keep their connection open, as real clients do.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import grpc
import httpx
from google.protobuf import json_format

from tokenwire.v1 import chat_pb2, models_pb2, service_pb2_grpc


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def measure(n: int, warmup: int, *calls: Callable[[], object]) -> list[list[float]]:
    """Time each call n times, interleaved (round i starts with call i % k)."""
    for _ in range(warmup):
        for call in calls:
            call()
    times: list[list[float]] = [[] for _ in calls]
    for i in range(n):
        for j in range(len(calls)):
            k = (i + j) % len(calls)
            times[k].append(timed(calls[k]))
    return times


def report(name: str, times: list[list[float]]) -> None:
    direct, via_envoy, rest = (statistics.median(t) for t in times)
    # Paired: each round measures the three back to back, so the median of
    # the per-round differences cancels most of the engine's own jitter.
    paired_via = statistics.median(v - d for d, v in zip(times[0], times[1], strict=True))
    paired_rest = statistics.median(r - d for d, r in zip(times[0], times[2], strict=True))
    print(f"{name}: median of {len(times[0])} (added: median of paired differences)")
    print(f"  direct gRPC          {direct:8.2f} ms")
    print(f"  gRPC through Envoy   {via_envoy:8.2f} ms   added {paired_via:+7.2f} ms")
    print(f"  REST through Envoy   {rest:8.2f} ms   added {paired_rest:+7.2f} ms  <- the gateway")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--grpc", default="127.0.0.1:50051")
    parser.add_argument("--rest", default="http://127.0.0.1:8080")
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    ns = parser.parse_args(argv)

    envoy_address = ns.rest.split("://", 1)[-1].rstrip("/")
    with grpc.insecure_channel(ns.grpc) as channel, grpc.insecure_channel(envoy_address) as envoy, \
            httpx.Client(base_url=ns.rest, timeout=120) as http:
        stub = service_pb2_grpc.TokenwireServiceStub(channel)
        via = service_pb2_grpc.TokenwireServiceStub(envoy)
        model = stub.ListModels(models_pb2.ListModelsRequest(), timeout=10).data[0].id
        body = {"model": model, "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 1, "temperature": 0}
        request = json_format.ParseDict(body, chat_pb2.CreateChatCompletionRequest())

        def chat_grpc() -> object:
            return stub.CreateChatCompletion(request, timeout=120)

        def chat_via_envoy() -> object:
            return via.CreateChatCompletion(request, timeout=120)

        def chat_rest() -> object:
            r = http.post("/v1/chat/completions", json=body)
            r.raise_for_status()
            return r.json()

        def models_grpc() -> object:
            return stub.ListModels(models_pb2.ListModelsRequest(), timeout=10)

        def models_via_envoy() -> object:
            return via.ListModels(models_pb2.ListModelsRequest(), timeout=10)

        def models_rest() -> object:
            r = http.get("/v1/models")
            r.raise_for_status()
            return r.json()

        print(f"model {model}; gRPC {ns.grpc}; REST {ns.rest}")
        report("chat completion, max_tokens=1",
               measure(ns.n, ns.warmup, chat_grpc, chat_via_envoy, chat_rest))
        report("list models (no engine work)",
               measure(ns.n, ns.warmup, models_grpc, models_via_envoy, models_rest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
