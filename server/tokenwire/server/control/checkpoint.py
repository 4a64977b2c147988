"""Whether a checkpoint folder holds every tensor of the served model, read
from its safetensors headers only (no tensor data), before anything pauses.

vLLM's reload_weights only warns about the model's weights a checkpoint did
not hold, and keeps their old values: a partial checkpoint (a trainer that
died part-way through writing, a shard missing) would be served as a clean
load of mixed weights. The served model's tensor names are those of the
start-up checkpoint (when it is a local safetensors folder), then those of
each checkpoint loaded whole; a folder that lacks one of them, or holds a
safetensors file shorter than its header says, is refused. With no names
known (a model id the engine resolved itself, files that are not
safetensors), nothing is compared.
"""

from __future__ import annotations

import glob
import json
import os
import struct

from tokenwire.server.core.engine_control import is_folder
from tokenwire.server.core.errors import InvalidArgument

MAX_HEADER_BYTES = 100 * 1024 * 1024  # the safetensors format's own limit
SHOWN = 5  # missing names named in the error


class NotSafetensors(ValueError):
    """A file that is not a whole safetensors file."""


def _names(path: str) -> set[str]:
    """The tensor names of one safetensors file, checked against its size."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        raw = f.read(8)
        if len(raw) < 8:
            raise NotSafetensors("no header")
        (length,) = struct.unpack("<Q", raw)
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise NotSafetensors(f"a header of {length} bytes in a file of {size}")
        try:
            header = json.loads(f.read(length))
            tensors = {k: v for k, v in header.items() if k != "__metadata__"}
            end = max((int(v["data_offsets"][1]) for v in tensors.values()), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            raise NotSafetensors(f"an unreadable header ({type(exc).__name__})") from None
    if 8 + length + end > size:
        raise NotSafetensors(f"{size} bytes, shorter than the {8 + length + end} its header says")
    return set(tensors)


def tensor_names(folder: str, files: str) -> frozenset[str] | None:
    """The tensor names of the `files` (a glob, e.g. "*.safetensors") in
    `folder`; None when there are none or one is not whole safetensors."""
    if not files or not is_folder(folder):
        return None
    names: set[str] = set()
    paths = sorted(glob.glob(os.path.join(glob.escape(folder), files)))
    try:
        for path in paths:
            names |= _names(path)
    except (OSError, NotSafetensors):
        return None
    return frozenset(names) or None


def check_complete(real: str, path: str, param: str, files: str,
                   served: frozenset[str] | None) -> frozenset[str] | None:
    """Refuse a folder that lacks a tensor of the served model (`served`) or
    holds a safetensors file that is not whole; its names when known."""
    if not served or not files:
        return tensor_names(real, files)
    names: set[str] = set()
    for file in sorted(glob.glob(os.path.join(glob.escape(real), files))):
        try:
            names |= _names(file)
        except (OSError, NotSafetensors) as exc:
            raise InvalidArgument(
                f"{param}: {path!r} holds {os.path.basename(file)!r}, which is not a whole "
                f"safetensors file ({exc}): a checkpoint still being written?", param=param,
                reason="CHECKPOINT_INCOMPLETE") from None
    missing = sorted(served - names)
    if missing:
        shown = ", ".join(missing[:SHOWN]) + (", ..." if len(missing) > SHOWN else "")
        raise InvalidArgument(
            f"{param}: {path!r} lacks {len(missing)} of the served model's {len(served)} "
            f"tensors ({shown}): vLLM would keep their old values and serve mixed weights; "
            "nothing was loaded", param=param, reason="CHECKPOINT_INCOMPLETE")
    return frozenset(names)
