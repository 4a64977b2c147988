"""Generate the Python code and the Envoy descriptor set from proto/.

Usage: python tools/gen_proto.py [--out-dir DIR]

Writes ``client/tokenwire/v1/*_pb2.py``/``.pyi``/``_pb2_grpc.py`` (mirroring
the proto tree, so imports need no patching) and
``gateway/tokenwire.pb`` (a descriptor set with imports, for Envoy's
gRPC-JSON transcoder). With ``--out-dir`` everything is written under that
directory instead (the staleness test compares the two).
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import google.api  # googleapis-common-protos ships the .proto files
import grpc_tools
from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"


def include_dirs() -> list[pathlib.Path]:
    googleapis = pathlib.Path(next(iter(google.api.__path__))).parent.parent
    well_known = pathlib.Path(next(iter(grpc_tools.__path__))) / "_proto"
    return [PROTO_DIR, googleapis, well_known]


def generate(out_root: pathlib.Path) -> None:
    py_out = out_root / "client"
    gw_out = out_root / "gateway"
    py_out.mkdir(parents=True, exist_ok=True)
    gw_out.mkdir(parents=True, exist_ok=True)
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    args = ["protoc"] + [f"-I{d}" for d in include_dirs()]
    args += [
        f"--python_out={py_out}",
        f"--pyi_out={py_out}",
        f"--grpc_python_out={py_out}",
        f"--descriptor_set_out={gw_out / 'tokenwire.pb'}",
        "--include_imports",
        "--include_source_info",
        # google/rpc/error_details.proto lets Envoy render error details.
        "google/rpc/error_details.proto",
        "google/rpc/status.proto",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    # protoc also emitted code for the google/rpc imports; the
    # googleapis-common-protos package provides those at run time.
    _remove_tree(py_out / "google")
    pkg = py_out / "tokenwire" / "v1"
    (pkg / "__init__.py").write_text(
        '"""Generated tokenwire.v1 protobuf and gRPC code (make proto)."""\n'
    )


def _remove_tree(path: pathlib.Path) -> None:
    if not path.exists():
        return
    for child in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        child.rmdir() if child.is_dir() else child.unlink()
    path.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out-dir", type=pathlib.Path, default=ROOT)
    ns = parser.parse_args(argv)
    generate(ns.out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
