"""The README's grpcurl recipes (list, describe, unary, streaming, session)
and its client-library examples run against the fake-engine server."""

from __future__ import annotations

from tests.readme_recipes import check_client_examples, check_grpcurl_recipes
from tests.servers import ThreadServer


def test_readme_grpcurl_recipes(fake_server: ThreadServer) -> None:
    objects = check_grpcurl_recipes(fake_server.address)
    done = [o for o in objects if o.get("request_id") == "a" and "done" in o]
    assert done and done[0]["done"]["continuable"]


def test_readme_client_examples(fake_server: ThreadServer) -> None:
    outputs = check_client_examples(fake_server.address)
    assert "Hello from the fake engine." in outputs[0]
