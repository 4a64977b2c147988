"""The engine's control half, engine-neutral: what the control plane needs
from an engine (EngineControl, vLLM's own control APIs behind it), and the
pause modes. Nothing here imports vLLM or protobuf."""

from __future__ import annotations

import os
from typing import Any, Protocol

PAUSE_MODES = ("abort", "wait", "keep")


def is_folder(path: str) -> bool:
    """A cheap stat (sync on purpose: a local metadata lookup)."""
    return os.path.isdir(path)


class EngineControl(Protocol):
    """What the control plane needs from an engine: vLLM's own control APIs
    (AsyncLLM pause/resume, reset_prefix_cache, reload_weights through
    collective_rpc, the weight-transfer engine, sleep/wake, LoRA)."""

    @property
    def model_path(self) -> str:
        """The model the engine started with (a folder, or a model id)."""
        ...

    # The weight files a load reads, as a glob ("*.safetensors"); a folder
    # to load must hold one. "": no check (an engine that reads no files).
    weight_files: str

    async def pause(self, mode: str, clear_cache: bool) -> None:
        """mode: "abort" (end in-flight requests now), "wait" (let them
        finish), "keep" (freeze them until resume). New requests wait."""
        ...

    async def resume(self) -> None: ...

    async def is_paused(self) -> bool: ...

    async def reset_prefix_cache(self, reset_running_requests: bool) -> bool: ...

    async def reset_mm_cache(self) -> None: ...

    async def reset_encoder_cache(self) -> None: ...

    async def weight_checksums(self) -> dict[str, str]:
        """Every worker's digest of every parameter (vLLM's
        compute_weight_checksums, keyed "dp0:pp0:pcp0:tp0:<name>")."""
        ...

    async def zero_weights(self) -> None:
        """Zero every weight (vLLM's workers' reset_weights)."""
        ...

    async def reload_weights(self, path: str) -> None:
        """Load a checkpoint folder with the same architecture in place."""
        ...

    async def weight_version(self) -> str: ...

    async def set_weight_version(self, version: str) -> None: ...

    async def init_weight_transfer(self, init_info: dict[str, Any]) -> None: ...

    async def start_weight_update(self) -> None: ...

    async def update_weights(self, update_info: dict[str, Any]) -> None: ...

    async def finish_weight_update(self) -> None: ...

    async def sleep(self, level: int, mode: str) -> None:
        """Raise FailedPrecondition where the platform cannot sleep."""
        ...

    async def wake_up(self, tags: list[str] | None) -> bool: ...

    async def is_sleeping(self) -> bool: ...

    async def abort_requests(self, request_ids: list[str] | None) -> int:
        """Abort by the ids given to generate(); None: every request."""
        ...

    async def add_lora(self, name: str, path: str, load_inplace: bool) -> None:
        """Load the adapter and serve `name` from it; a load it replaces
        stays in the engine until drop_replaced_loras."""
        ...

    async def drop_replaced_loras(self) -> None:
        """Remove from the engine the loads add_lora replaced."""
        ...

    async def remove_lora(self, name: str) -> None: ...

    def lora_names(self) -> list[str]: ...

    def lora_table(self) -> dict[str, tuple[str, int]]:
        """name -> (folder, load number) of the adapters this process serves."""
        ...

    def adopt_loras(self, table: dict[str, tuple[str, int]]) -> None:
        """Serve exactly `table`'s adapters, loads the shared engine core
        holds already (another serving process loaded them)."""
        ...

    def world_size(self, include_dp: bool) -> int:
        """Engine workers: tensor x pipeline parallel (x data parallel)."""
        ...

    def engine_config(self, as_json: bool) -> Any:
        """The engine's configuration (vLLM's /server_info): its text, or a
        JSON-ready tree whose `weight_transfer_config` is None without one."""
        ...

    async def collective_rpc(self, method: str, args: list[Any], kwargs: dict[str, Any],
                             rpc_timeout: float | None) -> list[Any]:
        """Call `method` on every worker; per worker its JSON-ready result."""
        ...
