"""The worker methods the operator allowed (--collective-rpc-allow), which
of them a raw CollectiveRpc may call (`check_raw_call`), and how one is
called: on every worker, bounded by the control timeout. Both a
CollectiveRpc call (plane.py) and a load through a worker's loader
(weights.py: prime-rl's update_weights_from_path) go through here."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from tokenwire.server.control.checks import check_rpc_allowed
from tokenwire.server.core.engine_control import EngineControl
from tokenwire.server.core.errors import DeadlineExceeded, FailedPrecondition

# prime-rl's worker method behind its /update_weights {"weight_dir"} (its
# vLLM server calls it through collective_rpc).
PRIME_RL_UPDATE = "update_weights_from_path"
# Worker methods that change what the engine samples with, and the route
# that runs each as a weight change (pause, version label, generation, cache
# reset, failed-load label): a raw CollectiveRpc refuses them even when
# allowed (they are allowed for the routes' own use), naming the route.
WEIGHT_CHANGING_METHODS = {
    PRIME_RL_UPDATE: "/update_weights {weight_dir} (UpdateWeights)",
    "reload_weights": "/update_weights_from_disk (UpdateWeightsFromDisk)",
    "load_model": "/update_weights_from_disk (UpdateWeightsFromDisk)",
    "update_weights": "/start_weight_update, /update_weights, /finish_weight_update",
    "start_weight_update": "/start_weight_update (StartWeightUpdate)",
    "finish_weight_update": "/finish_weight_update (FinishWeightUpdate)",
    "init_weight_transfer_engine": "/init_weight_transfer_engine (InitWeightTransfer)",
    "add_lora": "/v1/load_lora_adapter (LoadLoraAdapter)",
    "remove_lora": "/v1/unload_lora_adapter (UnloadLoraAdapter)",
    "reset_weights": '/weight_checker {"action": "reset"} (CheckWeights, while paused)',
    "sleep": "/sleep (Sleep: level 2 discards the weights)",
    "wake_up": "/wake_up (WakeUp)",
}
# vLLM's own worker methods that only read: the only ones of vLLM's (below)
# a raw CollectiveRpc calls, and only when the operator allowed them.
READ_ONLY_VLLM_METHODS = frozenset({
    "check_health", "compute_weight_checksums", "get_cache_block_size_bytes",
    "get_compilation_match_table", "get_encoder_timing_stats", "get_model_inspection",
    "get_supported_kv_cache_layouts", "get_supported_tasks", "supports_draft_weight_updates",
})
# Every public name of vLLM 0.32's workers (vllm/v1/worker: WorkerBase, its
# wrapper, Worker, CPUWorker; tests/unit/control/test_control_side_doors.py
# holds this list equal to the installed vLLM's). Any of them but the
# read-only ones changes the engine (weights, caches, memory, the draft
# model, the process), writes files (save_sharded_state,
# save_tensorized_model, profile) or hands back objects: a raw CollectiveRpc
# refuses it even when allowed. A name not here is a worker extension's
# method (--worker-extension-cls): the operator's to allow.
VLLM_WORKER_METHODS = READ_ONLY_VLLM_METHODS | frozenset(WEIGHT_CHANGING_METHODS) - {
    PRIME_RL_UPDATE} | frozenset({
        "annotate_profile", "apply_model", "checkpoint_prepare", "checkpoint_restore",
        "compile_or_warm_up_model", "determine_available_memory", "discard",
        "elastic_ep_execute", "execute_dummy_batch", "execute_model", "get_draft_model",
        "get_kv_cache_spec", "get_kv_connector_handshake_metadata", "get_model",
        "handle_ft_command", "init_device", "init_worker", "initialize_from_config",
        "list_loras", "pin_lora", "profile", "randomize_dummy_inputs",
        "release_late_interaction_query_cache", "reset_encoder_cache", "reset_mm_cache",
        "sample_tokens", "save_sharded_state", "save_tensorized_model", "set_kv_cache_layout",
        "shutdown", "shutdown_weight_transfer_engine", "sleep_mode_backend",
        "start_draft_weight_update", "synchronize_device", "take_draft_token_ids",
        "update_config", "update_environment_variables", "update_max_model_len", "vocab_size",
    })


def check_raw_call(method: str, allowed: Callable[[str], bool]) -> str:
    """`method`, if a raw CollectiveRpc may call it: the operator allowed it
    (else PERMISSION_DENIED, check_rpc_allowed) and it is a worker
    extension's method or one of vLLM's read-only ones. A weight-changing
    one is FAILED_PRECONDITION WEIGHT_CHANGE_ROUTE_REQUIRED naming its route;
    any other of vLLM's, or a private name, FAILED_PRECONDITION
    WORKER_METHOD_NOT_READ_ONLY (docs/control.md, CollectiveRpc)."""
    if not allowed(method):
        check_rpc_allowed(method, frozenset())
    if method in WEIGHT_CHANGING_METHODS:
        raise FailedPrecondition(
            f"{method} changes the weights: call {WEIGHT_CHANGING_METHODS[method]}, which "
            "pauses, labels the version, resets the cache and counts the update; "
            "collective_rpc does none of that", param="method",
            reason="WEIGHT_CHANGE_ROUTE_REQUIRED")
    if method.startswith("_") or (method in VLLM_WORKER_METHODS
                                  and method not in READ_ONLY_VLLM_METHODS):
        raise FailedPrecondition(
            f"{method} is a method of vLLM's workers that changes the engine, writes files or "
            "answers what JSON cannot hold: collective_rpc calls only vLLM's read-only ones ("
            f"{', '.join(sorted(READ_ONLY_VLLM_METHODS))}) and a worker extension's methods, "
            "when --collective-rpc-allow lists them", param="method",
            reason="WORKER_METHOD_NOT_READ_ONLY")
    return method


class WorkerMethods:
    """The allowed worker methods, and calls of them that cannot hold the
    control lock for good."""

    def __init__(self, engine: EngineControl, allowed: tuple[str, ...], *, timeout: float):
        self._engine = engine
        self._allowed = frozenset(allowed)  # --collective-rpc-allow
        self._timeout = timeout

    def allowed(self, method: str) -> bool:
        return method in self._allowed

    def check(self, method: str) -> str:
        """`method`, or PERMISSION_DENIED when the operator did not allow it."""
        return check_rpc_allowed(method, self._allowed)

    def call(self, method: str, args: list[Any], kwargs: dict[str, Any],
             rpc_timeout: float | None) -> Awaitable[list[Any]]:
        """A worker method the operator allowed (--collective-rpc-allow),
        bounded by the control timeout (or the caller's shorter rpc timeout):
        a method that hangs ends DEADLINE_EXCEEDED and releases the control
        lock instead of holding it for good (the worker may still run it)."""
        self.check(method)
        limit = self._timeout if rpc_timeout is None else min(rpc_timeout, self._timeout)

        async def bounded() -> list[Any]:
            try:
                return await asyncio.wait_for(
                    self._engine.collective_rpc(method, args, kwargs, limit), limit)
            except TimeoutError:
                raise DeadlineExceeded(
                    f"collective_rpc {method}: no result within {limit:.1f} s (the control "
                    "timeout); the control lock is released, the workers may still run it",
                    param="method", reason="COLLECTIVE_RPC_TIMEOUT") from None

        return bounded()
