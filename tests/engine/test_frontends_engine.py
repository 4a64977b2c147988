"""Two serving processes over one real vLLM engine core (--api-server-count
2, vLLM's multi-API-server mode): connections land on both, both generate
the same greedy ids from the shared engine, and SIGTERM stops everything,
engine core included."""

from __future__ import annotations

import re

import grpc
import psutil
import pytest

from tests.servers import ROOT, ProcessServer
from tokenwire.v1 import generate_pb2, models_pb2, service_pb2_grpc

pytestmark = pytest.mark.engine

TINY = str(ROOT / ".models" / "tiny-random-llama")


def test_two_serving_processes_share_one_engine_core() -> None:
    server = ProcessServer(["--model", TINY, "--api-server-count", "2", "--no-warmup",
                            "--kv-cache-bytes", str(128 << 20)]).start()
    try:
        by_worker: dict[str, list[list[int]]] = {}
        for _ in range(12):
            with grpc.insecure_channel(server.address,
                                       options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
                stub = service_pb2_grpc.TokenwireServiceStub(ch)
                worker = stub.GetStats(models_pb2.GetStatsRequest(), timeout=30).worker_id
                resp = stub.Generate(generate_pb2.GenerateRequest(
                    token_ids=[1, 40, 41, 42], sampling_params={"max_tokens": 6, "temperature": 0}),
                    timeout=120)
                by_worker.setdefault(worker, []).append(list(resp.choices[0].token_ids))
        assert len(by_worker) == 2, by_worker.keys()
        outputs = [ids for runs in by_worker.values() for ids in runs]
        assert all(ids == outputs[0] and len(ids) == 6 for ids in outputs)
        # One engine core, shared: vLLM tags its log lines with the core's pid.
        cores = set(re.findall(r"\(EngineCore[^ ]* pid=(\d+)\)", server.log_tail(10**7)))
        assert len(cores) == 1, cores
    finally:
        code = server.stop(120)
    assert code == 0, server.log_tail()
    assert server.proc is not None and not psutil.pid_exists(server.proc.pid)
