"""What a control call may ask, checked before anything pauses: pause
modes, versions, LoRA names, and folders to load (they exist, lie under
--weights-root with real paths, hold safetensors)."""

from __future__ import annotations

import glob
import os

from tokenwire.server.core.engine_control import PAUSE_MODES, is_folder
from tokenwire.server.core.errors import AlreadyExists, InvalidArgument, NotFound, PermissionDenied
from tokenwire.server.core.weight_versions import MAX_VERSION_CHARS

LORA_WEIGHTS = "adapter_model.safetensors"  # what vLLM loads first (before .bin / .pt)


# SGLang's pause modes (/pause_generation {"mode"}) by the vLLM mode that
# does the same for the caller: requests survive the pause and finish after.
SGLANG_PAUSE_MODES = {"in_place": "keep", "retract": "keep"}


def check_mode(mode: str, param: str, default: str) -> str:
    mode = (mode or default).lower()
    mode = SGLANG_PAUSE_MODES.get(mode, mode)
    if mode not in PAUSE_MODES:
        raise InvalidArgument(
            f"{param} must be one of {', '.join(PAUSE_MODES)}; got {mode!r}", param=param,
            reason="VALUE_NOT_ALLOWED",
        )
    return mode


def check_rpc_allowed(method: str, allowed: frozenset[str]) -> str:
    """A collective_rpc method the operator allowed (--collective-rpc-allow)."""
    if method not in allowed:
        raise PermissionDenied(
            f"method: {method!r} is not a method this server allows over collective_rpc "
            "(--collective-rpc-allow)", param="method", reason="COLLECTIVE_RPC_NOT_ALLOWED")
    return method


def check_folder(path: str, param: str, *, root: str, also: str = "", files: str = "") -> str:
    """The real path of a folder to load from, checked before anything
    pauses: it is given, lies under `root` (when set; `also` is allowed too:
    the start-up model), exists, holds no link to a file outside `root`, and
    holds a file matching `files` (when set). Real paths: ".." and symlinks
    cannot lead out of the root, and a link changed after the check does not
    change what is loaded. The root is checked first, on the resolved path,
    so a folder outside it is answered the same whether it exists or not."""
    if not path:
        raise InvalidArgument(f"{param} is required: a folder on the server", param=param,
                              reason="FIELD_REQUIRED")
    real = os.path.realpath(path)
    real_root = os.path.realpath(root) if root else ""
    confined = bool(root) and real != also
    if confined and not _inside(real, real_root):
        raise InvalidArgument(
            f"{param}: {path!r} is not under the server's --weights-root (symlinks and '..' "
            "resolved)", param=param, reason="PATH_OUTSIDE_WEIGHTS_ROOT",
        )
    if not is_folder(real):
        raise InvalidArgument(f"{param}: {path!r} is not a folder on the server", param=param,
                              reason="PATH_NOT_FOUND")
    if confined:
        _no_link_out(real, real_root, path, param)
    if files and not glob.glob(os.path.join(glob.escape(real), files)):
        raise InvalidArgument(
            f"{param}: {path!r} holds no {files} file (weights are loaded from safetensors "
            "only; pickled .bin/.pt files are refused)", param=param,
            reason="WEIGHTS_NOT_SAFETENSORS",
        )
    return real


def _no_link_out(real: str, root: str, path: str, param: str) -> None:
    """No file of the folder (what the engine reads: weights, index,
    config) is a link that leads out of the root."""
    with os.scandir(real) as entries:
        for entry in entries:
            if (entry.is_symlink() and not entry.is_dir()
                    and not _inside(os.path.realpath(entry.path), root)):
                raise InvalidArgument(
                    f"{param}: {path!r} holds {entry.name!r}, a link to a file outside the "
                    "server's --weights-root", param=param, reason="PATH_OUTSIDE_WEIGHTS_ROOT",
                )


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def check_lora_name(name: str, inplace: bool, loaded: list[str]) -> None:
    """Request checks of a LoRA load's name, made once for every engine."""
    if not name:
        raise InvalidArgument("lora_name is required", param="lora_name", reason="FIELD_REQUIRED")
    if name in loaded and not inplace:
        raise AlreadyExists(
            f"lora_name: an adapter named {name!r} is loaded (load_inplace replaces it)",
            param="lora_name", reason="LORA_EXISTS",
        )


def check_lora_known(name: str, loaded: list[str]) -> None:
    if not name:
        raise InvalidArgument("lora_name is required", param="lora_name", reason="FIELD_REQUIRED")
    if name not in loaded:
        raise NotFound(f"lora_name: no adapter named {name!r} is loaded", param="lora_name",
                       reason="LORA_NOT_FOUND")


def check_version(version: str, param: str) -> str:
    if len(version) > MAX_VERSION_CHARS:
        raise InvalidArgument(
            f"{param} must be at most {MAX_VERSION_CHARS} characters", param=param,
            reason="VALUE_TOO_LONG",
        )
    return version


def real_path(path: str) -> str:
    """A folder's real path (symlinks resolved, so a later change of a link
    such as "latest" does not change what it names); other names as given
    (a model id the engine resolved itself)."""
    return os.path.realpath(path) if is_folder(path) else path
