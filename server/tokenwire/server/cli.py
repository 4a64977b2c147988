"""`tokenwire serve`: parse the settings and run the server."""

from __future__ import annotations

import argparse
import asyncio
import logging

from tokenwire.server.settings import add_arguments, from_namespace


def add_serve_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("serve", help="run the gRPC server on a vLLM engine")
    add_arguments(p)
    p.set_defaults(func=run_serve)


def run_serve(ns: argparse.Namespace) -> int:
    settings = from_namespace(ns)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from tokenwire.server.app import serve

    try:
        import uvloop

        uvloop.install()
    except ImportError:  # uvloop is optional
        pass
    return asyncio.run(serve(settings))
