"""The engine adapter: the only module that imports vLLM.

Runs vLLM's AsyncLLM in-process (its engine core is a spawned subprocess)
and translates between the domain types and vLLM's.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from tokenwire.server.core import errors
from tokenwire.server.core.domain import (
    DEFAULT_REASONING_MARKERS,
    LOGPROB_FLOOR,
    Candidate,
    ChoiceOutput,
    EngineOutput,
    EngineRequest,
    EngineTimes,
    GenerationParams,
    PositionLogprobs,
    RenderOptions,
    WeightSpan,
    finite_logprob,
)
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.tokenizer_ops import TokenizerOps
from tokenwire.server.engine.vllm.control import VllmControl

log = logging.getLogger("tokenwire.engine")


def _engine_env(settings: ServerSettings) -> None:
    # On CPU, let OpenMP use every core unless the operator said otherwise
    # ("auto" reserves one of two cores, halving decode speed here).
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


class VllmEngine(VllmControl):
    """vLLM AsyncLLM behind the domain Engine and EngineControl protocols."""

    def __init__(self, settings: ServerSettings, client_config: dict[str, Any] | None = None):
        """`client_config`: this process is one of several serving processes
        over a shared engine core (run_shared_engine); vLLM's client
        addresses, count and index."""
        _engine_env(settings)
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self._settings = settings
        kwargs = dict(settings.engine_args) or programmatic_engine_args(settings)
        self._model_path = str(kwargs["model"])
        log.info("engine configuration: %s", describe(kwargs))
        args = AsyncEngineArgs(**kwargs)
        if client_config is None:
            self._llm = AsyncLLM.from_engine_args(args)
        else:
            config = dict(client_config)
            count, index = config.pop("client_count"), config.pop("client_index")
            config.pop("api_server_loads", None)  # vLLM's HTTP accept balancing; gRPC: the kernel's
            args._api_process_count, args._api_process_rank = count, index
            self._llm = AsyncLLM.from_vllm_config(
                args.create_engine_config(), disable_log_stats=args.disable_log_stats,
                client_addresses=config, client_count=count, client_index=index,
            )
        self._max_model_len = int(self._llm.model_config.max_model_len)
        self._tok = TokenizerOps(self._llm.get_tokenizer())
        self._vocab_size = max(int(self._llm.model_config.get_vocab_size()), self._tok.size)
        self._reasoning_markers = _reasoning_markers(settings.reasoning_parser, self._tok.raw)
        self._max_token_chars = self._tok.max_token_chars()
        self._loras: dict[str, Any] = {}
        self._sampling_defaults = dict(self._llm.model_config.get_diff_sampling_param())
        if self._sampling_defaults:
            log.info("sampling defaults from the generation config: %s", self._sampling_defaults)

    def sampling_defaults(self) -> dict[str, Any]:
        return self._sampling_defaults

    def config_report(self) -> dict[str, Any]:
        from vllm.platforms import current_platform

        cfg = self._llm.vllm_config
        par, cache, sched = cfg.parallel_config, cfg.cache_config, cfg.scheduler_config
        lora = getattr(cfg, "lora_config", None)
        return {
            "model": self._model_path, "dtype": str(cfg.model_config.dtype).removeprefix("torch."),
            "tensor_parallel_size": par.tensor_parallel_size,
            "pipeline_parallel_size": par.pipeline_parallel_size,
            "data_parallel_size": par.data_parallel_size,
            "max_model_len": self._max_model_len, "block_size": cache.block_size,
            "max_num_seqs": sched.max_num_seqs, "enable_lora": lora is not None,
            "max_lora_rank": lora.max_lora_rank if lora is not None else 0,
            "logprobs_mode": str(cfg.model_config.logprobs_mode),
            "platform": str(current_platform.device_type),
        }

    # -- properties -------------------------------------------------------
    @property
    def model_path(self) -> str:
        return self._model_path

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def reasoning_markers(self) -> tuple[str, str]:
        return self._reasoning_markers

    @property
    def max_token_chars(self) -> int:
        return self._max_token_chars

    # -- tokenizer --------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        return self._tok.encode(text, add_special_tokens)

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str:
        return self._tok.decode(token_ids, skip_special_tokens)

    def token_text(self, token_id: int) -> str:
        return self._tok.token_text(token_id)

    def token_bytes(self, token_id: int) -> bytes:
        return self._tok.token_bytes(token_id)

    def render_chat(self, messages: list[dict[str, Any]], options: RenderOptions) -> list[int]:
        return self._tok.render_chat(messages, options)

    # -- generation -------------------------------------------------------
    def _sampling_params(self, p: GenerationParams, stream: bool) -> Any:
        from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

        structured = None
        if p.structured is not None:
            if p.structured.json_schema is not None:
                structured = StructuredOutputsParams(json=p.structured.json_schema)
            elif p.structured.json_object:
                structured = StructuredOutputsParams(json_object=True)
        return SamplingParams(
            n=p.n,
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k if p.top_k > 0 else 0,
            min_p=p.min_p,
            presence_penalty=p.presence_penalty,
            frequency_penalty=p.frequency_penalty,
            repetition_penalty=p.repetition_penalty,
            max_tokens=p.max_tokens,
            min_tokens=p.min_tokens,
            seed=p.seed,
            stop=list(p.stop) or None,
            stop_token_ids=list(p.stop_token_ids) or None,
            ignore_eos=p.ignore_eos,
            logprobs=p.logprobs,
            prompt_logprobs=p.prompt_logprobs,
            skip_special_tokens=p.skip_special_tokens,
            spaces_between_special_tokens=p.spaces_between_special_tokens,
            include_stop_str_in_output=p.include_stop_str_in_output,
            logit_bias=dict(p.logit_bias) or None,
            thinking_token_budget=p.thinking_token_budget,
            structured_outputs=structured,
            detokenize=p.detokenize,
            stream_interval=p.stream_interval if stream else None,
            output_kind=RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY,
        )

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        from vllm.inputs.engine import tokens_input

        sp = self._sampling_params(request.params, request.stream)
        prompt = tokens_input(list(request.prompt_token_ids), cache_salt=request.cache_salt or None)
        # Offset turning the engine core's monotonic stamps into wall time.
        wall_offset = time.time() - time.monotonic()
        # Prompt ids and engine timestamps go with the first and the last
        # output only (consumers keep the first), not with every token.
        full = True
        try:
            async for out in self._llm.generate(
                prompt, sp, request.request_id, priority=request.priority,
                lora_request=self.lora_request(request.lora),
                data_parallel_rank=request.data_parallel_rank,
            ):
                yield _convert_output(out, wall_offset, full or out.finished)
                full = False
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise _map_engine_error(exc) from exc

    def num_unfinished_requests(self) -> int:
        return int(self._llm.get_num_unfinished_requests())

    async def check_health(self) -> None:
        try:
            await self._llm.check_health()
        except Exception as exc:
            raise errors.Unavailable(f"engine is not healthy: {exc}", reason="ENGINE_UNHEALTHY") from exc

    def shutdown(self) -> None:
        self._llm.shutdown()


def run_shared_engine(settings: ServerSettings, worker: Any) -> None:
    """vLLM's multi-API-server mode for tokenwire: start one engine core and
    settings.api_server_count processes running `worker(settings,
    client_config)` (each builds VllmEngine(settings, client_config) and
    serves on the shared port); return when they have all exited (SIGTERM
    or SIGINT here stops them, then the engine core)."""
    import signal

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.utils import bind_engine_zmq_listeners, launch_core_engines
    from vllm.v1.executor import Executor
    from vllm.v1.utils import APIServerProcessManager, wait_for_completion_or_failure

    _engine_env(settings)
    count = settings.api_server_count
    args = AsyncEngineArgs(**(dict(settings.engine_args) or programmatic_engine_args(settings)))
    args._api_process_count, args._api_process_rank = count, -1
    config = args.create_engine_config()
    listeners = bind_engine_zmq_listeners(config, count)

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    manager = None
    with launch_core_engines(config, Executor.get_class(config), not args.disable_log_stats,
                             listeners.addresses) as launch:
        coordinator = launch.coordinator
        manager = APIServerProcessManager(
            listen_address=f"{settings.host}:{settings.port}", sock=None, args=settings,
            num_servers=count, input_listeners=listeners.inputs,
            output_listeners=listeners.outputs, target_server_fn=worker,
            stats_update_address=coordinator.get_stats_publish_address() if coordinator else None,
        )
        launch.watched_frontend_processes = manager.processes
    try:
        wait_for_completion_or_failure(api_server_manager=manager,
                                       engine_manager=launch.engine_manager,
                                       coordinator=coordinator)
    except SystemExit:
        pass
    finally:
        manager.shutdown(timeout=settings.grace_seconds + settings.drain_seconds + 5)
        if launch.engine_manager:
            launch.engine_manager.shutdown(timeout=30)
        if coordinator:
            coordinator.shutdown(timeout=30)


def programmatic_engine_args(settings: ServerSettings) -> dict[str, Any]:
    """Engine arguments for settings built in Python (not from the command
    line): the engine facts as vLLM flags, resolved like `tokenwire serve`."""
    from tokenwire.server.core.settings import add_arguments
    from tokenwire.server.engine.vllm.args import build_parser, given_dests, resolve

    argv = ["--model", settings.resolved_model(), "--max-model-len", str(settings.max_model_len),
            "--block-size", str(settings.block_size),
            "--scheduling-policy", settings.scheduling_policy]
    if settings.served_model_name:
        argv += ["--served-model-name", settings.served_model_name]
    if settings.reasoning_parser:
        argv += ["--reasoning-parser", settings.reasoning_parser]
    parser = build_parser(add_arguments)
    return resolve(parser.parse_args(argv), given_dests(parser, argv), settings.resolved_model)


REPORTED = ("model", "served_model_name", "dtype", "tensor_parallel_size", "pipeline_parallel_size",
            "data_parallel_size", "max_model_len", "block_size", "max_num_seqs",
            "kv_cache_memory_bytes", "enable_prefix_caching", "enable_chunked_prefill",
            "enforce_eager", "logprobs_mode", "scheduling_policy", "enable_lora", "max_lora_rank",
            "distributed_executor_backend")


def describe(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={kwargs.get(k)!r}" for k in REPORTED if k in kwargs)


def _reasoning_markers(parser_name: str, tokenizer: Any) -> tuple[str, str]:
    """The think markers of vLLM's reasoning parser, else <think>…</think>."""
    if not parser_name:
        return DEFAULT_REASONING_MARKERS
    try:
        from vllm.reasoning import ReasoningParserManager

        parser = ReasoningParserManager.get_reasoning_parser(parser_name)(tokenizer)
        start, end = getattr(parser, "start_token", None), getattr(parser, "end_token", None)
    except Exception as exc:
        log.warning("reasoning parser %s gives no markers (%s); using <think>", parser_name, exc)
        return DEFAULT_REASONING_MARKERS
    if isinstance(start, str) and isinstance(end, str) and start and end:
        return (start, end)
    return DEFAULT_REASONING_MARKERS


def _finite(x: float) -> float:
    return finite_logprob(x)[0]


def _position(sampled: int, entry: Any) -> PositionLogprobs:
    """One position of vLLM logprobs ({token_id: Logprob}) to the domain."""
    if entry is None:
        return PositionLogprobs(sampled, LOGPROB_FLOOR, None, [])
    sampled_lp = entry.get(sampled)
    ranked = sorted(
        (Candidate(tid, _finite(lp.logprob), lp.rank) for tid, lp in entry.items()),
        key=lambda c: (c.rank if c.rank is not None else 1 << 30),
    )
    if sampled_lp is None:
        return PositionLogprobs(sampled, LOGPROB_FLOOR, None, ranked)
    logprob, non_finite = finite_logprob(sampled_lp.logprob)
    return PositionLogprobs(sampled, logprob, sampled_lp.rank, ranked, non_finite)


_NO_IDS: list[int] = []  # shared, never mutated


def npy_bytes(array: Any) -> bytes:
    """An array as .npy bytes (what vLLM base64-encodes for routed experts)."""
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def _convert_output(out: Any, wall_offset: float, full: bool) -> EngineOutput:
    """One vLLM RequestOutput to the domain. `full`: also the prompt ids and
    the engine's timestamps (first and last output of a request)."""
    choices = []
    for c in out.outputs:
        ids = c.token_ids
        ids = ids if type(ids) is list else list(ids)
        lps = None
        if c.logprobs is not None:
            lps = [_position(tid, c.logprobs[i]) for i, tid in enumerate(ids)]
        spans = None
        if c.weight_versions:  # set on the output that finishes the choice
            spans = [WeightSpan(str(w.version), int(w.start), int(w.end)) for w in c.weight_versions]
        routed = getattr(c, "routed_experts", None)  # with --enable-return-routed-experts
        choices.append(
            ChoiceOutput(c.index, ids, c.text or "", lps, c.finish_reason, c.stop_reason, spans,
                         None if routed is None else npy_bytes(routed))
        )
    if not full:
        return EngineOutput(choices, _NO_IDS, int(out.num_cached_tokens or 0), bool(out.finished))
    prompt_lps = None
    if out.prompt_logprobs is not None:
        prompt_ids = out.prompt_token_ids or []
        prompt_lps = [
            None if entry is None else _position(prompt_ids[i], entry)
            for i, entry in enumerate(out.prompt_logprobs)
        ]
    times = None
    m = getattr(out, "metrics", None)
    if m is not None:

        def wall(ts: float) -> float | None:
            return ts + wall_offset if ts else None

        times = EngineTimes(
            arrival=getattr(m, "arrival_time", None) or None,
            scheduled=wall(getattr(m, "scheduled_ts", 0.0)),
            first_token=wall(getattr(m, "first_token_ts", 0.0)),
            last_token=wall(getattr(m, "last_token_ts", 0.0)),
        )
    return EngineOutput(
        choices=choices,
        prompt_token_ids=list(out.prompt_token_ids or []),
        num_cached_tokens=int(out.num_cached_tokens or 0),
        finished=bool(out.finished),
        prompt_logprobs=prompt_lps,
        times=times,
    )


def _map_engine_error(exc: BaseException) -> errors.TokenwireError:
    """vLLM exceptions to tokenwire errors (validation, overload, death)."""
    from vllm.exceptions import GracefulHTTPError, VLLMClientError, VLLMValidationError
    from vllm.v1.engine.exceptions import EngineDeadError

    if isinstance(exc, errors.TokenwireError):
        return exc
    if isinstance(exc, EngineDeadError):
        return errors.Unavailable(f"the engine died: {exc}", reason="ENGINE_DEAD")
    if isinstance(exc, VLLMValidationError):
        return errors.InvalidArgument(f"rejected by the engine: {exc}", param=exc.parameter, reason="ENGINE_REJECTED")
    if isinstance(exc, VLLMClientError):
        return errors.InvalidArgument(f"rejected by the engine: {exc}", reason="ENGINE_REJECTED")
    if isinstance(exc, GracefulHTTPError):
        if int(exc.http_status) in (429, 503):
            return errors.ResourceExhausted(f"the engine is full: {exc.message}", reason="ENGINE_FULL")
        return errors.Unavailable(exc.message, reason="ENGINE_UNAVAILABLE")
    incident = uuid.uuid4().hex[:12]
    log.error("engine error %s: %s: %s", incident, type(exc).__name__, exc)
    return errors.Internal(f"engine error (incident {incident}; details are in the server log)", reason="INTERNAL")
