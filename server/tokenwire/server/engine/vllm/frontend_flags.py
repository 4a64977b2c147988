"""vLLM's OpenAI-server flags (`vllm serve`'s FrontendArgs and
make_arg_parser) on `tokenwire serve`: each is honoured with vLLM's meaning
or refused with a message naming what to use instead (FRONTEND). A refused
flag given at vLLM's default changes nothing and passes, so a vLLM YAML
`--config` that spells defaults out still starts. Part of the engine
adapter (imports vLLM)."""

from __future__ import annotations

import argparse
from typing import Any

HONOURED = "honoured"

_GATEWAY = "the REST side is tokenwire's Envoy gateway (`tokenwire up` / `tokenwire gateway`, "
_FLEET = "use `tokenwire up --replicas N` or a fleet gateway (docs/fleet.md)"
_CORS = ("CORS is the gateway's: `tokenwire up --{0}` or `tokenwire gateway --{0}` "
         "(docs/gateway.md)")
_NO_LOG = "tokenwire logs no prompts or outputs (set --log-level)"

# dest -> HONOURED, or why it is refused and what to use instead.
FRONTEND: dict[str, str] = {
    # make_arg_parser's own
    "model_tag": HONOURED,  # `tokenwire serve MODEL`, as `vllm serve MODEL`
    "config": HONOURED,  # a vLLM YAML of flags (keys are flag names)
    "api_server_count": HONOURED,
    "headless": "multi-node data parallel is not supported: " + _FLEET,
    "grpc": "`tokenwire serve` is a gRPC server already (tokenwire.v1 on --port): drop --grpc",
    # tokenwire's own settings of the same name and meaning
    "lora_modules": HONOURED,
    "chat_template": HONOURED,
    "chat_template_content_format": HONOURED,
    "trust_request_chat_template": HONOURED,
    "default_chat_template_kwargs": HONOURED,
    "response_role": HONOURED,
    "enable_auto_tool_choice": HONOURED,
    "tool_call_parser": HONOURED,
    "tool_parser_plugin": HONOURED,
    "api_key": HONOURED,  # several values; $VLLM_API_KEY too
    # The listener of the command: `tokenwire serve`'s is gRPC (REST is the
    # gateway's: `tokenwire up --host/--port`, its servers' --grpc-port).
    "host": HONOURED,
    "port": HONOURED,
    "sse_keep_alive_interval": HONOURED,  # SSE streams (api/sse_keep_alive.py)
    "enable_prompt_tokens_details": HONOURED,  # usage.prompt_tokens_details: always reported
    "return_tokens_as_token_ids": HONOURED,  # the default of the request field
    "enable_force_include_usage": HONOURED,  # usage on every chat / completions stream
    # refused
    "trust_request_mm_kwargs": "per-request mm_processor_kwargs are not taken (images: "
                               "docs/multimodal.md): drop it",
    "exclude_tools_when_tool_choice_none": HONOURED,
    "tool_strict_level": HONOURED,
    "tool_server": "built-in tool servers are not supported: run tools in the client",
    "max_log_len": _NO_LOG,
    "enable_per_request_metrics": "not supported: tokenwire's metrics are on --metrics-port",
    "enable_server_load_tracking": "not supported: the in-flight count is on --metrics-port "
                                   "and in GetStats",
    "enable_tokenizer_info_endpoint": "not served: use the Tokenize / Detokenize RPCs",
    "enable_log_outputs": _NO_LOG,
    "enable_log_deltas": _NO_LOG,
    "cohere_is_reasoning_model": "the Cohere API is not served: drop it",
    "cohere_format": "the Cohere API is not served: drop it",
    "anthropic_disabled_thinking_effort": "not supported on tokenwire's Messages API: drop it",
    "log_error_stack": "use --log-level DEBUG",
    "tokens_only": "tokenwire serves token ids already (prompt ids in, token ids out): drop it",
    "enable_scale_out": _FLEET,
    "fingerprint_mode": "system_fingerprint is the weight version (--weight-version)",
    "fingerprint_value": "system_fingerprint is the weight version (--weight-version)",
    "grpc_port": "`tokenwire serve`'s gRPC listener is --port; REST is the gateway's "
                 "(`tokenwire up --port 8000 --grpc-port 50051`: REST and gRPC)",
    "data_parallel_supervisor_port": "vLLM's data-parallel supervisor is not used: " + _FLEET,
    "dp_supervisor_probe_interval_s": "vLLM's data-parallel supervisor is not used: " + _FLEET,
    "dp_supervisor_probe_timeout_s": "vLLM's data-parallel supervisor is not used: " + _FLEET,
    "dp_supervisor_probe_failure_threshold": "vLLM's data-parallel supervisor is not used: "
                                             + _FLEET,
    "uds": "Unix sockets are not supported: listen on --host 127.0.0.1 --port N",
    "uvicorn_log_level": "no uvicorn: " + _GATEWAY + "--gateway-log-level); --log-level here",
    "disable_uvicorn_access_log": "no uvicorn: " + _GATEWAY + "its access log)",
    "disable_access_log_for_endpoints": "no uvicorn: " + _GATEWAY + "its access log)",
    "h11_max_incomplete_event_size": "no uvicorn: " + _GATEWAY + "its limits)",
    "h11_max_header_count": "no uvicorn: " + _GATEWAY + "its limits)",
    "allow_credentials": _CORS.format("allow-credentials"),
    "allowed_origins": _CORS.format("allowed-origins"),
    "allowed_methods": _CORS.format("allowed-methods"),
    "allowed_headers": _CORS.format("allowed-headers"),
    # TLS of the command's listener (`tokenwire serve`: gRPC; `tokenwire up`:
    # the gateway's REST one); --ssl-cert-reqs 1 is the gateway's only.
    "ssl_keyfile": HONOURED,  # --tls-key
    "ssl_certfile": HONOURED,  # --tls-cert
    "ssl_ca_certs": HONOURED,
    "ssl_cert_reqs": HONOURED,
    "enable_ssl_refresh": "not supported: restart the server with the new --tls-cert/--tls-key",
    "ssl_ciphers": "not supported: gRPC's TLS ciphers are used",
    "root_path": "serve behind a proxy that strips the prefix (" + _GATEWAY + "docs/gateway.md)",
    "middleware": "no ASGI app: " + _GATEWAY + "extend its Envoy config)",
    "enable_request_id_headers": "X-Request-Id on responses is the gateway's: `tokenwire up "
                                 "--enable-request-id-headers` or `tokenwire gateway "
                                 "--enable-request-id-headers` (a caller's X-Request-Id names "
                                 "the request either way)",
    "disable_fastapi_docs": "no docs pages are served: drop it",
    "enable_offline_docs": "no docs pages are served: drop it",
    "enable_flash_late_interaction": "late interaction's MaxSim runs in the serving process "
                                     "(the same scores): drop it",
}


def vllm_frontend_actions() -> list[argparse.Action]:
    """The actions of `vllm serve`'s parser that are not engine flags."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    engine = FlexibleArgumentParser()
    AsyncEngineArgs.add_cli_args(engine)
    engine_dests = {a.dest for a in engine._actions}
    serve = make_arg_parser(FlexibleArgumentParser())
    return [a for a in serve._actions
            if a.dest not in engine_dests and not isinstance(a, argparse._HelpAction)]


def add_frontend_flags(parser: Any) -> None:
    """vLLM's frontend flags tokenwire's parser lacks, as vLLM defines them
    (so vLLM's command lines and YAML configs parse); refuse_frontend_flags
    then refuses those given off vLLM's default."""
    from vllm.engine.arg_utils import get_kwargs
    from vllm.entrypoints.launchers.cli_args import FrontendArgs

    have = set(parser._option_string_actions)
    kwargs = FrontendArgs._customize_cli_kwargs(get_kwargs(FrontendArgs))
    group = parser.add_argument_group(
        "vLLM's other server flags (a refused one says what to use instead; docs/engine.md)")
    refused: set[str] = set()
    for dest, spec in kwargs.items():
        flag = "--" + dest.replace("_", "-")
        if flag in have or dest not in FRONTEND:
            continue  # tokenwire's own flag of that name: honoured
        group.add_argument(flag, **{k: v for k, v in spec.items() if k != "help"})
        refused.add(dest)
    for flag, spec in (("--headless", {"action": "store_true", "default": False}),
                       ("--grpc", {"action": "store_true", "default": False})):
        if flag not in have:
            group.add_argument(flag, **spec)  # type: ignore[arg-type]
            refused.add(flag[2:])
    parser.tokenwire_refused = frozenset(d for d in refused if FRONTEND[d] != HONOURED)


def refuse_frontend_flags(parser: Any, ns: argparse.Namespace, given: set[str]) -> None:
    """SystemExit naming the first refused flag given off vLLM's default."""
    defaults = {a.dest: a.default for a in parser._actions}
    for dest in sorted(given & getattr(parser, "tokenwire_refused", frozenset())):
        why = FRONTEND[dest]
        if getattr(ns, dest, None) == defaults.get(dest):
            continue
        flag = "--" + dest.replace("_", "-")
        raise SystemExit(f"tokenwire serve: {flag} is vLLM's, not taken here: {why}")

