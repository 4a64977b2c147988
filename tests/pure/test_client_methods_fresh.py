"""The committed client methods match what tools/gen_client.py writes from
the service descriptors and its table (regenerate: python tools/gen_client.py)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_client", ROOT / "tools" / "gen_client.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_generated_client_methods_are_fresh() -> None:
    rendered = _generator().render()
    assert {p.name for p in rendered} == {"_service_methods.py", "_control_methods.py"}
    stale = [p.name for p, text in rendered.items() if not p.exists() or p.read_text() != text]
    assert not stale, f"stale, run `python tools/gen_client.py`: {stale}"


def test_every_rpc_is_a_method_or_named_as_not_exposed() -> None:
    gen = _generator()
    from tokenwire.v1 import control_pb2, service_pb2

    for service, proto in zip(gen.SERVICES, (service_pb2, control_pb2), strict=True):
        rpcs = set(proto.DESCRIPTOR.services_by_name[service.name].methods_by_name)
        covered = [m.rpc for m in service.methods] + list(service.not_exposed)
        assert sorted(covered) == sorted(rpcs), service.name
