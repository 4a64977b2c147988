"""The engine adapter: vLLM's AsyncLLM behind the domain Engine protocol.

Runs AsyncLLM in-process (its engine core is a spawned subprocess); the
conversion between the domain types and vLLM's is in convert.py, the
flags in args.py, the control half in control.py, several serving
processes over one engine core in launcher.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from tokenwire.server.core import errors, tracing, validation
from tokenwire.server.core.domain import (
    EngineOutput,
    EngineRequest,
    RenderOptions,
)
from tokenwire.server.core.kv_events import KvEventBatch
from tokenwire.server.core.media_inputs import FeatureItem, MediaPart, MultimodalPrompt
from tokenwire.server.core.parsing import ParserConfig
from tokenwire.server.core.pooling import PoolOutput, PoolRequest
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.tokenizer_ops import ChatTemplateDefaults, TokenizerOps
from tokenwire.server.engine.vllm import kv_events, worker_facts
from tokenwire.server.engine.vllm.args import (
    describe,
    engine_env,
    programmatic_engine_args,
    stats_for_tracing,
)
from tokenwire.server.engine.vllm.chat_media import VllmChatMedia
from tokenwire.server.engine.vllm.control import VllmControl
from tokenwire.server.engine.vllm.convert import (
    convert_output,
    engine_failure,
    map_engine_error,
    sampling_params,
)
from tokenwire.server.engine.vllm.harmony import is_harmony, render_harmony
from tokenwire.server.engine.vllm.mm_features import (
    VllmMultimodal,
    engine_input_of,
    media_features_json,
)
from tokenwire.server.engine.vllm.parsers import VllmChatParsers, import_plugins
from tokenwire.server.engine.vllm.scoring import VllmScoring, type_ids_extra

log = logging.getLogger("tokenwire.engine")


class VllmEngine(VllmControl):
    """vLLM AsyncLLM behind the domain Engine and EngineControl protocols."""

    def __init__(self, settings: ServerSettings, client_config: dict[str, Any] | None = None):
        """`client_config`: this process is one of several serving processes
        over a shared engine core (run_shared_engine); vLLM's client
        addresses, count and index."""
        engine_env()
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self._settings = settings
        kwargs = stats_for_tracing(dict(settings.engine_args) or programmatic_engine_args(settings))
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
        defaults = ChatTemplateDefaults.from_settings(settings)
        self._harmony = is_harmony(self._llm.model_config)  # gpt-oss: vLLM's harmony rendering
        self._tok = TokenizerOps(self._llm.get_tokenizer(), defaults,
                                 detect_format=self._detect_content_format)
        self._chat_media = VllmChatMedia(self._llm, defaults.content_format, defaults.template,
                                         defaults.kwargs)
        self._vocab_size = max(int(self._llm.model_config.get_vocab_size()), self._tok.size)
        self._parsers: dict[ParserConfig, VllmChatParsers | None] = {}
        # The plugins' parsers, registered in this process too (a serving
        # process of --api-server-count is a fresh one).
        import_plugins(settings.tool_parser_plugin, settings.reasoning_parser_plugin)
        self.chat_parsers(settings.parser_config())  # an unusable parser fails the start
        self._max_token_chars = self._tok.max_token_chars()
        self._media = VllmMultimodal(self._llm)
        self._scoring = VllmScoring(self._llm, defaults.template)
        self._token_widths: dict[str, int] = {}  # a token-level task -> its output's width
        self._task_instructions: dict[str, str] | None = None
        self._loras: dict[str, Any] = {}
        self._replaced_loras: list[Any] = []
        self._sampling_defaults = dict(self._llm.model_config.get_diff_sampling_param())
        if self._sampling_defaults:
            log.info("sampling defaults from the generation config: %s", self._sampling_defaults)

    def sampling_defaults(self) -> dict[str, Any]:
        return self._sampling_defaults

    def model_facts(self) -> dict[str, Any]:
        return worker_facts.model_facts(self._llm, self._tok.raw)

    def load_report(self) -> dict[str, float]:
        return worker_facts.load_report()

    def kv_events(self) -> AsyncIterator[KvEventBatch]:
        cfg = self._llm.vllm_config
        config = cfg.kv_events_config
        reported: dict[int, Any] = dict(self._llm.get_kv_event_sources() or {})
        endpoints = kv_events.sources(config, cfg.parallel_config, reported)
        return kv_events.subscribe(endpoints, str(getattr(config, "topic", "") or ""))

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

    def chat_parsers(self, config: ParserConfig) -> VllmChatParsers | None:
        if config not in self._parsers:
            made = None
            if config.tool_call_parser or config.reasoning_parser:
                made = VllmChatParsers(config, self._tok.raw, self._llm.model_config)
            self._parsers[config] = made
        return self._parsers[config]

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
        if self._harmony:
            return render_harmony(messages, options)
        return self._tok.render_chat(messages, options)

    def _detect_content_format(self, template: str | None,
                               tools: list[dict[str, Any]] | None) -> str:
        """--chat-template-content-format auto: vLLM's detection (does the
        template loop over content parts?)."""
        from vllm.renderers.hf import resolve_chat_template_content_format

        return str(resolve_chat_template_content_format(
            template, tools, "auto", self._tok.raw, model_config=self._llm.model_config))

    async def render_chat_media(self, messages: list[dict[str, Any]],
                                options: RenderOptions) -> MultimodalPrompt:
        return await self._chat_media.render(messages, options)

    # -- media ------------------------------------------------------------
    @property
    def takes_media(self) -> bool:
        return self._media.enabled

    async def prepare_media(self, prompt: list[int], *, parts: list[MediaPart] | None = None,
                            features: list[FeatureItem] | None = None) -> MultimodalPrompt:
        if parts:
            return await self._media.from_parts(prompt, parts)
        return await asyncio.to_thread(self._media.from_features, prompt, features or [])

    def join_media(self, earlier: MultimodalPrompt | None, later: MultimodalPrompt,
                   prompt: list[int], shift: int) -> MultimodalPrompt:
        return self._media.join(earlier, later, prompt, shift)

    async def media_features(self, prepared: MultimodalPrompt) -> dict[str, Any]:
        return await asyncio.to_thread(media_features_json, prepared)

    # -- generation -------------------------------------------------------
    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        from vllm.inputs.engine import tokens_input

        sp = sampling_params(request.params, request.stream)
        if request.multimodal is not None:
            prompt = engine_input_of(request.multimodal, request.cache_salt or None)
        else:
            prompt = tokens_input(list(request.prompt_token_ids),
                                  cache_salt=request.cache_salt or None)
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
                reasoning_ended=request.reasoning_ended,
                reasoning_parser_kwargs=request.reasoning_kwargs,
                trace_headers=tracing.trace_headers.get(),  # the RPC's span (api/tracing.py)
            ):
                converted = convert_output(out, wall_offset, full or out.finished)
                full = False
                failed = engine_failure(converted)
                if failed is not None:
                    before, error = failed
                    if before is not None:
                        yield before
                    raise error
                yield converted
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise map_engine_error(exc) from exc

    # -- pooling ------------------------------------------------------------
    @property
    def pooling(self) -> bool:
        return str(getattr(self._llm.model_config, "runner_type", "")) == "pooling"

    async def pool(self, request: PoolRequest) -> PoolOutput:
        from vllm import PoolingParams
        from vllm.inputs.engine import tokens_input

        tasks = await self._llm.get_supported_tasks()  # (cached by vLLM)
        config = self._llm.model_config
        default = str(config.get_pooling_task(tasks) or "")
        task = request.task or default  # /pooling without a task: the model's, as vLLM's
        validation.check_pooling_task(task, default, tuple(str(t) for t in tasks),
                                      named=request.only_pooling_task)
        params = PoolingParams(task=task,  # type: ignore[arg-type]  # (checked: the model's)
                               dimensions=request.dimensions,
                               use_activation=request.use_activation)
        if request.token_type_ids is not None:  # a cross-encoder pair's segments
            params.extra_kwargs = type_ids_extra(request.token_type_ids)
        try:  # vLLM's own rules (the model's tasks, matryoshka dimensions) before it runs
            params.verify(config)
        except Exception as exc:  # (vLLM's VLLMValidationError, a ValueError elsewhere)
            if request.dimensions is not None:
                raise errors.InvalidArgument(f"dimensions: {exc}", param="dimensions",
                                             reason="VALUE_OUT_OF_RANGE") from exc
            raise errors.FailedPrecondition(
                f"the served model does not serve {request.task!r}: {exc}",
                reason="TASK_NOT_SUPPORTED") from exc
        final = None
        try:
            async for out in self._llm.encode(
                tokens_input(list(request.prompt_token_ids)), params, request.request_id,
                lora_request=self.lora_request(request.lora), priority=request.priority,
                trace_headers=tracing.trace_headers.get(),
            ):
                final = out
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise map_engine_error(exc) from exc
        if final is None:
            raise errors.Unavailable("the engine ended the request without its output",
                                     reason="ENGINE_REQUEST_FAILED")
        tensor = final.outputs.data.float()
        if tensor.dim() > 1:  # a token-level task: its rows kept as one array
            if request.dimensions is None:
                self._token_widths[task] = int(tensor.shape[-1])
            # A buffer of its own (the tensor may be a view into the engine's
            # message): allocated by torch, aligned, so MaxSim's matmul rounds
            # as on the arrays vLLM's server scores (its alignment changes the
            # last bit); one copy, no Python number per value.
            rows = tensor.cpu().contiguous()
            if rows.data_ptr() == tensor.data_ptr():
                rows = rows.clone()
            return PoolOutput([], rows=rows.numpy())
        data = [float(x) for x in tensor.tolist()]
        label = None
        if task == "classify" and data:  # vLLM's: the top class's name
            names = getattr(config.hf_config, "id2label", None) or {}
            label = names.get(max(range(len(data)), key=data.__getitem__))
        return PoolOutput(data, label)

    async def token_width(self, task: str, dimensions: int | None) -> int | None:
        """token_classify: the model's labels; token_embed: `dimensions`, or
        what its last output held (a late-interaction model's projection is
        its own: not known before it answered once)."""
        tasks = await self._llm.get_supported_tasks()  # (cached by vLLM)
        config = self._llm.model_config
        task = task or str(config.get_pooling_task(tasks) or "")
        if not task.startswith("token_"):
            return None
        if dimensions is not None:
            return dimensions
        if task in self._token_widths:
            return self._token_widths[task]
        if task == "token_classify":
            return int(getattr(config.hf_config, "num_labels", 0) or 0) or None
        return None

    async def score_type(self) -> str | None:
        return await self._scoring.score_type()

    def pooling_tokens(self, text: str, *, add_special_tokens: bool, truncate: int | None,
                       side: str | None) -> list[int]:
        return self._scoring.pooling_tokens(text, add_special_tokens=add_special_tokens,
                                            truncate=truncate, side=side)

    def score_prompt(self, query: str, document: str, *, max_query_tokens: int = 0,
                     max_doc_tokens: int = 0, template_kwargs: dict[str, Any] | None = None,
                     truncate: int | None = None, side: str | None = None,
                     ) -> tuple[list[int], list[int] | None]:
        return self._scoring.score_prompt(query, document, max_query_tokens=max_query_tokens,
                                          max_doc_tokens=max_doc_tokens,
                                          template_kwargs=template_kwargs, truncate=truncate,
                                          side=side)

    def truncate_text(self, text: str, max_tokens: int) -> str:
        return self._scoring.truncate_text(text, max_tokens)

    def task_instructions(self) -> dict[str, str]:
        if self._task_instructions is None:  # (read once: the model's files)
            self._task_instructions = self._scoring.task_instructions()
        return self._task_instructions

    def has_chat_template(self) -> bool:
        return self._scoring.has_chat_template()

    def similarity(self, query: PoolOutput, document: PoolOutput) -> float:
        return self._scoring.similarity(query, document)

    def num_unfinished_requests(self) -> int:
        return int(self._llm.get_num_unfinished_requests())

    async def check_health(self) -> None:
        try:
            await self._llm.check_health()
        except Exception as exc:
            raise errors.Unavailable(f"engine is not healthy: {exc}",
                                     reason="ENGINE_UNHEALTHY") from exc

    def shutdown(self) -> None:
        self._llm.shutdown()

