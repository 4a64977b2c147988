"""The inputs of vLLM's pooling routes and its scoring, with vLLM's own
pieces (vllm/renderers/params.py, vllm/entrypoints/pooling/scoring/): a
text tokenized as /v1/embeddings, /classify, /pooling and /score tokenize
it (vLLM's TokenizeParams: an encoder's lowercasing; with
truncate_prompt_tokens the tokenizer's own truncation, special tokens
kept, or with a truncation_side the ids cut from it); the score type vLLM
serves for the model (`enable_scoring_api`, `SCORE_TYPE_MAP`); a
cross-encoder's pair prompt from vLLM's CrossEncoderIOProcessor (the
model's score template, the server's --chat-template as a score template,
the tokenizer's text pair with its segment ids, or the texts joined; its
per-query / per-document cuts; the pair's truncation); the bi-encoder's
cosine and late interaction's MaxSim as vLLM computes them. Part of the
engine adapter (imports vLLM)."""

from __future__ import annotations

from typing import Any

from tokenwire.server.core import errors
from tokenwire.server.core.pooling import PoolOutput


class VllmScoring:
    def __init__(self, llm: Any, chat_template: str | None):
        self._llm = llm
        self._chat_template = chat_template
        self._cross: Any = None  # vLLM's CrossEncoderIOProcessor, made on first use

    async def score_type(self) -> str | None:
        from vllm.entrypoints.pooling.utils import enable_scoring_api
        from vllm.tasks import SCORE_TYPE_MAP

        config = self._llm.model_config
        if str(getattr(config, "runner_type", "")) != "pooling":
            return None
        tasks = await self._llm.get_supported_tasks()
        if not enable_scoring_api(tasks, config):
            return None
        if config.architecture == "JinaForRanking":  # its own scorer: not served here
            return "jina-reranking"
        return SCORE_TYPE_MAP.get(config.get_pooling_task(tasks))

    def _processor(self) -> Any:
        if self._cross is None:
            from vllm.entrypoints.pooling.scoring.io_processor import CrossEncoderIOProcessor
            from vllm.renderers.chat_utils import ChatTemplateConfig

            self._cross = CrossEncoderIOProcessor(
                vllm_config=self._llm.vllm_config, renderer=self._llm.renderer,
                chat_template_config=ChatTemplateConfig(chat_template=self._chat_template))
        return self._cross

    def _params(self, add_special_tokens: bool, truncate: int | None, side: str | None
                ) -> Any:
        """vLLM's TokenizeParams of a pooling request (its
        _build_pooling_tok_params): the window, no output, the encoder's case."""
        from vllm.renderers import TokenizeParams

        config = self._llm.model_config
        return TokenizeParams(
            max_total_tokens=int(config.max_model_len), max_output_tokens=0,
            truncate_prompt_tokens=truncate, truncation_side=side,  # type: ignore[arg-type]
            do_lower_case=bool((config.encoder_config or {}).get("do_lower_case", False)),
            add_special_tokens=add_special_tokens)

    def pooling_tokens(self, text: str, *, add_special_tokens: bool, truncate: int | None,
                       side: str | None) -> list[int]:
        from vllm.exceptions import VLLMValidationError

        tokenizer = self._llm.get_tokenizer()
        params = self._params(add_special_tokens, truncate, side)
        try:
            text = params.apply_pre_tokenization(tokenizer, {"prompt": text})["prompt"]
            ids = tokenizer.encode(text, **params.get_encode_kwargs())
            out = params.apply_post_tokenization(tokenizer, {"prompt_token_ids": ids})
        except VLLMValidationError as exc:  # too long for the window
            raise errors.InvalidArgument(str(exc), reason="PROMPT_TOO_LONG") from exc
        return list(out["prompt_token_ids"])

    def score_prompt(self, query: str, document: str, *, max_query_tokens: int = 0,
                     max_doc_tokens: int = 0, template_kwargs: dict[str, Any] | None = None,
                     truncate: int | None = None, side: str | None = None,
                     ) -> tuple[list[int], list[int] | None]:
        from vllm.exceptions import VLLMValidationError

        processor = self._processor()
        params = self._params(True, truncate, side)
        try:
            _, prompt = processor.get_score_prompt(
                data_1=query, data_2=document, encode_kwargs=params.get_encode_kwargs(),
                chat_template=self._chat_template, max_tokens_per_query=max_query_tokens,
                max_tokens_per_doc=max_doc_tokens, chat_template_kwargs=template_kwargs)
            types = prompt.pop("token_type_ids", None)
            params.apply_post_tokenization(processor.tokenizer, prompt)
        except VLLMValidationError as exc:  # too long for the window
            raise errors.InvalidArgument(str(exc), reason="PROMPT_TOO_LONG") from exc
        except ValueError as exc:  # vLLM's: reserved template kwargs, an empty template
            raise errors.InvalidArgument(f"chat_template_kwargs: {exc}",
                                         param="chat_template_kwargs",
                                         reason="INVALID_FORMAT") from exc
        ids = list(prompt["prompt_token_ids"])
        if types is not None:  # cut with the ids, as vLLM's
            from vllm.entrypoints.pooling.scoring.io_processor import (
                _apply_post_tokenization_to_token_type_ids,
            )

            types = list(_apply_post_tokenization_to_token_type_ids(
                processor.tokenizer, params, list(types)))
        return ids, types

    def task_instructions(self) -> dict[str, str]:
        """vLLM's EmbedIOProcessor's: the model config's task_instructions,
        else sentence-transformers' prompts (config_sentence_transformers.json)."""
        from vllm.entrypoints.pooling.embed.io_processor import EmbedIOProcessor

        config = self._llm.model_config
        return (EmbedIOProcessor._load_task_instructions(config.hf_config)
                or EmbedIOProcessor._load_st_prompts(config.model, config.revision) or {})

    def has_chat_template(self) -> bool:
        from vllm.renderers.hf import resolve_chat_template

        try:
            return resolve_chat_template(self._llm.get_tokenizer(), self._chat_template, None,
                                         model_config=self._llm.model_config) is not None
        except Exception:  # a tokenizer without templates
            return False

    def truncate_text(self, text: str, max_tokens: int) -> str:
        from vllm.entrypoints.pooling.scoring.utils import truncate_text_to_tokens

        return str(truncate_text_to_tokens(text, self._llm.get_tokenizer(), max_tokens))

    @staticmethod
    def similarity(query: PoolOutput, document: PoolOutput) -> float:
        import torch
        import torch.nn.functional as F
        from vllm.entrypoints.pooling.scoring.utils import compute_maxsim_score

        if query.rows is not None and document.rows is not None:  # token embeddings
            return float(compute_maxsim_score(torch.from_numpy(query.rows),
                                              torch.from_numpy(document.rows)).item())
        return float(F.cosine_similarity(torch.tensor(query.data), torch.tensor(document.data),
                                         dim=0).item())


def type_ids_extra(token_type_ids: list[int]) -> dict[str, Any]:
    """The PoolingParams extra_kwargs that carry a pair's segment ids to the
    model (vLLM's compressed form)."""
    from vllm.entrypoints.pooling.scoring.utils import compress_token_type_ids

    return {"compressed_token_type_ids": compress_token_type_ids(token_type_ids)}
