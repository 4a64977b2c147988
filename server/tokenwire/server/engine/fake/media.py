"""The fake engine's media for token-in prompts (a test double of
engine/vllm/mm_features.py): image token IMAGE in the ids, each image
expanded to EXPAND ids [IMAGE_START, IMAGE x 2, IMAGE_END]; a data URL's
bytes stand for the image, fake features are b"fake:<n>" items of n
embeddings. Checks shaped like the real ones (counts, ranges, overlap,
placeholder tokens, the item limit). Chat with images: each image part
rendered as one IMAGE id, then expanded the same way."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
from typing import Any

from tokenwire.server.core import multimodal
from tokenwire.server.core.domain import EngineRequest, RenderOptions
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.media_inputs import FeatureItem, MediaPart, MultimodalPrompt

IMAGE_START, IMAGE, IMAGE_END = 296, 297, 298
EXPAND = [IMAGE_START, IMAGE, IMAGE, IMAGE_END]
EMBEDS = 2  # IMAGE ids per image
LIMIT = 2  # images per prompt (as --limit-mm-per-prompt)
ALLOWED_DOMAINS = ("images.example",)  # the fake's --allowed-media-domains
ITEM_BYTES = 64 * 1024  # what one prepared image "holds" (MultimodalPrompt.nbytes)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def from_parts(prompt: list[int], parts: list[MediaPart]) -> MultimodalPrompt:
    if len(parts) > LIMIT:
        raise InvalidArgument(f"content_parts: {len(parts)} image items, at most {LIMIT} per "
                              "prompt", param="content_parts", reason="TOO_MANY_ITEMS")
    for part in parts:
        multimodal.check_allowed(part.param + ".url", part.url, ALLOWED_DOMAINS, "")
    urls = [p.url for p in parts]
    hashes = []
    for part, url in zip(parts, urls, strict=True):
        if url.startswith("data:"):
            try:
                data = base64.b64decode(url.split(",", 1)[1], validate=True)
            except (binascii.Error, IndexError) as exc:
                raise InvalidArgument(f"{part.param}: the image does not decode",
                                      param="content_parts", reason="MEDIA_INVALID") from exc
        else:
            data = url.encode()
        if not data:
            raise InvalidArgument(f"{part.param}: the image does not decode",
                                  param="content_parts", reason="MEDIA_INVALID")
        hashes.append(_digest(data))
    if prompt.count(IMAGE) != len(parts):  # already expanded (a later turn): placed
        places, at = [], 0
        for _ in parts:
            found = next((i for i in range(at, len(prompt) - len(EXPAND) + 1)
                          if prompt[i:i + len(EXPAND)] == EXPAND), -1)
            if found < 0:
                raise InvalidArgument(
                    f"content_parts: {len(parts)} images for {prompt.count(IMAGE)} image "
                    "tokens in token_ids, and not each image's expansion",
                    param="content_parts", reason="PLACEHOLDER_MISMATCH")
            places.append((found, len(EXPAND)))
            at = found + len(EXPAND)
        return MultimodalPrompt(list(prompt), {"image": places}, engine_input=hashes,
                                items=len(parts), nbytes=ITEM_BYTES * len(parts))
    ids: list[int] = []
    places = []
    for t in prompt:
        if t == IMAGE:
            places.append((len(ids), len(EXPAND)))
            ids.extend(EXPAND)
        else:
            ids.append(t)
    return MultimodalPrompt(ids, {"image": places}, engine_input=hashes, items=len(parts),
                            nbytes=ITEM_BYTES * len(parts))


def from_features(prompt: list[int], items: list[FeatureItem]) -> MultimodalPrompt:
    if len(items) > LIMIT:
        raise InvalidArgument(f"features.mm_hashes.image: {len(items)} image items, at most "
                              f"{LIMIT}", param="features.mm_hashes.image",
                              reason="TOO_MANY_ITEMS")
    end = 0
    hashes = []
    for n, item in enumerate(items):
        place = f"features.mm_placeholders.{item.modality}[{n}]"
        if item.modality != "image":
            raise InvalidArgument(f"{place}: modality '{item.modality}' is not served",
                                  param=place, reason="UNSUPPORTED_MODALITY")
        if item.offset < end:
            raise InvalidArgument("features.mm_placeholders: mm_placeholders must be globally "
                                  "non-overlapping and sorted",
                                  param="features.mm_placeholders", reason="FEATURES_INVALID")
        if item.offset + item.length > len(prompt):
            raise InvalidArgument(f"{place}: mm_placeholders must remain within the token_ids "
                                  "sequence", param=place, reason="PLACEHOLDER_OUT_OF_RANGE")
        end = item.offset + item.length
        kp = f"features.kwargs_data.image[{n}]"
        if not item.kwargs.startswith(b"fake:") or not item.kwargs[5:].isdigit():
            raise InvalidArgument(f"{kp} does not decode as vLLM's serialized "
                                  "MultiModalKwargsItem", param=kp, reason="FEATURES_INVALID")
        embeds = int(item.kwargs[5:])
        ids = prompt[item.offset:end]
        found = ids.count(IMAGE)
        if found != embeds or found == 0 or ids[0] != IMAGE_START or ids[-1] != IMAGE_END:
            raise InvalidArgument(f"{place}: the range holds {found} image tokens; its item has "
                                  f"{embeds} embeddings, framed by {IMAGE_START} and {IMAGE_END}",
                                  param=place,
                                  reason="PLACEHOLDER_MISMATCH")
        hashes.append(_digest(item.hash.encode() + b"\0" + item.kwargs))
    places = [(i.offset, i.length) for i in items]
    return MultimodalPrompt(list(prompt), {"image": places}, engine_input=hashes,
                            items=len(items), nbytes=ITEM_BYTES * len(items))


def cache_items(request: EngineRequest) -> tuple[tuple[int, str], ...]:
    """As vLLM's: the media items (offset, hash) that key the prefix
    cache's blocks with the ids."""
    if request.multimodal is None:
        return ()
    places = request.multimodal.placeholders.get("image", [])
    return tuple((at, h) for (at, _), h in zip(places, request.multimodal.engine_input,
                                               strict=True))


class FakeMedia:
    """The fake engine's media half (mixed into FakeEngine)."""

    takes_media = False  # tests make an engine a VLM

    async def prepare_media(self, prompt: list[int], *, parts: list[MediaPart] | None = None,
                            features: list[FeatureItem] | None = None) -> MultimodalPrompt:
        if parts:
            return from_parts(prompt, parts)
        return from_features(prompt, features or [])

    def join_media(self, earlier: MultimodalPrompt | None, later: MultimodalPrompt,
                   prompt: list[int], shift: int) -> MultimodalPrompt:
        first = earlier.placeholders.get("image", []) if earlier is not None else []
        items = len(first) + len(later.placeholders.get("image", []))
        if items > LIMIT:
            raise InvalidArgument(f"continuation.messages: {items} images in the continued "
                                  f"prompt, at most {LIMIT} per prompt",
                                  param="continuation.messages", reason="TOO_MANY_ITEMS")
        places = [*first, *((o + shift, n) for o, n in later.placeholders.get("image", []))]
        hashes = [*(earlier.engine_input if earlier is not None else []), *later.engine_input]
        return MultimodalPrompt(list(prompt), {"image": places}, engine_input=hashes, items=items,
                                nbytes=ITEM_BYTES * items)

    async def media_features(self, prepared: MultimodalPrompt) -> dict[str, Any]:
        """vLLM's features JSON of a fake prepared prompt: each item's hash,
        its placeholder range and b"fake:<EMBEDS>" (what from_features takes)."""
        places = prepared.placeholders.get("image", [])
        item = base64.b64encode(f"fake:{EMBEDS}".encode()).decode()
        return {"mm_hashes": {"image": list(prepared.engine_input)},
                "mm_placeholders": {"image": [{"offset": o, "length": n} for o, n in places]},
                "kwargs_data": {"image": [item] * len(places)}}

    async def render_chat_media(self, messages: list[dict[str, Any]],
                                options: RenderOptions) -> MultimodalPrompt:
        """The URL rules and checks of the real engine (core/multimodal.py;
        --allowed-media-domains ALLOWED_DOMAINS, at most LIMIT images), then
        each image part rendered as one IMAGE id and expanded (from_parts)."""
        parts = list(multimodal.image_parts(messages))
        if not self.takes_media:
            raise InvalidArgument(f"{parts[0][0]}: the served model takes text only",
                                  param=parts[0][0], reason="UNSUPPORTED_MODALITY")
        if len(parts) > LIMIT:
            raise InvalidArgument(f"{parts[LIMIT][0]}: {len(parts)} images, at most {LIMIT} "
                                  "per prompt", param=parts[LIMIT][0], reason="TOO_MANY_ITEMS")
        budget = multimodal.ImageBudget()
        for param, url in parts:
            multimodal.check_allowed(f"{param}.image_url.url", url, ALLOWED_DOMAINS, "")
            await asyncio.to_thread(budget.inspect, f"{param}.image_url.url", url)
        marker = "\x00"  # byte 0 (id 3) stands for the image, then expanded
        flat = [{**m, "content": "".join(p["text"] if p["type"] == "text" else marker
                                         for p in m["content"])}
                if isinstance(m["content"], list) else m for m in messages]
        render: Any = self.render_chat  # type: ignore[attr-defined]  # (FakeEngine's)
        ids = [IMAGE if t == 3 else t for t in render(flat, options)]
        return from_parts(ids, [MediaPart("image", param, url=url) for param, url in parts])
