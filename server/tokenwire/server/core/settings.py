"""The one settings object of the server, and the CLI parser that fills it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
from typing import Any, Literal, get_args, get_origin, get_type_hints

from tokenwire.server.core.parsing import ParserConfig

# Field metadata: an engine fact. The serving layer reads these, but on the
# command line they are vLLM's own flags (--model, --max-model-len, ...),
# parsed by vLLM's argument machinery (engine/vllm/args.py); the fake engine takes
# the same flag names.
ENGINE = {"engine": True}


def _engine(default: object, help: str = "") -> Any:
    return dataclasses.field(default=default, metadata={**ENGINE, "help": help})


def _own(default: object, help: str) -> Any:
    """A tokenwire setting: one flag, whose help is `help`."""
    return dataclasses.field(default=default, metadata={"help": help})


def _internal(default: object, help: str) -> Any:
    """Set by tokenwire itself for the processes it starts (no flag)."""
    return dataclasses.field(default=default, metadata={"help": help, "internal": True})


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """Everything the server needs to start. Defaults suit the CPU demo.

    tokenwire's own settings are plain fields (one flag each); the engine's
    are vLLM's flags, resolved into `engine_args` (the keyword arguments of
    vLLM's AsyncEngineArgs) with the few facts the serving layer needs
    mirrored in the ENGINE fields."""

    engine: Literal["vllm", "fake"] = _own(
        "vllm", "vllm (default), or fake: a deterministic test engine, no vLLM")
    fake_token_delay: float = _own(0.0, "seconds per token of the fake engine")

    # Engine facts (vLLM's flags on the command line).
    model: str | None = _engine(None)  # None: the demo model built by `make model`
    # The first name of --served-model-name (reported); "": --model as given
    # (vLLM's default), or the demo model's folder name when no --model is given.
    served_model_name: str = _engine("")
    more_served_names: tuple[str, ...] = _engine(())  # the rest of --served-model-name
    max_model_len: int = _engine(2048)
    block_size: int = _engine(32)
    scheduling_policy: str = _engine("priority")  # "priority" is needed for `priority`
    reasoning_parser: str = _engine("")  # reasoning_content; needed for max_thinking_tokens
    reasoning_parser_plugin: str = _engine("")  # a file registering more reasoning parsers
    # vLLM's OpenAI-server flags for tool calls (engine/vllm/parsers.py).
    enable_auto_tool_choice: bool = _engine(False)
    tool_call_parser: str = _engine("")
    tool_parser_plugin: str = _engine("")  # a file registering more tool-call parsers
    enable_lora: bool = _engine(False)
    # vLLM's --otlp-traces-endpoint: OpenTelemetry traces (api/tracing.py), one span per
    # RPC exported there, continuing the caller's traceparent; "": tracing off.
    otlp_traces_endpoint: str = _engine("")
    # Every vLLM engine argument (AsyncEngineArgs keywords), resolved from
    # vLLM's flags, the platform defaults and tokenwire's defaults.
    engine_args: dict[str, Any] = dataclasses.field(default_factory=dict, metadata=ENGINE)
    warmup: bool = _own(True, "send a warm-up request (with logprobs) before reporting SERVING")

    # Control plane (ControlService): pause/resume, weight updates, LoRA.
    enable_control: bool = _own(
        False, "serve the ControlService (pause/resume, weight updates, cache reset, LoRA)")
    admin_api_key: str = _own(
        "", "key for the ControlService (also $TOKENWIRE_ADMIN_API_KEY); "
            "empty: loopback callers only")
    control_timeout_seconds: float = _own(
        600.0, "longest a control call runs when the caller set no deadline (seconds)")
    weight_version: str = _own(
        "", "the weight version tokens are attributed to at start (default: vLLM's 'default')")
    weights_root: str = _own(
        "", "folder that weight and LoRA loads must lie in (real paths: no way out by '..' or "
            "symlinks; the start-up model is always allowed); empty: any folder the server can "
            "read (set it in production)")
    collective_rpc_allow: tuple[str, ...] = _own(
        (), "worker methods POST /collective_rpc may call (a trainer's worker extension, loaded "
            "by vLLM's --worker-extension-cls), admin only; empty: none")
    unhealthy_while_paused: bool = _own(
        False, "report NOT_SERVING on grpc.health.v1 while generation is paused, so a fleet "
               "gateway routes new calls to other replicas during this one's update")
    salt_cache_by_version: bool = _own(
        False, "add the weight version (and its update generation) to every request's cache "
               "salt, so a new version never reuses prefix-cache blocks of older weights, even "
               "without a cache reset (docs/control.md)")
    lora_modules: tuple[str, ...] = _own(
        (), "LoRA adapters to load at start, NAME=PATH ... (with --enable-lora); requests select "
            "one by `model`")

    # Request limits.
    max_n: int = _own(16, "largest `n` (choices per request)")
    max_stop_token_ids: int = _own(256, "most ids in `stop_token_ids`")
    max_stop_strings: int = _own(16, "most strings in `stop`")
    max_stop_string_chars: int = _own(256, "longest string in `stop` (characters)")
    max_completion_prompts: int = _own(64, "most prompts in one completions batch (`prompt` list)")
    max_score_documents: int = _own(
        1024, "most documents one /score or /rerank call scores (a reranker's candidates)")
    max_top_logprobs: int = _own(20, "largest `top_logprobs` / `prompt_logprobs` (with only vLLM's "
                                     "--max-logprobs given, that cap; this one sets vLLM's)")
    request_template_timeout_seconds: float = _own(
        10.0, "longest a request's own chat template may render "
              "(with --trust-request-chat-template)")
    trust_request_chat_template: bool = _own(
        False, "accept `chat_template` in requests (Jinja runs on the server: trusted callers "
               "only; vLLM's flag of the same name)")

    # Chat templates (vLLM's flags).
    chat_template: str = _own(
        "", "the chat template: a file, or the Jinja text itself (vLLM's flag); empty: the "
            "model's own")
    default_chat_template_kwargs: str = _own(
        "", "JSON object of chat-template arguments for every request, under each request's "
            "chat_template_kwargs (vLLM's flag), e.g. '{\"enable_thinking\": false}'")
    response_role: str = _own(
        "assistant", "the role of the reply when the request has add_generation_prompt "
                     "(vLLM's flag)")
    chat_template_content_format: Literal["auto", "string", "openai"] = _own(
        "auto", "how message content reaches the template (vLLM's flag): string, or openai "
                "(a list of content parts); auto: string")

    # Server-wide defaults of per-request options (vLLM's flags).
    return_tokens_as_token_ids: bool = _own(
        False, "spell logprob tokens \"token_id:N\" when a chat or completions request does "
               "not set return_tokens_as_token_ids itself (vLLM's flag)")
    exclude_tools_when_tool_choice_none: bool = _own(
        False, "render no tools into the chat template when a request's tool_choice is "
               "\"none\" (vLLM's flag; chat, Responses and Messages)")
    tool_strict_level: Literal["auto", "function", "parameter"] = _own(
        "auto", "floor for tool-call structural tags (vLLM's flag): auto (from tool_choice and "
                "each tool's `strict`), function (the call envelope of every request with "
                "tools), parameter (also every tool's argument schema)")
    enable_force_include_usage: bool = _own(
        False, "every chat and completions stream carries usage, on each chunk and a final "
               "usage chunk, as if stream_options asked for both (vLLM's flag)")

    # Sessions, continuation and speculative prefill.
    session_max_requests: int = _own(1024, "running requests one Session stream may hold")
    session_max_buffered_bytes: int = _own(
        8 * 1024 * 1024, "bytes of events one Session may hold for a client that reads slowly; "
                         "beyond, its requests wait and the session stops reading the client")
    continuation_max_tokens: int = _own(
        16_000_000, "token ids kept for session continuation, all sessions (LRU)")
    continuation_session_max_tokens: int = _own(
        2_000_000, "token ids kept for continuation per session (LRU)")
    continuation_session_max_requests: int = _own(
        4096, "finished requests kept for continuation per session")
    speculative_prefill: bool = _own(
        True, "honour nvext.agent_hints.speculative_prefill (warm the next turn's prefix)")
    speculative_prefill_priority: int = _own(
        10, "engine priority of speculative prefills (lower runs first)")

    # Admission control (0 = no limit).
    max_concurrent_requests: int = _own(1024, "engine requests in flight (0: no limit)")
    max_admitted_tokens: int = _own(
        0, "sum of prompt + max new tokens in flight (0: no limit)")
    max_offload_queue: int = _own(
        32, "requests waiting for (or on) each off-loop preparation thread (large prompts, "
            "request templates); beyond, RESOURCE_EXHAUSTED OFFLOAD_QUEUE_FULL (0: no limit)")

    # Access control and observability.
    api_key: str = _own(
        "", "inference API keys, one or several (vLLM's flag; each is accepted); without it, "
            "$TOKENWIRE_API_KEY, else $VLLM_API_KEY (as vLLM reads it); none: no key")
    more_api_keys: tuple[str, ...] = _internal((), "the other keys of --api-key")
    api_keys_file: str = _own(
        "", "TOML file of inference keys, each with its tenant (cache domain) and optional "
            "priority range (docs/hardening.md)")
    trust_tenant_header: bool = _own(
        False, "take the tenant from x-tenant-id metadata when the call comes from a trusted "
               "hop: a --trusted-proxy address, or with none given a local peer (such as the "
               "gateway on this host, which strips x-tenant-id from outside callers)")
    trusted_proxy: tuple[str, ...] = _own(
        (), "the proxies in front of this server (IP addresses or CIDR networks, space or comma "
            "separated): calls from them are proxied (control needs the admin key) and only "
            "they may name the tenant (--trust-tenant-header); none: a local peer is that hop")
    min_priority: int = _own(
        0, "lowest priority a request may ask for (lower runs first; values beyond are clamped); "
           "a key's range in --api-keys-file overrides it")
    max_priority: int = _own(2**31 - 1, "highest priority a request may ask for (clamped)")
    open_probes: bool = _own(True, "health and reflection answer without the key")
    tls_cert: str = _own("", "PEM certificate chain: serve gRPC over TLS (on `tokenwire serve` "
                             "also vLLM's --ssl-certfile)")
    tls_key: str = _own("", "PEM private key of --tls-cert (on `tokenwire serve` also vLLM's "
                            "--ssl-keyfile)")
    ssl_ca_certs: str = _own(
        "", "PEM CA certificates a client certificate must chain to, with --ssl-cert-reqs 2 "
            "(mTLS; vLLM's flag)")
    ssl_cert_reqs: int = _own(
        0, "client certificates, as vLLM's flag (Python's ssl constants): 0 not asked for, 2 "
           "required and checked against --ssl-ca-certs; 1 (optional) is the gateway's only "
           "(gRPC's server cannot ask without requiring)")
    metrics_port: int = _own(0, "Prometheus /metrics on --metrics-host:PORT (0: off)")
    metrics_host: str = _own(
        "127.0.0.1", "metrics address (loopback by default: /metrics needs no key)")
    health_check_seconds: float = _own(2.0, "engine liveness probe period (seconds)")

    # gRPC server.
    api_server_count: int = _own(
        1, "serving processes, each with its own event loop, sharing --port (SO_REUSEPORT; the "
           "kernel spreads connections) over one vLLM engine core (vLLM's multi-API-server mode; "
           "the fake engine: one each); a Session stream lives on one process (docs/frontends.md)")
    process_index: int = _internal(0, "this serving process's index among --api-server-count")
    control_sockets: tuple[str, ...] = _internal(
        (), "with several serving processes and --enable-control: each process's private Unix "
            "socket (index-aligned; process 0 runs control, control/relay.py)")
    # The gRPC listener (`tokenwire serve --host/--port`; under `tokenwire up`
    # --grpc-host/--grpc-port, its --host/--port being the REST listener's).
    host: str = _own("127.0.0.1", "gRPC listen address (loopback by default)")
    port: int = _own(50051, "gRPC listen port (0 picks a free one)")
    max_message_bytes: int = _own(16 * 1024 * 1024, "largest gRPC message (bytes)")
    grpc_transport: Literal["aio", "native"] = _own(
        "aio", "the gRPC server: aio (grpc.aio, default), or native (pygrpc-native's Rust "
               "transport, `pip install tokenwire[native]`; where a setting needs what it lacks, "
               "or it is not installed, the server starts on aio and logs why; docs/engine.md)")
    sse_keep_alive_interval: float = _own(
        0.0, "seconds a streamed chat, completion or generate SSE response (EventStreamService, "
             "the gateway's REST streams) may be idle before an SSE comment `: keep-alive` is "
             "sent, for proxies with short read timeouts (vLLM's flag; 0: never)")
    grace_seconds: float = _own(10.0, "how long in-flight calls may finish on shutdown (seconds)")
    drain_seconds: float = _own(
        0.0, "on shutdown, seconds health reports NOT_SERVING while new calls are still served "
             "(so load balancers move away first); then new calls are refused")
    worker_id: str = _own("", "this process's id in responses and logs (default: hostname:pid)")
    log_level: str = _own("INFO", "log level")

    def resolved_model(self) -> str:
        if self.model:
            return self.model
        from tokenwire.server.core.models import demo_model_path

        return str(demo_model_path())

    def resolved_served_name(self) -> str:
        """The model's name as vLLM reports it: the first --served-model-name,
        else --model as given (a path or hub id); with no --model (the demo
        model), its folder's name."""
        if self.served_model_name:
            return self.served_model_name
        return self.model or self.folder_name()

    def folder_name(self) -> str:
        """The model folder's (or hub id's) last part: the name tokenwire served
        the model under before it named models as vLLM does, still accepted."""
        return pathlib.Path(self.resolved_model().rstrip("/")).name

    def served_names(self) -> tuple[str, ...]:
        """Every name of --served-model-name (vLLM's ListModels lists each),
        the reported one first."""
        return tuple(dict.fromkeys((self.resolved_served_name(), *self.more_served_names)))

    def accepted_names(self) -> tuple[str, ...]:
        """The names a request's `model` may give for the base model: the served
        names and the folder-name alias."""
        return tuple(dict.fromkeys((*self.served_names(), self.folder_name())))

    def parser_config(self) -> ParserConfig:
        """The parser flags (--tool-call-parser, --enable-auto-tool-choice,
        --reasoning-parser) for Engine.chat_parsers."""
        return ParserConfig(self.tool_call_parser, self.enable_auto_tool_choice,
                            self.reasoning_parser, self.tool_strict_level)

    def api_keys(self) -> tuple[str, ...]:
        """Every inference key of --api-key (each accepted)."""
        return tuple(k for k in (self.api_key, *self.more_api_keys) if k)

    def resolved_worker_id(self) -> str:
        if self.worker_id:
            return self.worker_id
        return f"{os.uname().nodename}:{os.getpid()}"

    def check_tls(self) -> None:
        """ValueError when the TLS flags cannot be honoured: a certificate
        without its key, client-certificate flags without TLS, a
        --ssl-cert-reqs that is not one of Python's three, or 1
        (CERT_OPTIONAL), which gRPC's server cannot do (it requires client
        certificates or does not ask for them)."""
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("--tls-cert (--ssl-certfile) and --tls-key (--ssl-keyfile) go "
                             "together")
        if self.ssl_cert_reqs not in CERT_REQS:
            raise ValueError(f"--ssl-cert-reqs must be 0 (CERT_NONE), 1 (CERT_OPTIONAL) or 2 "
                             f"(CERT_REQUIRED), not {self.ssl_cert_reqs}")
        if (self.ssl_ca_certs or self.ssl_cert_reqs) and not self.tls_cert:
            raise ValueError("--ssl-ca-certs and --ssl-cert-reqs check client certificates over "
                             "TLS: give --tls-cert and --tls-key (--ssl-certfile, --ssl-keyfile)")
        if self.ssl_cert_reqs == 1:
            raise ValueError(
                "--ssl-cert-reqs 1 (CERT_OPTIONAL): gRPC's server either requires client "
                "certificates or does not ask for them: use --ssl-cert-reqs 2 here, or the "
                "gateway's listener, which takes 1 (`tokenwire up --ssl-cert-reqs 1`, "
                "`tokenwire gateway --ssl-cert-reqs 1`)")
        if self.ssl_cert_reqs == 2 and not self.ssl_ca_certs:
            raise ValueError("--ssl-cert-reqs 2 needs --ssl-ca-certs (the CA certificates a "
                             "client certificate must chain to)")


# vLLM's --ssl-cert-reqs values: Python's ssl.CERT_NONE, CERT_OPTIONAL, CERT_REQUIRED.
CERT_REQS = (0, 1, 2)

# Flags vLLM's engine parser also has: one flag serves both (vLLM's).
SHARED_WITH_VLLM = frozenset({"log_level"})
# vLLM's spellings of tokenwire's flags (`vllm serve --ssl-certfile`): the
# same setting on `tokenwire serve`.
VLLM_SPELLINGS = {"tls_cert": "--ssl-certfile", "tls_key": "--ssl-keyfile"}


def add_arguments(parser: Any, *, skip: frozenset[str] = frozenset(),
                  vllm_spellings: bool = True) -> None:
    """Add one flag per own settings field (``--grace-seconds`` for
    grace_seconds), with vLLM's spelling beside it where it has another
    (VLLM_SPELLINGS; not under `tokenwire up`, where those mean the gateway's
    listener)."""
    defaults = ServerSettings()
    hints = get_type_hints(ServerSettings)
    for field in own_fields():
        if field.name in skip:
            continue  # vLLM's flag (engine/vllm/args.py), or the fake engine's
        flag = "--" + field.name.replace("_", "-")
        if vllm_spellings and field.name in VLLM_SPELLINGS:
            parser.add_argument(flag, VLLM_SPELLINGS[field.name], dest=field.name,
                                default=getattr(defaults, field.name),
                                help=field.metadata.get("help", ""))
            continue
        default = getattr(defaults, field.name)
        help = field.metadata.get("help", "")
        if isinstance(default, bool):
            parser.add_argument(
                flag, dest=field.name, default=default, action=argparse.BooleanOptionalAction,
                help=help,
            )
        elif field.name == "api_key":  # vLLM's: several keys, each accepted
            parser.add_argument(flag, dest=field.name, nargs="+", default=[], help=help)
        elif isinstance(default, tuple):
            parser.add_argument(flag, dest=field.name, nargs="*", default=default, help=help)
        elif get_origin(hints[field.name]) is Literal:  # a closed set: the CLI shows the choices
            parser.add_argument(flag, dest=field.name, choices=get_args(hints[field.name]),
                                default=default, help=help)
        else:
            typ = type(default) if default is not None else str
            parser.add_argument(flag, dest=field.name, type=typ, default=default, help=help)


def own_fields() -> list[dataclasses.Field[Any]]:
    """tokenwire's own settings (one flag each), not the engine's."""
    return [f for f in dataclasses.fields(ServerSettings)
            if not f.metadata.get("engine") and not f.metadata.get("internal")]


def from_namespace(ns: argparse.Namespace, **engine_facts: Any) -> ServerSettings:
    """tokenwire's settings from `ns`; the engine facts given by the caller."""
    values = {f.name: getattr(ns, f.name) for f in own_fields()}
    values.update(engine_facts)
    values["lora_modules"] = tuple(values["lora_modules"])
    values["trusted_proxy"] = tuple(values["trusted_proxy"])
    keys = api_keys_of(values["api_key"])
    values["api_key"], values["more_api_keys"] = (keys[0], keys[1:]) if keys else ("", ())
    if not values["admin_api_key"]:
        values["admin_api_key"] = os.environ.get("TOKENWIRE_ADMIN_API_KEY", "")
    return ServerSettings(**values)


# Several keys travel in one environment variable one a line (`tokenwire up`
# hands the server its keys so): a key never holds a line break.
def api_keys_of(given: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """The inference keys: --api-key's values; without them $TOKENWIRE_API_KEY,
    else vLLM's $VLLM_API_KEY (a vLLM deployment keyed by its environment
    stays keyed)."""
    keys = [given] if isinstance(given, str) else list(given or ())
    keys = [k for k in keys if k]
    if not keys:
        env = os.environ.get("TOKENWIRE_API_KEY") or os.environ.get("VLLM_API_KEY") or ""
        keys = env.splitlines()
    return tuple(dict.fromkeys(k.strip() for k in keys if k.strip()))
