"""Two serving processes over one real vLLM engine core (--api-server-count
2, vLLM's multi-API-server mode): connections land on both, both generate
the same greedy ids from the shared engine, control calls sent to either
act on the shared engine and show in both (process 0 runs them; the other
relays), a LoRA adapter loaded, reloaded and unloaded through either is
served (and then refused) by both with one attribution, and SIGTERM stops
everything, engine core included. With `--otlp-traces-endpoint` (an
in-process collector, tests/otlp.py) both serving processes trace: each
call one trace, vLLM's `llm_request` span under its process's server span.

One engine start for the module (docs/architecture.md, "Testing"): the
tracing test runs first and changes nothing; the last test pauses, updates
weights, loads LoRA and stops the server (its clean exit is checked there)."""

from __future__ import annotations

import collections.abc
import re
import uuid
from pathlib import Path

import grpc
import psutil
import pytest

from tests.engine.checkpoints import build_adapter
from tests.otlp import FAST_EXPORT, Collector
from tests.rpc import chat_request
from tests.servers import ROOT, ProcessServer
from tokenwire.v1 import control_pb2, control_pb2_grpc, generate_pb2, models_pb2, service_pb2_grpc

TINY = str(ROOT / ".models" / "tiny-random-llama")
CHAT = "tokenwire.v1.TokenwireService/CreateChatCompletion"


@pytest.fixture(scope="module")
def traced() -> collections.abc.Iterator[tuple[ProcessServer, Collector]]:
    """The module's one server (two serving processes) and its collector."""
    if not (Path(TINY) / "config.json").exists():
        pytest.skip("make tiny-model")
    collector = Collector().start()
    with pytest.MonkeyPatch.context() as env:  # the server's and vLLM's exporters
        for name, value in FAST_EXPORT.items():
            env.setenv(name, value)
        try:
            server = ProcessServer([
                "--model", TINY, "--api-server-count", "2", "--no-warmup",
                "--kv-cache-bytes", str(128 << 20), "--enable-control",
                "--weight-version", "v1", "--enable-lora", "--max-lora-rank", "8",
                "--max-num-seqs", "96", "--otlp-traces-endpoint", collector.endpoint,
            ]).start()
        except BaseException:
            collector.stop()
            raise
    try:
        yield server, collector
    finally:
        server.stop(120)  # stopped already by the last test unless it failed early
        collector.stop()


def test_every_serving_process_traces_over_one_engine_core(traced) -> None:
    """`--api-server-count 2` on the real engine: each serving process
    exports its own server spans, and each call's vLLM `llm_request` span
    (from that process's engine client) is the child of its server span."""
    server, collector = traced
    traces = [uuid.uuid4().hex for _ in range(16)]
    parent = uuid.uuid4().hex[:16]
    for trace_id in traces:  # each on its own connection: the kernel spreads them
        with grpc.insecure_channel(server.address, options=[
                ("grpc.use_local_subchannel_pool", 1)]) as ch:
            resp = service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
                chat_request(max_tokens=2, ignore_eos=True), timeout=120,
                metadata=(("traceparent", f"00-{trace_id}-{parent}-01"),))
            assert resp.usage.completion_tokens == 2
    wanted = set(traces)
    spans = collector.wait_for(lambda spans: wanted <= {
        s.trace_id for s in spans if s.name == "llm_request"}, timeout=60)
    processes = set()
    for trace_id in traces:
        (server_span,) = [s for s in spans if s.trace_id == trace_id and s.name == CHAT]
        (engine_span,) = [s for s in spans
                          if s.trace_id == trace_id and s.name == "llm_request"]
        assert server_span.parent_span_id == parent
        assert engine_span.parent_span_id == server_span.span_id
        processes.add(server_span.resource["tokenwire.process_index"])
    assert processes == {0, 1}
    assert server.proc is not None and server.proc.poll() is None, server.log_tail()


def test_two_serving_processes_share_one_engine_core(traced, tmp_path: Path) -> None:
    server, _ = traced
    channels: dict[str, grpc.Channel] = {}  # one open channel per serving process
    try:
        by_worker: dict[str, list[list[int]]] = {}
        for _ in range(12):
            ch = grpc.insecure_channel(server.address,
                                       options=[("grpc.use_local_subchannel_pool", 1)])
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            worker = stub.GetStats(models_pb2.GetStatsRequest(), timeout=30).worker_id
            resp = stub.Generate(_greedy(), timeout=120)
            by_worker.setdefault(worker, []).append(list(resp.choices[0].token_ids))
            if worker in channels:
                ch.close()
            else:
                channels[worker] = ch
        assert len(by_worker) == 2, by_worker.keys()
        outputs = [ids for runs in by_worker.values() for ids in runs]
        assert all(ids == outputs[0] and len(ids) == 6 for ids in outputs)
        _control_across_processes(list(channels.values()), outputs[0])
        _lora_across_processes(list(channels.values()), outputs[0],
                               build_adapter(TINY, tmp_path / "adapter"))
        # One engine core, shared: vLLM tags its log lines with the core's pid.
        cores = set(re.findall(r"\(EngineCore[^ ]* pid=(\d+)\)", server.log_tail(10**7)))
        assert len(cores) == 1, cores
    finally:
        for ch in channels.values():
            ch.close()
        code = server.stop(120)
    assert code == 0, server.log_tail()
    assert server.proc is not None and not psutil.pid_exists(server.proc.pid)


def _greedy() -> generate_pb2.GenerateRequest:
    return generate_pb2.GenerateRequest(
        token_ids=[1, 40, 41, 42], sampling_params={"max_tokens": 6, "temperature": 0})


def _control_across_processes(channels: list[grpc.Channel], greedy: list[int]) -> None:
    control_a, control_b = (control_pb2_grpc.ControlServiceStub(ch) for ch in channels)
    infer_a, infer_b = (service_pb2_grpc.TokenwireServiceStub(ch) for ch in channels)
    # Pause through one process: the other answers paused too.
    control_b.Pause(control_pb2.PauseRequest(mode="keep"), timeout=60)
    assert control_a.IsPaused(control_pb2.IsPausedRequest(), timeout=30).is_paused
    control_a.Resume(control_pb2.ResumeRequest(), timeout=60)
    assert not control_b.IsPaused(control_pb2.IsPausedRequest(), timeout=30).is_paused
    # Reload the same weights as v2 through one process; the other serves v2
    # at once (x-min-weight-version), its tokens attributed to v2 by the
    # shared engine core, with the same greedy ids.
    updated = control_a.UpdateWeightsFromPath(
        control_pb2.UpdateWeightsFromPathRequest(path=TINY, weight_version="v2"), timeout=300)
    assert updated.state.weight_version == "v2" and not updated.state.paused
    resp = infer_b.Generate(_greedy(), metadata=(("x-min-weight-version", "v2"),), timeout=120)
    choice = resp.choices[0]
    assert list(choice.token_ids) == greedy
    assert [(s.version, s.start, s.end) for s in choice.weight_versions] == [("v2", 0, 6)]
    stats = [s.GetStats(models_pb2.GetStatsRequest(), timeout=30) for s in (infer_a, infer_b)]
    assert [s.weight_version for s in stats] == ["v2", "v2"]


def _lora_across_processes(channels: list[grpc.Channel], greedy: list[int],
                           adapter: Path) -> None:
    control_a, control_b = (control_pb2_grpc.ControlServiceStub(ch) for ch in channels)
    infers = [service_pb2_grpc.TokenwireServiceStub(ch) for ch in channels]
    with_lora = _greedy()
    with_lora.model = "tiny-sql"

    def both() -> list[tuple[list[int], set[str]]]:
        answers = [infer.Generate(with_lora, timeout=120).choices[0] for infer in infers]
        return [(list(c.token_ids), {s.version for s in c.weight_versions}) for c in answers]

    loaded = control_b.LoadLoraAdapter(control_pb2.LoadLoraAdapterRequest(
        lora_name="tiny-sql", lora_path=str(adapter)), timeout=120)
    assert list(loaded.lora_adapters) == ["tiny-sql"]
    (ids, labels), other = both()  # one load in the engine core: same ids, same label
    assert other == (ids, labels) and ids != greedy, (ids, greedy)
    (label,) = labels
    version, _, load = label.rpartition("+lora:tiny-sql@")
    assert version == "v2" and int(load) >= 1, label
    for infer in infers:  # both list it
        listed = infer.ListModels(models_pb2.ListModelsRequest(), timeout=30)
        assert "tiny-sql" in {m.id for m in listed.data}
    control_a.LoadLoraAdapter(control_pb2.LoadLoraAdapterRequest(
        lora_name="tiny-sql", lora_path=str(adapter), load_inplace=True), timeout=120)
    assert both() == [(ids, {f"v2+lora:tiny-sql@{int(load) + 1}"})] * 2
    control_b.UnloadLoraAdapter(control_pb2.UnloadLoraAdapterRequest(lora_name="tiny-sql"),
                                timeout=60)
    for infer in infers:
        with pytest.raises(grpc.RpcError) as exc:
            infer.Generate(with_lora, timeout=30)
        assert exc.value.code() == grpc.StatusCode.NOT_FOUND
        assert list(infer.Generate(_greedy(), timeout=120).choices[0].token_ids) == greedy
