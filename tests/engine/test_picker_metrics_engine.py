"""What llm-d's endpoint picker scrapes by default (issue #44 item 3), on
tokenwire's --metrics-port with the real engine, under vLLM's names and
meanings (gateway-api-inference-extension v1.5.0's vLLM engine config,
core-metrics-extractor): vllm:num_requests_waiting, vllm:num_requests_running,
vllm:kv_cache_usage_perc, vllm:lora_requests_info (labels
running_lora_adapters, waiting_lora_adapters, max_lora) and
vllm:cache_config_info (labels block_size, num_gpu_blocks). As in vLLM,
vllm:lora_requests_info exists only with --enable-lora (vLLM registers it only
with a LoRA config), and has a sample once the engine has run a step. Also the
weight gauges (core/metrics.py WeightGauges) on the real engine.

The session's router_server (tests/conftest.py: the tiny random model with a
metrics port, LoRA on, weight version step-7), shared with the KV-events test."""

from __future__ import annotations

import time
import urllib.request

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import ROUTER_BLOCK as BLOCK
from tests.conftest import RouterServer
from tests.rpc import StreamReader, chat_request
from tests.servers import ProcessServer
from tokenwire.v1 import service_pb2_grpc

Sample = tuple[dict[str, str], float]


@pytest.fixture(scope="module")
def served(router_server: RouterServer) -> tuple[ProcessServer, int]:
    return router_server.server, router_server.metrics_port


def scrape(port: int) -> dict[str, list[Sample]]:
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(page):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_every_metric_the_picker_scrapes_exists_with_vllms_meaning(served) -> None:
    server, port = served
    with grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        reader = StreamReader(stub.StreamChatCompletion(chat_request(
            max_tokens=400, ignore_eos=True, return_token_ids=True), timeout=180))
        reader.wait_ids(2)
        deadline, running = time.monotonic() + 30, 0.0
        while time.monotonic() < deadline and not running:  # one request in the engine
            m = scrape(port)
            running = sum(v for _, v in m.get("vllm:num_requests_running", []))
            time.sleep(0.2)
        assert running == 1
        assert sum(v for _, v in m["vllm:num_requests_waiting"]) == 0
        usage = [v for _, v in m["vllm:kv_cache_usage_perc"]]
        assert usage and all(0 < v <= 1 for v in usage), usage  # a fraction, blocks in use
        reader.call.cancel()
    (cache_labels, one), *_ = m["vllm:cache_config_info"]
    assert one == 1 and cache_labels["block_size"] == str(BLOCK)
    assert int(cache_labels["num_gpu_blocks"]) > 0
    lora = m["vllm:lora_requests_info"]
    assert lora, "registered with --enable-lora, sampled once the engine ran a step"
    for labels, when in lora:
        assert {"running_lora_adapters", "waiting_lora_adapters", "max_lora"} <= labels.keys()
        assert labels["max_lora"] == "2" and when > 1e9  # vLLM's value: a timestamp
    # After the request: nothing running or waiting.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = scrape(port)
        if sum(v for _, v in m["vllm:num_requests_running"]) == 0:
            break
        time.sleep(0.2)
    assert sum(v for _, v in m["vllm:num_requests_running"]) == 0
    # The weight gauges (a router's endpoint attributes) on the real engine.
    assert m["tokenwire_weight_version_info"] == [({"version": "step-7"}, 1.0)]
    assert m["tokenwire_weight_version_number"] == [({"prefix": "step-"}, 7.0)]
    assert m["tokenwire_weight_version_lag_updates"] == [({}, 0.0)]
