"""vLLM's engine flags for `tokenwire serve`: parsed by vLLM's own machinery
(FlexibleArgumentParser + AsyncEngineArgs.add_cli_args, `--config FILE.yaml`
like `vllm serve --config`, command-line flags winning), then resolved with
tokenwire's defaults. Part of the engine adapter (imports vLLM). Also
vLLM's environment (engine_env) and the flags of settings built in Python
(programmatic_engine_args).

Defaults, applied only to flags the user did not give:
- everywhere (tokenwire's choices): `--logprobs-mode processed_logprobs`
  (the distribution tokens were sampled from, what RL ratios need),
  `--scheduling-policy priority` (request priorities), and the demo model
  when no `--model` is given (log stats stay on, vLLM's default: its
  `vllm:*` metrics, served beside tokenwire's; `--disable-log-stats` turns
  them off, and is refused with `--otlp-traces-endpoint`, which needs them);
- on the CPU platform only: `--dtype float32`, `--kv-cache-memory-bytes`
  256 MiB, `--block-size 32`, `--max-model-len 2048`,
  `--no-enable-chunked-prefill`, `--enforce-eager` (see docs/engine.md for why).
On GPU everything else is vLLM's default.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from tokenwire.server.core.multimodal import MAX_IMAGE_PIXELS, MAX_MEDIA_BYTES

if TYPE_CHECKING:
    from tokenwire.server.core.settings import ServerSettings

TOKENWIRE_DEFAULTS: dict[str, Any] = {
    "logprobs_mode": "processed_logprobs",
    "scheduling_policy": "priority",
}
CPU_DEFAULTS: dict[str, Any] = {
    "dtype": "float32",
    "kv_cache_memory_bytes": 256 << 20,
    "block_size": 32,
    "max_model_len": 2048,
    "enable_chunked_prefill": False,
    "enforce_eager": True,
}
ALIASES = {"kv_cache_bytes": "kv_cache_memory_bytes"}  # tokenwire's earlier spelling


def build_parser(add_tokenwire: Callable[..., None], prog: str = "tokenwire serve") -> Any:
    """One parser: tokenwire's settings in their own group, then every vLLM
    engine flag in vLLM's groups."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(
        prog=prog,
        description="The tokenwire gRPC server on a vLLM engine. tokenwire's own settings "
        "come first; every other flag is vLLM's engine flag, as `vllm serve` takes it "
        "(`--config FILE.yaml` too). See docs/engine.md.",
    )
    from tokenwire.server.core.settings import SHARED_WITH_VLLM

    add_tokenwire(parser.add_argument_group("tokenwire (the server's own settings)"),
                  skip=SHARED_WITH_VLLM)
    alias = parser.add_argument_group("tokenwire aliases of vLLM flags")
    alias.add_argument("--kv-cache-bytes", dest="kv_cache_bytes", type=int, default=None,
                       help="the same as vLLM's --kv-cache-memory-bytes")
    AsyncEngineArgs.add_cli_args(parser)
    add_parser_flags(parser)
    from tokenwire.server.engine.vllm.frontend_flags import add_frontend_flags

    add_frontend_flags(parser)  # the rest of vLLM's server flags: honoured or refused
    return parser


# vLLM's OpenAI-server flags for tool calls (its FrontendArgs), taken as
# `vllm serve` takes them; --reasoning-parser(-plugin) are engine flags.
FRONTEND_FLAGS = ("enable_auto_tool_choice", "tool_call_parser", "tool_parser_plugin")


def add_parser_flags(parser: Any) -> None:
    from vllm.engine.arg_utils import get_kwargs
    from vllm.entrypoints.launchers.cli_args import FrontendArgs

    kwargs = get_kwargs(FrontendArgs)
    group = parser.add_argument_group("vLLM's tool-call flags (as `vllm serve` takes them)")
    for name in FRONTEND_FLAGS:
        group.add_argument("--" + name.replace("_", "-"), **kwargs[name])


def parser_facts(ns: argparse.Namespace, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The parser flags as settings, checked as `vllm serve` checks them
    (plugins imported first): an unknown name stops the start, listing
    vLLM's names."""
    from tokenwire.server.core.parsing import ParserConfig
    from tokenwire.server.engine.vllm.parsers import check_names, import_plugins

    facts = {
        "enable_auto_tool_choice": bool(ns.enable_auto_tool_choice),
        "tool_call_parser": ns.tool_call_parser or "",
        "tool_parser_plugin": ns.tool_parser_plugin or "",
        "reasoning_parser_plugin": kwargs.get("reasoning_parser_plugin") or "",
    }
    import_plugins(facts["tool_parser_plugin"], facts["reasoning_parser_plugin"])
    why = check_names(ParserConfig(facts["tool_call_parser"], facts["enable_auto_tool_choice"],
                                   kwargs.get("reasoning_parser") or ""))
    if why is not None:
        raise SystemExit(f"tokenwire serve: {why}")
    return facts


def given_dests(parser: argparse.ArgumentParser, argv: Sequence[str]) -> set[str]:
    """The destinations of the flags the user gave (argv and --config file)."""
    by_flag = {}
    for action in parser._actions:
        for opt in action.option_strings:
            by_flag[opt] = action.dest
            if opt.startswith("--") and isinstance(action, argparse.BooleanOptionalAction):
                by_flag["--no-" + opt[2:]] = action.dest
    given: set[str] = set()
    tokens = list(argv)
    if "--config" in tokens:
        i = tokens.index("--config")
        if i + 1 < len(tokens):
            tokens += [f"--{key}" for key in _config_keys(tokens[i + 1])]
    for tok in tokens:
        if not tok.startswith("-"):
            continue
        name = tok.split("=", 1)[0]
        if name.startswith("--"):
            name = "--" + name[2:].split(".", 1)[0].replace("_", "-")
        if name in by_flag:
            given.add(by_flag[name])
    return given


def _config_keys(path: str) -> list[str]:
    import yaml

    try:
        data = yaml.safe_load(pathlib.Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return []  # vLLM's parser reports it
    return [str(k).replace("_", "-") for k in data] if isinstance(data, dict) else []


def resolve(
    ns: argparse.Namespace, given: set[str], demo_model: Callable[[], str],
) -> dict[str, Any]:
    """AsyncEngineArgs keywords: vLLM's parse, tokenwire's and the platform's
    defaults where the user gave no flag."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.platforms import current_platform

    if getattr(ns, "kv_cache_bytes", None) is not None and "kv_cache_memory_bytes" not in given:
        ns.kv_cache_memory_bytes = ns.kv_cache_bytes
        given = given | {"kv_cache_memory_bytes"}
    args = AsyncEngineArgs.from_cli_args(ns)
    defaults = dict(TOKENWIRE_DEFAULTS)
    if current_platform.is_cpu():
        defaults.update(CPU_DEFAULTS)
    for name, value in defaults.items():
        if name not in given:
            setattr(args, name, value)
    if args.otlp_traces_endpoint and args.disable_log_stats and "disable_log_stats" in given:
        raise SystemExit(TRACING_NEEDS_STATS)
    if "model" not in given:
        args.model = demo_model()
        if "served_model_name" not in given:  # no --model to name it by: the demo's folder
            args.served_model_name = [os.path.basename(args.model.rstrip("/"))]
    return stats_for_tracing({f.name: getattr(args, f.name) for f in dataclasses.fields(args)})


TRACING_NEEDS_STATS = (
    "tokenwire serve: --otlp-traces-endpoint needs vLLM's per-request stats: drop "
    "--disable-log-stats (with both, vLLM's tracing fails at the first finished request "
    "and the engine dies)")


def stats_for_tracing(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Engine arguments that cannot kill the engine: vLLM's tracing reads
    every request's stats (its output processor asserts them), so with
    --otlp-traces-endpoint log stats stay on whatever the defaults said."""
    if kwargs.get("otlp_traces_endpoint") and kwargs.get("disable_log_stats"):
        return {**kwargs, "disable_log_stats": False}
    return kwargs


def engine_facts(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ServerSettings engine fields mirrored from the resolved arguments."""
    names = kwargs.get("served_model_name")
    served = list(names) if isinstance(names, list | tuple) else ([names] if names else [])
    return {
        "model": kwargs["model"],
        "served_model_name": served[0] if served else "",  # "": --model as given (vLLM's)
        "more_served_names": tuple(served[1:]),
        "max_model_len": kwargs.get("max_model_len") or 0,
        "block_size": kwargs.get("block_size") or 0,
        "scheduling_policy": kwargs.get("scheduling_policy") or "fcfs",
        "reasoning_parser": kwargs.get("reasoning_parser") or "",
        "enable_lora": bool(kwargs.get("enable_lora")),
        "otlp_traces_endpoint": kwargs.get("otlp_traces_endpoint") or "",
        "engine_args": kwargs,
    }


def parse_serve_args(argv: Sequence[str], add_tokenwire: Callable[..., None],
                     demo_model: Callable[[], str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse `tokenwire serve` flags for the vLLM engine. Unknown or malformed
    flags exit with status 2 and vLLM's/argparse's message, before any model
    loads."""
    parser = build_parser(add_tokenwire)
    ns = parser.parse_args(list(argv))
    ns.log_level = str(getattr(ns, "log_level", None) or "INFO")  # vLLM's --log-level, shared
    given = given_dests(parser, argv)
    from tokenwire.server.engine.vllm.frontend_flags import refuse_frontend_flags

    refuse_frontend_flags(parser, ns, given)
    kwargs = resolve(ns, given, demo_model)
    link_logprob_caps(ns, kwargs, given)
    return ns, {**engine_facts(kwargs), **parser_facts(ns, kwargs)}


# --max-logprobs -1 (vLLM: no cap below the vocabulary) as tokenwire's cap.
UNCAPPED_LOGPROBS = 1 << 20


def link_logprob_caps(ns: argparse.Namespace, kwargs: dict[str, Any], given: set[str]) -> None:
    """One logprob cap: vLLM's --max-logprobs and tokenwire's
    --max-top-logprobs follow each other when only one is given, so a
    trainer's vLLM flags (TRL: --max-logprobs -1) work unchanged."""
    if "max_logprobs" in given and "max_top_logprobs" not in given:
        cap = kwargs.get("max_logprobs")
        ns.max_top_logprobs = UNCAPPED_LOGPROBS if cap is None or cap < 0 else int(cap)
    elif "max_top_logprobs" in given and "max_logprobs" not in given:
        kwargs["max_logprobs"] = ns.max_top_logprobs


def engine_env() -> None:
    """vLLM's environment, set before vLLM starts (the operator's values win)."""
    # On CPU, let OpenMP use every core unless the operator said otherwise
    # ("auto" reserves one of two cores, halving decode speed here).
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    # Media fetched from --allowed-media-domains (docs/multimodal.md): no
    # redirects (an allowed host could send the fetch anywhere), at most the
    # bytes a request may carry inline, and the pixels per image.
    os.environ.setdefault("VLLM_MEDIA_URL_ALLOW_REDIRECTS", "0")
    os.environ.setdefault("VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB", str(MAX_MEDIA_BYTES >> 20))
    os.environ.setdefault("VLLM_MAX_IMAGE_PIXELS", str(MAX_IMAGE_PIXELS))


def programmatic_engine_args(settings: ServerSettings) -> dict[str, Any]:
    """Engine arguments for settings built in Python (not from the command
    line): the engine facts as vLLM flags, resolved like `tokenwire serve`."""
    from tokenwire.server.core.settings import add_arguments

    argv = ["--model", settings.resolved_model(), "--max-model-len", str(settings.max_model_len),
            "--block-size", str(settings.block_size),
            "--scheduling-policy", settings.scheduling_policy]
    if settings.served_model_name:
        argv += ["--served-model-name", *settings.served_names()]
    if settings.reasoning_parser:
        argv += ["--reasoning-parser", settings.reasoning_parser]
    if settings.reasoning_parser_plugin:
        argv += ["--reasoning-parser-plugin", settings.reasoning_parser_plugin]
    parser = build_parser(add_arguments)
    return resolve(parser.parse_args(argv), given_dests(parser, argv), settings.resolved_model)


REPORTED = ("model", "served_model_name", "dtype", "tensor_parallel_size", "pipeline_parallel_size",
            "data_parallel_size", "max_model_len", "block_size", "max_num_seqs",
            "kv_cache_memory_bytes", "enable_prefix_caching", "enable_chunked_prefill",
            "enforce_eager", "logprobs_mode", "scheduling_policy", "enable_lora", "max_lora_rank",
            "distributed_executor_backend")


def describe(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={kwargs.get(k)!r}" for k in REPORTED if k in kwargs)
