"""Media in a token-in prompt, for vLLM: a Generate's `content_parts`
processed by vLLM's own multimodal processor (the ids expanded as vLLM's
renderer expands them), and client-processed `features` decoded with
vLLM's own serializer (mm_serde's msgpack) and checked against the served
model before anything reaches the engine core, where a placeholder that
does not match its item's embeddings would fail the engine, not the call.

A feature item's hash is re-keyed by the server as a digest of the hash
and the item's tensors (`feature_identifier`), so no caller can name a
cache entry whose content it did not send; tenants' KV blocks are kept
apart by the cache salt, which keys the image blocks after it."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping
from typing import Any

from tokenwire.server.core import multimodal
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.media_inputs import (
    FeatureItem,
    MediaPart,
    MultimodalPrompt,
    keeps_tensors,
)
from tokenwire.server.engine.vllm.mm_families import FAMILIES, ImageTokens, Served, model_parses

MODALITIES = ("image",)


def feature_identifier(client_hash: str, kwargs: bytes) -> str:
    """The cache identity of a client-processed item: its hash bound to its
    tensors, so a caller naming another's hash with other tensors gets an
    entry of its own."""
    h = hashlib.sha256()
    h.update(client_hash.encode("utf-8", "surrogatepass"))
    h.update(b"\0")
    h.update(hashlib.sha256(kwargs).digest())
    return "tw-f:" + h.hexdigest()


class VllmMultimodal:
    """The served model's media handling over an AsyncLLM (its model
    config, its renderer's multimodal processor)."""

    def __init__(self, llm: Any):
        self._llm = llm
        config = llm.model_config
        self.enabled = bool(config.is_multimodal_model)
        self._archs = list(getattr(config.hf_config, "architectures", None) or [])
        self._decoder: Any = None
        self._served: Served | None = None
        self._tokens = ImageTokens(llm)

    def _limit(self, modality: str) -> int:
        try:
            return int(self._llm.model_config.get_multimodal_config()
                       .get_limit_per_prompt(modality))
        except Exception:  # a modality the model does not take
            return 0

    def _check_modality(self, modality: str, count: int, param: str) -> None:
        if modality not in MODALITIES:
            raise InvalidArgument(f"{param}: modality '{modality}' is not served (images only)",
                                  param=param, reason="UNSUPPORTED_MODALITY")
        limit = self._limit(modality)
        if count > limit:
            raise InvalidArgument(f"{param}: {count} {modality} items, at most {limit} per "
                                  "prompt (vLLM's --limit-mm-per-prompt)", param=param,
                                  reason="TOO_MANY_ITEMS")

    # -- content_parts: vLLM's processor ------------------------------------
    async def from_parts(self, prompt: list[int], parts: list[MediaPart]) -> MultimodalPrompt:
        """The parts loaded and processed by vLLM's renderer: ids with one
        image token per image are expanded (as vLLM's generate does); ids
        already expanded (a later turn) get the images placed where their
        expansions are."""
        from vllm.renderers.chat_utils import AsyncMultiModalItemTracker

        for part in parts:
            if part.modality != "image":
                self._check_modality(part.modality, 1, part.param)
        self._check_modality("image", len(parts), "content_parts")
        config = self._llm.model_config
        await asyncio.to_thread(self._check_urls, parts)
        urls = [p.url for p in parts]
        tracker = AsyncMultiModalItemTracker(config)
        parser = tracker.create_parser()
        try:
            for url in urls:
                # The caller's uuid is not passed: vLLM would key the cache by
                # it instead of the image's content.
                parser.parse_image(url, None)
            mm_data, _ = await tracker.resolve_items()
        except (ValueError, TypeError, OSError) as exc:
            raise InvalidArgument(f"content_parts: {exc}", param="content_parts",
                                  reason="MEDIA_INVALID") from exc
        token = self._image_token()
        if token is None or prompt.count(token) == len(parts):
            engine_input = await self._render(list(prompt), mm_data)
        else:  # the ids are already expanded (turn 2 of a rollout: turn 1's ids + more)
            engine_input = await self._place(prompt, mm_data, token, len(parts))
        places = {m: [(p.offset, p.length) for p in ranges]
                  for m, ranges in (engine_input.get("mm_placeholders") or {}).items()}
        return MultimodalPrompt(list(engine_input["prompt_token_ids"]), places,
                                engine_input=engine_input, items=len(parts),
                                nbytes=kwargs_nbytes(engine_input))

    def _check_urls(self, parts: list[MediaPart]) -> None:
        """Chat's rules (core/multimodal.py) with vLLM's flags: http(s) only
        on --allowed-media-domains, file: only under
        --allowed-local-media-path; each data URL's header and pixels. CPU:
        run off the event loop."""
        config = self._llm.model_config
        domains = list(getattr(config, "allowed_media_domains", None) or [])
        local = str(getattr(config, "allowed_local_media_path", "") or "")
        budget = multimodal.ImageBudget(config.max_model_len, self._tokens.of)
        for part in parts:
            multimodal.check_allowed(part.param + ".url", part.url, domains, local)
            budget.inspect(part.param + ".url", part.url)

    def _image_token(self) -> int | None:
        config = self._llm.model_config.hf_config
        token = getattr(config, "image_token_id", getattr(config, "image_token_index", None))
        return None if token is None else int(token)

    async def _render(self, prompt: list[int], mm_data: Any) -> Any:
        """vLLM's renderer on ids holding one image token per image: the
        model's processor expands them."""
        from vllm.inputs import TokensPrompt

        tokens = TokensPrompt(prompt_token_ids=prompt)
        if mm_data:
            tokens["multi_modal_data"] = mm_data
        try:
            (engine_input,) = await self._llm.renderer.render_cmpl_async(
                [tokens], skip_mm_cache=keeps_tensors())
        except (ValueError, TypeError, RuntimeError) as exc:
            raise InvalidArgument(f"content_parts: {exc}", param="content_parts",
                                  reason="MEDIA_INVALID") from exc
        return engine_input

    async def _place(self, prompt: list[int], mm_data: Any, token: int, count: int) -> Any:
        """Ids that already hold each image's expansion (vLLM's renderer
        would expand them again): the images processed alone by vLLM's
        renderer, each one's placeholder ids found in `prompt` in order, and
        the processed items (same hashes as the first turn's, so its blocks
        hit) placed there."""
        from vllm.inputs import mm_input
        from vllm.multimodal.inputs import PlaceholderRange

        alone = await self._render([token] * count, mm_data)
        ids = alone["prompt_token_ids"]
        placed: dict[str, list[Any]] = {}
        at = 0
        for modality, ranges in alone["mm_placeholders"].items():
            for n, p in enumerate(ranges):
                run = ids[p.offset:p.offset + p.length]
                found = _find(prompt, run, at)
                if found < 0:
                    raise InvalidArgument(
                        f"content_parts[{n}]: token_ids hold neither one image token ({token}) "
                        f"per image nor this image's {len(run)} placeholder ids (its expansion) "
                        "after the previous image's", param="content_parts",
                        reason="PLACEHOLDER_MISMATCH")
                placed.setdefault(modality, []).append(
                    PlaceholderRange(offset=found, length=p.length, is_embed=p.is_embed))
                at = found + p.length
        return mm_input(prompt_token_ids=list(prompt), mm_kwargs=alone["mm_kwargs"],
                        mm_hashes=alone["mm_hashes"], mm_placeholders=placed)

    def join(self, earlier: MultimodalPrompt | None, later: MultimodalPrompt,
             prompt: list[int], shift: int) -> MultimodalPrompt:
        """One prepared input of `earlier`'s items (in place) and `later`'s
        (moved by `shift`), each item's processed tensors, hash and range
        as vLLM prepared them: a Session turn's images and those of the
        messages that continue it."""
        from vllm.inputs import mm_input
        from vllm.multimodal.inputs import MultiModalKwargsItems, PlaceholderRange

        parts = [p for p in (earlier, later) if p is not None]
        kwargs: dict[str, list[Any]] = {}
        hashes: dict[str, list[str]] = {}
        places: dict[str, list[Any]] = {}
        for part, moved in zip(parts, (0, shift) if earlier is not None else (shift,),
                               strict=True):
            e = part.engine_input
            for modality, items in e["mm_kwargs"].items():
                kwargs.setdefault(modality, []).extend(items)
            for modality, found in e["mm_hashes"].items():
                hashes.setdefault(modality, []).extend(found)
            for modality, ranges in e["mm_placeholders"].items():
                places.setdefault(modality, []).extend(
                    PlaceholderRange(offset=r.offset + moved, length=r.length, is_embed=r.is_embed)
                    for r in ranges)
        for modality, ranges in places.items():
            self._check_modality(modality, len(ranges), "continuation.messages")
            for r in ranges:
                if r.offset < 0 or r.offset + r.length > len(prompt):
                    raise ValueError("a joined placeholder lies outside the prompt")
        engine_input = mm_input(prompt_token_ids=list(prompt),
                                mm_kwargs=MultiModalKwargsItems(kwargs),
                                mm_hashes=hashes, mm_placeholders=places)
        return MultimodalPrompt(
            list(prompt), {m: [(r.offset, r.length) for r in g] for m, g in places.items()},
            engine_input=engine_input, items=sum(len(g) for g in places.values()),
            nbytes=kwargs_nbytes(engine_input))

    # -- features: vLLM's serializer, the model's checks ------------------
    def from_features(self, prompt: list[int], items: list[FeatureItem]) -> MultimodalPrompt:
        """Decode and check client-processed items; sync (the caller runs it
        off the event loop)."""
        import torch
        from vllm.inputs import mm_input
        from vllm.multimodal.inputs import MultiModalKwargsItems, PlaceholderRange

        family = next((FAMILIES[a] for a in self._archs if a in FAMILIES), None)
        if family is None:
            raise InvalidArgument(
                f"features: this server checks client-processed media only for "
                f"{', '.join(sorted(FAMILIES))}; the served model ({', '.join(self._archs)}) "
                "takes content_parts", param="features", reason="FEATURES_UNSUPPORTED")
        by_modality = self._features_layout(items)
        processor = self._llm.renderer.get_mm_processor()
        hf_config = self._llm.model_config.hf_config
        token = int(getattr(hf_config, "image_token_id", getattr(hf_config, "image_token_index",
                                                                  -1)))
        frame = (int(getattr(processor.info.get_hf_processor(), family.frame))
                 if family.frame else None)
        kwargs_items: dict[str, list[Any]] = {}
        hashes: dict[str, list[str]] = {}
        places: dict[str, list[Any]] = {}
        for modality, group in by_modality.items():
            for n, item in enumerate(group):
                rebuilt, mask = self._feature(prompt, item, n, family, processor, token, frame)
                kwargs_items.setdefault(modality, []).append(rebuilt)
                hashes.setdefault(modality, []).append(feature_identifier(item.hash,
                                                                          item.kwargs))
                places.setdefault(modality, []).append(PlaceholderRange(
                    offset=item.offset, length=item.length,
                    is_embed=None if all(mask) else torch.tensor(mask)))
        engine_input = mm_input(prompt_token_ids=list(prompt),
                                mm_kwargs=MultiModalKwargsItems(kwargs_items),
                                mm_hashes=hashes, mm_placeholders=places)
        return MultimodalPrompt(
            list(prompt), {m: [(i.offset, i.length) for i in g] for m, g in by_modality.items()},
            engine_input=engine_input, items=len(items), nbytes=kwargs_nbytes(engine_input))

    def _features_layout(self, items: list[FeatureItem]) -> dict[str, list[FeatureItem]]:
        """The items by modality, their counts and ranges checked (vLLM's own
        rules: same modalities, counts, ranges sorted, not overlapping)."""
        from pydantic import ValidationError
        from vllm.entrypoints.scale_out.token_in_token_out.protocol import MultiModalFeatures

        by_modality: dict[str, list[FeatureItem]] = {}
        for item in items:
            by_modality.setdefault(item.modality, []).append(item)
        for modality, group in by_modality.items():
            self._check_modality(modality, len(group), f"features.mm_hashes.{modality}")
        try:
            MultiModalFeatures.model_validate({
                "mm_hashes": {m: [i.hash for i in g] for m, g in by_modality.items()},
                "mm_placeholders": {m: [{"offset": i.offset, "length": i.length} for i in g]
                                    for m, g in by_modality.items()}})
        except ValidationError as exc:
            msg = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            raise InvalidArgument(f"features.mm_placeholders: {msg}",
                                  param="features.mm_placeholders",
                                  reason="FEATURES_INVALID") from exc
        return by_modality

    def _feature(self, prompt: list[int], item: FeatureItem, n: int, family: Any,
                 processor: Any, token: int, frame: int | None) -> tuple[Any, list[bool]]:
        """Item `n` of its modality decoded, checked against its range and
        the model, as vLLM's kwargs item; and its range's image-token mask."""
        from transformers.feature_extraction_utils import BatchFeature
        from vllm.multimodal.inputs import MultiModalKwargsItems

        param = f"features.kwargs_data.{item.modality}[{n}]"
        place = f"features.mm_placeholders.{item.modality}[{n}]"
        if item.offset + item.length > len(prompt):
            raise InvalidArgument(
                f"{place}: mm_placeholders must remain within the token_ids sequence "
                f"({item.offset}+{item.length} > {len(prompt)})", param=place,
                reason="PLACEHOLDER_OUT_OF_RANGE")
        data = self._decode(item.kwargs, param)
        self._served = self._served or Served.of(self._llm.model_config, processor)
        batch, embeds = family.batch(data, self._served, param)
        mask = family.placeholder_mask(prompt[item.offset:item.offset + item.length], token,
                                       frame, embeds, place)
        fields = processor._get_mm_fields_config(BatchFeature(batch), {})
        rebuilt = MultiModalKwargsItems.from_hf_inputs(BatchFeature(batch), fields)
        model_parses(self._archs, self._llm.model_config, item.modality,
                     rebuilt[item.modality][0], param)
        return rebuilt[item.modality][0], mask

    def _decode(self, raw: bytes, param: str) -> dict[str, Any]:
        if not raw:
            raise InvalidArgument(f"{param} is required: the server resolves no item from its "
                                  "caches", param=param, reason="FIELD_REQUIRED")
        if self._decoder is None:
            self._decoder = _callers_decoder()
        try:
            item = self._decoder.decode(raw)
            return {key: elem.data for key, elem in item.items()}
        except Exception as exc:  # any undecodable payload
            raise InvalidArgument(f"{param} does not decode as vLLM's serialized "
                                  f"MultiModalKwargsItem ({type(exc).__name__})",
                                  param=param, reason="FEATURES_INVALID") from exc


def _callers_decoder() -> Any:
    """vLLM's MsgpackDecoder for a MultiModalKwargsItem, for bytes a caller
    sent: no pickle extension even where the operator allows pickle for
    vLLM's own IPC (VLLM_ALLOW_INSECURE_SERIALIZATION), and only vLLM's
    three field factories by name."""
    from vllm.multimodal.inputs import MultiModalKwargsItem
    from vllm.v1.serial_utils import (
        CUSTOM_TYPE_CLOUDPICKLE,
        CUSTOM_TYPE_PICKLE,
        MMF_CLASS_TO_FACTORY,
        MsgpackDecoder,
    )

    factories = frozenset(MMF_CLASS_TO_FACTORY.values())

    class CallersDecoder(MsgpackDecoder):
        def ext_hook(self, code: int, data: memoryview) -> Any:
            if code in (CUSTOM_TYPE_PICKLE, CUSTOM_TYPE_CLOUDPICKLE):
                raise TypeError("pickled data is not accepted from a caller")
            return super().ext_hook(code, data)

        def _decode_mm_field_elem(self, obj: dict[str, Any]) -> Any:
            field = obj.get("field")
            if not (isinstance(field, (list, tuple)) and len(field) == 2
                    and field[0] in factories and isinstance(field[1], dict)):
                raise TypeError("not one of vLLM's multimodal field factories")
            return super()._decode_mm_field_elem(obj)

    return CallersDecoder(t=MultiModalKwargsItem)


def _find(seq: list[int], run: list[int], start: int) -> int:
    """The first index >= start where `run` occurs in `seq`, or -1."""
    n = len(run)
    first = run[0] if run else None
    for i in range(start, len(seq) - n + 1):
        if seq[i] == first and seq[i:i + n] == run:
            return i
    return -1


def engine_input_of(prepared: MultimodalPrompt, cache_salt: str | None) -> Any:
    """The prepared input with the request's ids (a Session's next turn
    extends them: MultimodalPrompt.extended) and final cache salt (a copy:
    a prepared prompt is never changed)."""
    out = dict(prepared.engine_input)
    out["prompt_token_ids"] = list(prepared.prompt_token_ids)
    if cache_salt:
        out["cache_salt"] = cache_salt
    else:
        out.pop("cache_salt", None)
    return out


def kwargs_nbytes(engine_input: Any) -> int:
    """The bytes of the tensors in a prepared input's mm_kwargs (vLLM's
    MultiModalKwargsItems: modality -> items -> fields -> `.data`)."""
    import torch

    total, stack, seen = 0, [engine_input.get("mm_kwargs")], 0
    while stack and seen < 100_000:
        node = stack.pop()
        seen += 1
        if isinstance(node, torch.Tensor):
            total += node.numel() * node.element_size()
        elif isinstance(node, Mapping):
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
        elif hasattr(node, "data") and not isinstance(node, (bytes, str)):
            stack.append(node.data)
    return total


def media_features_json(prepared: MultimodalPrompt) -> dict[str, Any]:
    """vLLM's own extraction of a rendered prompt's features (what its
    /v1/chat/completions/render answers), as JSON; the ids the features
    sit in are `prepared.prompt_token_ids`."""
    from vllm.entrypoints.scale_out.token_in_token_out.mm_features import extract_mm_features

    features = extract_mm_features(engine_input_of(prepared, None))
    if features is None:
        return {}
    return {k: v for k, v in features.model_dump(mode="json").items() if v is not None}
