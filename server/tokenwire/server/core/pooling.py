"""The pooling half of the domain: a pooling model's inputs and outputs
(embeddings, classification, token-level tasks, scores) and the engine's
pooling methods (core/domain.py's Engine takes them). Nothing here imports
vLLM."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy


@dataclasses.dataclass
class PoolRequest:
    """One input of an embeddings or classification call, for a pooling model."""

    request_id: str
    prompt_token_ids: list[int]
    # vLLM's pooling task ("embed", "classify", "token_embed", "token_classify");
    # "": the model's default task
    task: str = "embed"
    only_pooling_task: bool = False  # (/pooling) the task must be the model's pooling task
    dimensions: int | None = None  # matryoshka truncation; None: the model's size
    use_activation: bool | None = None  # normalization / softmax; None: the model's
    priority: int = 0
    lora: str | None = None
    tenant: str | None = None
    # A cross-encoder pair's segment ids (BERT-style: 0 query, 1 document),
    # one per prompt id; None: the model takes none.
    token_type_ids: list[int] | None = None


@dataclasses.dataclass
class PoolOutput:
    """A pooled input: its embedding, or its class scores and the top
    class's label (None when the model names none); a token-level task's
    output is `rows` (then `data` is empty): the engine's array, tokens x
    numbers per token, kept as the engine answered it (no Python number per
    value: a late-interaction model's documents hold millions), turned into
    numbers only in the response (inference/pooling/service.py)."""

    data: list[float]
    label: str | None = None
    rows: numpy.ndarray | None = None


class PoolingEngine(Protocol):
    """What an engine does for a pooling model (vLLM's --runner pooling)."""

    @property
    def pooling(self) -> bool:
        """The engine runs a pooling model (vLLM's --runner pooling): it
        embeds or classifies, it does not generate."""
        ...

    async def pool(self, request: PoolRequest) -> PoolOutput:
        """The input pooled for its task; cancelling aborts it in the engine.
        INVALID_ARGUMENT for parameters the model refuses (`dimensions`, a
        task the model does not serve)."""
        ...

    async def token_width(self, task: str, dimensions: int | None) -> int | None:
        """The numbers per token a token-level task's output holds (`task`:
        "" the model's pooling task; `dimensions` the body's), for the size
        of its response before it runs; None: a sequence-level task, or a
        width not known before the model answered it once."""
        ...

    async def score_type(self) -> str | None:
        """How the pooling model scores a query and a document (vLLM's score
        types): "cross-encoder" (a classifier with one label runs the pair),
        "bi-encoder" (the cosine of two embeddings), "late-interaction"
        (MaxSim of token embeddings); None: it does not score."""
        ...

    def pooling_tokens(self, text: str, *, add_special_tokens: bool, truncate: int | None,
                       side: str | None) -> list[int]:
        """`text` tokenized as vLLM's pooling routes do (an encoder's case;
        `truncate` tokens kept, -1 the window: by the tokenizer, special
        tokens kept, or with a `side` the ids cut from it)."""
        ...

    def score_prompt(self, query: str, document: str, *, max_query_tokens: int = 0,
                     max_doc_tokens: int = 0, template_kwargs: dict[str, Any] | None = None,
                     truncate: int | None = None, side: str | None = None,
                     ) -> tuple[list[int], list[int] | None]:
        """A cross-encoder's prompt of the pair as vLLM makes it (the score
        template, the tokenizer's text pair, or the texts joined; truncated
        as pooling_tokens) with its segment ids (None: the model takes none)."""
        ...

    def task_instructions(self) -> dict[str, str]:
        """The model's prompt prefix per Cohere `input_type` (its config's
        task_instructions, or sentence-transformers' prompts); {}: none."""
        ...

    def has_chat_template(self) -> bool:
        """Whether a chat template renders for this model (the server's or
        the model's own)."""
        ...

    def truncate_text(self, text: str, max_tokens: int) -> str:
        """`text` cut to its first `max_tokens` tokens, at a character
        boundary (vLLM's max_tokens_per_query / max_tokens_per_doc)."""
        ...

    def similarity(self, query: PoolOutput, document: PoolOutput) -> float:
        """The score of two pooled texts: the cosine of two embeddings, or
        MaxSim of two token-embedding outputs (their arrays, as vLLM
        computes it)."""
        ...
