"""`tokenwire serve`: parse the settings and run the server.

tokenwire's own settings are its flags (core/settings.py); the engine's are
vLLM's own flags, parsed by vLLM's machinery (engine/vllm/args.py). With
`--engine fake` (tests) vLLM is not imported: the fake engine takes the few
engine flags it understands, under vLLM's names.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from tokenwire.server.core.settings import ServerSettings, add_arguments, from_namespace


def add_serve_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Listed in `tokenwire --help`; `tokenwire serve ...` itself is parsed
    by parse_settings (the top-level CLI hands it over before argparse)."""
    sub.add_parser("serve", help="run the gRPC server on a vLLM engine (every vLLM engine flag; "
                   "`tokenwire serve --help`)", add_help=False)


def _engine_choice(argv: Sequence[str]) -> str:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--engine", default="vllm")
    known, _ = pre.parse_known_args(list(argv))
    return str(known.engine)


def _fake_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokenwire serve --engine fake")
    add_arguments(parser.add_argument_group("tokenwire (the server's own settings)"))
    facts = parser.add_argument_group("engine (the fake engine's subset of vLLM's flags)")
    defaults = ServerSettings()
    facts.add_argument("--model", default=None)
    facts.add_argument("--served-model-name", nargs="+", default=[])  # vLLM's: several names
    facts.add_argument("--max-model-len", type=int, default=defaults.max_model_len)
    facts.add_argument("--block-size", type=int, default=defaults.block_size)
    facts.add_argument("--scheduling-policy", default=defaults.scheduling_policy)
    facts.add_argument("--reasoning-parser", default="")
    facts.add_argument("--reasoning-parser-plugin", default="")
    facts.add_argument("--enable-auto-tool-choice", action="store_true")
    facts.add_argument("--tool-call-parser", default="")
    facts.add_argument("--tool-parser-plugin", default="")
    facts.add_argument("--enable-lora", action=argparse.BooleanOptionalAction, default=False)
    facts.add_argument("--otlp-traces-endpoint", default="")
    return parser


def positional_model(argv: Sequence[str]) -> list[str]:
    """`tokenwire serve MODEL ...` (vLLM's positional model, first, as
    `vllm serve MODEL`) as `--model MODEL ...`."""
    args = list(argv)
    if args and not args[0].startswith("-"):
        return ["--model", args[0], *args[1:]]
    return args


def parse_settings(argv: Sequence[str]) -> ServerSettings:
    argv = positional_model(argv)
    if "--grpc" in argv:  # vLLM's (a plugin of vLLM's parser would take it over)
        from tokenwire.server.engine.vllm.frontend_flags import FRONTEND

        raise SystemExit(f"tokenwire serve: --grpc is vLLM's, not taken here: {FRONTEND['grpc']}")
    if _engine_choice(argv) == "fake":
        ns = _fake_parser().parse_args(list(argv))
        facts = {k: getattr(ns, k) for k in ("model", "max_model_len", "block_size",
                                              "scheduling_policy", "reasoning_parser",
                                              "reasoning_parser_plugin", "enable_auto_tool_choice",
                                              "tool_call_parser", "tool_parser_plugin",
                                              "enable_lora", "otlp_traces_endpoint")}
        names = list(ns.served_model_name)
        facts.update(served_model_name=names[0] if names else "",
                     more_served_names=tuple(names[1:]))
        return from_namespace(ns, **facts)
    from tokenwire.server.core.models import demo_model_path
    from tokenwire.server.engine.vllm.args import parse_serve_args

    ns, facts = parse_serve_args(argv, add_arguments, lambda: str(demo_model_path()))
    return from_namespace(ns, **facts)


def main(argv: Sequence[str] | None = None) -> int:
    from tokenwire.server.security.auth import check_exposure

    settings = parse_settings(sys.argv[1:] if argv is None else argv)
    from tokenwire.server.engine.tokenizer_ops import ChatTemplateDefaults

    if not 0 <= settings.sse_keep_alive_interval < float("inf"):  # vLLM's rule (NaN too)
        raise SystemExit("tokenwire serve: --sse-keep-alive-interval must be 0 (off) or a "
                         "positive number of seconds")
    try:
        check_exposure(settings)
        settings.check_tls()  # before the model loads
        ChatTemplateDefaults.from_settings(settings)  # --chat-template's file, the JSON flags
    except ValueError as err:
        raise SystemExit(f"tokenwire serve: {err}") from None
    if settings.api_server_count > 1:
        from tokenwire.server.runtime.frontends import run

        return run(settings)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from tokenwire.server.runtime.app import serve

    try:
        import uvloop

        uvloop.install()
    except ImportError:  # uvloop is optional
        pass
    return asyncio.run(serve(settings))
