"""Getting the trainer's weights into tokenwire.

- `PathPush` (what runs here, CPU): save the weights as safetensors into a
  folder and call UpdateWeightsFromPath with the new version. keep mode:
  requests in flight continue on the new weights; the prefix cache is reset.
- `TransferPush` (GPU, not run here): vLLM's weight-transfer engine. The
  trainer-side engine (NCCL) broadcasts the parameters straight from the
  trainer's GPU; tokenwire's InitWeightTransfer / StartWeightUpdate /
  UpdateWeights / FinishWeightUpdate carry the control half, through
  `TokenwireWeightSyncClient` (vLLM's four-method VLLMWeightSyncClient).
"""

# `timeout` here is the gRPC deadline, sent to the server with the call.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from examples.rl.policy import Policy
from tokenwire.client import AsyncClient, Client, TokenwireError


class WeightPushError(RuntimeError):
    """The new weights did not reach the server; says which version it serves."""


class PathPush:
    """Save to one of two folders under `root` (alternately, so the folder
    the server loaded last is never rewritten while a load could still need
    it) and load it with UpdateWeightsFromPath."""

    def __init__(self, client: AsyncClient, root: Path, pause_mode: str = "keep"):
        self.client, self.root, self.pause_mode = client, Path(root), pause_mode
        self.count = 0

    async def push(self, policy: Policy, version: str) -> dict[str, float]:
        folder = self.root / f"slot-{self.count % 2}"
        self.count += 1
        t0 = time.perf_counter()
        await asyncio.to_thread(policy.save, folder)
        saved = time.perf_counter()
        stats = await self.load(folder, version)
        return {"save_ms": (saved - t0) * 1000, **stats}

    async def load(self, folder: Path, version: str, *, timeout: float = 600) -> dict[str, float]:
        t0 = time.perf_counter()
        try:
            resp = await self.client.control.update_weights_from_path(
                str(folder), version, pause_mode=self.pause_mode, timeout=timeout)
        except TokenwireError as exc:
            raise await self._failed(version, folder, exc) from exc
        if resp.state.weight_version != version:
            raise WeightPushError(f"asked for weights {version!r}, server serves "
                                  f"{resp.state.weight_version!r}")
        return {"update_ms": (time.perf_counter() - t0) * 1000, "load_ms": resp.load_ms,
                "paused_ms": resp.paused_ms}

    async def _failed(self, version: str, folder: Path, exc: TokenwireError) -> WeightPushError:
        try:
            state = await self.client.control.state(timeout=30)
            now = f"the server serves {state.weight_version!r}" + (
                " and is paused (a failed load; Resume needs force)" if state.paused else "")
        except TokenwireError as state_exc:
            now = f"the server's state is unknown ({state_exc})"
        return WeightPushError(f"weights {version!r} from {folder} did not load: {exc.code.name} "
                               f"{exc.reason or ''} {exc.message}; {now}")


class FleetPush:
    """The fleet variant: save once, then `update_fleet` pauses every replica,
    loads the folder on all of them, and rolls back and reports if any fails
    (tokenwire.client.fleet); the push fails unless every replica reports the
    new version, running."""

    def __init__(self, targets: list[str], root: Path, pause_mode: str = "keep"):
        self.targets, self.root, self.pause_mode = targets, Path(root), pause_mode
        self.count = 0

    async def push(self, policy: Policy, version: str) -> dict[str, Any]:
        from tokenwire.client.fleet import update_fleet

        folder = self.root / f"slot-{self.count % 2}"
        self.count += 1
        t0 = time.perf_counter()
        await asyncio.to_thread(policy.save, folder)
        t1 = time.perf_counter()
        report = await asyncio.to_thread(update_fleet, self.targets, str(folder), version=version,
                                         pause_mode=self.pause_mode)
        if not report.ok:
            raise WeightPushError(f"weights {version!r} did not reach the whole fleet: "
                                  f"{[(r.target, r.version, r.errors) for r in report.replicas]}")
        return {"save_ms": (t1 - t0) * 1000, "update_ms": (time.perf_counter() - t1) * 1000,
                "replicas": {r.target: r.version for r in report.replicas}}


class TokenwireWeightSyncClient:
    """vLLM's VLLMWeightSyncClient protocol over tokenwire's ControlService
    (blocking calls: vLLM's trainer engines call it from their own threads)."""

    def __init__(self, target: str, *, timeout: float = 600, admin_api_key: str | None = None):
        self.client = Client(target, timeout=timeout, admin_api_key=admin_api_key)
        self.next_version = ""  # what finish_weight_update names the new weights

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.client.control.init_weight_transfer(init_info)

    def start_weight_update(self) -> None:
        self.client.control.start_weight_update()

    def update_weights(self, update_info: Any) -> None:
        if isinstance(update_info, list):  # one payload per engine rank: not over one Struct
            for info in update_info:
                self.client.control.update_weights(info)
        else:
            self.client.control.update_weights(update_info)

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.client.control.finish_weight_update(weight_version or self.next_version)


class TransferPush:
    """GPU only (never run here): NCCL broadcast from the trainer to the
    engine started with ``--weight-transfer-config '{"backend": "nccl"}'``.
    `master` is host:port of the NCCL rendezvous; world size = 1 trainer +
    the engine's workers."""

    def __init__(self, target: str, policy: Policy, *, master: str, world_size: int):
        from vllm.distributed.weight_transfer import WeightTransferTrainerFactory
        from vllm.distributed.weight_transfer.base import ModuleSource
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        host, port = master.rsplit(":", 1)
        self.sync = TokenwireWeightSyncClient(target)
        self.engine = WeightTransferTrainerFactory.trainer_init(
            NCCLTrainerInitInfo(master_address=host, master_port=int(port), world_size=world_size,
                                rank=0),  # one trainer process: the sender
            client=self.sync, source=ModuleSource(policy.model))

    async def push(self, policy: Policy, version: str) -> dict[str, float]:
        del policy  # the engine's source reads the live parameters
        t0 = time.perf_counter()
        # send_weights drives start_weight_update, update_weights (concurrent
        # with the broadcast) and finish_weight_update, which names the version.
        self.sync.next_version = version
        await asyncio.to_thread(self.engine.send_weights)
        return {"update_ms": (time.perf_counter() - t0) * 1000}
