"""The one settings object of the server, and the CLI parser that fills it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
from typing import Any

# Field metadata: an engine fact. The serving layer reads these, but on the
# command line they are vLLM's own flags (--model, --max-model-len, ...),
# parsed by vLLM's argument machinery (engine_args.py); the fake engine takes
# the same flag names.
ENGINE = {"engine": True}


def _engine(default: object, help: str = "") -> Any:
    return dataclasses.field(default=default, metadata={**ENGINE, "help": help})


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """Everything the server needs to start. Defaults suit the CPU demo.

    tokenwire's own settings are plain fields (one flag each); the engine's
    are vLLM's flags, resolved into `engine_args` (the keyword arguments of
    vLLM's AsyncEngineArgs) with the few facts the serving layer needs
    mirrored in the ENGINE fields."""

    engine: str = "vllm"  # "vllm", or "fake" (deterministic, for tests and gateway work)
    fake_token_delay: float = 0.0  # seconds per token of the fake engine

    # Engine facts (vLLM's flags on the command line).
    model: str | None = _engine(None)  # None: the demo model built by `make model`
    served_model_name: str = _engine("")  # "" : the model folder's name
    max_model_len: int = _engine(2048)
    block_size: int = _engine(32)
    scheduling_policy: str = _engine("priority")  # "priority" is needed for `priority`
    reasoning_parser: str = _engine("")  # needed for max_thinking_tokens
    enable_lora: bool = _engine(False)
    # Every vLLM engine argument (AsyncEngineArgs keywords), resolved from
    # vLLM's flags, the platform defaults and tokenwire's defaults.
    engine_args: dict[str, Any] = dataclasses.field(default_factory=dict, metadata=ENGINE)
    warmup: bool = True

    # Control plane (ControlService): pause/resume, weight updates, LoRA.
    enable_control: bool = False
    admin_api_key: str = ""  # "" : control from loopback peers only; also $TOKENWIRE_ADMIN_API_KEY
    control_timeout_seconds: float = 600.0  # a control call without a gRPC deadline
    weight_version: str = ""  # the initial weight version ("" : vLLM's "default")
    lora_modules: tuple[str, ...] = ()  # NAME=PATH adapters loaded at start (needs --enable-lora)

    # Request limits.
    max_n: int = 16
    max_stop_token_ids: int = 256
    max_stop_strings: int = 16
    max_top_logprobs: int = 20
    trust_request_chat_template: bool = False  # requests may send their own Jinja template

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
    metrics_port: int = 0  # Prometheus /metrics on metrics_host:metrics_port; 0 = off
    metrics_host: str = "127.0.0.1"  # loopback by default: /metrics needs no key
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


# Flags vLLM's engine parser also has: one flag serves both (vLLM's).
SHARED_WITH_VLLM = frozenset({"log_level"})


def add_arguments(parser: Any, *, skip: frozenset[str] = frozenset()) -> None:
    """Add one flag per own settings field (``--grace-seconds`` for grace_seconds)."""
    defaults = ServerSettings()
    helps = {
        "engine": "vllm (default) or fake (a deterministic test engine, no vLLM)",
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
        "trust_request_chat_template": "accept `chat_template` in requests (Jinja runs on the "
                                       "server: trusted callers only; vLLM's flag of the same name)",
        "enable_control": "serve the ControlService (pause/resume, weight updates, cache reset, LoRA)",
        "admin_api_key": "key for the ControlService (also $TOKENWIRE_ADMIN_API_KEY); empty: loopback callers only",
        "control_timeout_seconds": "longest a control call runs when the caller set no deadline",
        "weight_version": "the weight version tokens are attributed to at start (default: vLLM's 'default')",
        "lora_modules": "LoRA adapters to load at start, NAME=PATH ... (with --enable-lora); "
                        "requests select one by `model`",
    }
    for field in dataclasses.fields(ServerSettings):
        if field.metadata.get("engine") or field.name in skip:
            continue  # vLLM's flag (engine_args.py), or the fake engine's
        flag = "--" + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if isinstance(default, bool):
            parser.add_argument(
                flag, dest=field.name, default=default, action=argparse.BooleanOptionalAction,
                help=helps.get(field.name, ""),
            )
        elif isinstance(default, tuple):
            parser.add_argument(flag, dest=field.name, nargs="*", default=default,
                                help=helps.get(field.name, ""))
        else:
            typ = type(default) if default is not None else str
            parser.add_argument(flag, dest=field.name, type=typ, default=default,
                                help=helps.get(field.name, ""))


def own_fields() -> list[dataclasses.Field[Any]]:
    """tokenwire's own settings (one flag each), not the engine's."""
    return [f for f in dataclasses.fields(ServerSettings) if not f.metadata.get("engine")]


def from_namespace(ns: argparse.Namespace, **engine_facts: Any) -> ServerSettings:
    """tokenwire's settings from `ns`; the engine facts given by the caller."""
    values = {f.name: getattr(ns, f.name) for f in own_fields()}
    values.update(engine_facts)
    values["lora_modules"] = tuple(values["lora_modules"])
    if not values["api_key"]:
        values["api_key"] = os.environ.get("TOKENWIRE_API_KEY", "")
    if not values["admin_api_key"]:
        values["admin_api_key"] = os.environ.get("TOKENWIRE_ADMIN_API_KEY", "")
    return ServerSettings(**values)
