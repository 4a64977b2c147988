"""Media with a token-in prompt (Generate, chat's nvext.token_data), in
vLLM's shape: `content_parts` (the server processes the media) or
`features` (the client did: vLLM's JSON object over REST, typed
`mm_features` over gRPC), turned into the engine's media inputs with every
field checked, then prepared by the engine (off the event loop, admitted)
into the expanded prompt the plan runs."""

from __future__ import annotations

import base64
import binascii
import dataclasses
from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core import multimodal
from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Engine, EngineRequest
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.media_inputs import FeatureItem, MediaPart

MAX_ITEMS = multimodal.MAX_IMAGES_PER_REQUEST  # before any decoding; then the model's limit
PART_TYPES = {"image_url": "image"}


@dataclasses.dataclass
class TokenMedia:
    """A token-in prompt's media, checked, not yet prepared."""

    parts: list[MediaPart] | None = None
    features: list[FeatureItem] | None = None
    param: str = "content_parts"  # the field an error about the whole names
    prefix: str = ""  # where the body's media fields sit ("nvext." on chat)


def _refuse(msg: str, param: str, reason: str = "INVALID_TYPE") -> InvalidArgument:
    return InvalidArgument(f"{param}: {msg}", param=param, reason=reason)


def _parts(parts: Any, prefix: str) -> list[MediaPart]:
    """Each part's URL under chat's image rules (core/multimodal.py): a
    data URL of an image type, or http(s) / file: (the engine checks them
    against its flags); gRPC bytes become a data URL; the request's image
    bytes bounded before anything is decoded."""
    out = []
    total = 0
    for i, part in enumerate(parts):
        param = f"{prefix}content_parts[{i}]"
        modality = PART_TYPES.get(part.type)
        if modality is None:
            raise InvalidArgument(
                f"{param}.type '{part.type}' is not served (image_url only)",
                param=param + ".type", reason="UNSUPPORTED_MODALITY")
        if part.HasField("image"):
            if part.url:
                raise _refuse("give the URL as url or the image as image, not both",
                              param + ".image", "FIELDS_CONFLICT")
            url = multimodal.image_url(param + ".image", part.image)
        else:
            if not part.url:
                raise _refuse("url (or image) is required", param + ".url", "FIELD_REQUIRED")
            multimodal.check_url(param + ".url", part.url)
            url = part.url
        if url.startswith("data:"):
            total += (len(url) - url.find(",") - 1) * 3 // 4
            if total > multimodal.MAX_MEDIA_BYTES:
                raise InvalidArgument(f"{param}: the request's images exceed "
                                      f"{multimodal.MAX_MEDIA_BYTES} bytes", param=param,
                                      reason="MEDIA_TOO_LARGE")
        out.append(MediaPart(modality, param, url=url, uuid=part.uuid or None))
    return out


def _typed_features(msg: Any, prefix: str) -> list[FeatureItem]:
    out = []
    for i, item in enumerate(msg.items):
        param = f"{prefix}mm_features.items[{i}]"
        if not item.modality or not item.hash:
            raise _refuse("modality and hash are required", param, "FIELD_REQUIRED")
        out.append(FeatureItem(item.modality, item.hash, item.placeholder.offset,
                               item.placeholder.length, item.kwargs_data))
    return out


def _list(value: struct_pb2.Value, param: str) -> list[struct_pb2.Value]:
    if value.WhichOneof("kind") != "list_value":
        raise _refuse("must be a list", param)
    return list(value.list_value.values)


def _count(value: struct_pb2.Value, param: str) -> int:
    if value.WhichOneof("kind") != "number_value" or not value.number_value.is_integer():
        raise _refuse("must be an integer", param)
    n = int(value.number_value)
    if n < 0 or n >= 2**31:
        raise _refuse("is out of range", param, "VALUE_OUT_OF_RANGE")
    return n


def _json_features(features: struct_pb2.Struct, prefix: str) -> list[FeatureItem]:
    """vLLM's MultiModalFeatures JSON, per modality parallel lists."""
    base = prefix + "features"
    fields = features.fields
    unknown = set(fields) - {"mm_hashes", "mm_placeholders", "kwargs_data", "mm_metadata"}
    if unknown:
        raise _refuse(f"unknown keys {sorted(unknown)}", base, "UNKNOWN_FIELD")
    # mm_metadata (what vLLM's /render adds for encoder-cache transfer) repeats
    # fields kwargs_data carries whole: ignored, kwargs_data being required.
    groups = {}
    for key in ("mm_hashes", "mm_placeholders", "kwargs_data"):
        value = fields.get(key)
        if value is None or value.WhichOneof("kind") in (None, "null_value"):
            if key == "kwargs_data":
                raise _refuse("is required: the server resolves no item from its caches",
                              f"{base}.{key}", "FIELD_REQUIRED")
            raise _refuse("is required", f"{base}.{key}", "FIELD_REQUIRED")
        if value.WhichOneof("kind") != "struct_value":
            raise _refuse("must be an object of modality -> list", f"{base}.{key}")
        groups[key] = value.struct_value.fields
    modalities = list(groups["mm_hashes"])
    for key in ("mm_placeholders", "kwargs_data"):
        if set(groups[key]) != set(modalities):
            raise _refuse("must name the same modalities as mm_hashes", f"{base}.{key}",
                          "FEATURES_INVALID")
    out: list[FeatureItem] = []
    for m in modalities:
        hashes = _list(groups["mm_hashes"][m], f"{base}.mm_hashes.{m}")
        places = _list(groups["mm_placeholders"][m], f"{base}.mm_placeholders.{m}")
        kwargs = _list(groups["kwargs_data"][m], f"{base}.kwargs_data.{m}")
        if not len(hashes) == len(places) == len(kwargs):
            raise _refuse("mm_hashes, mm_placeholders and kwargs_data must have the same "
                          "length", f"{base}.mm_placeholders.{m}", "FEATURES_INVALID")
        if len(out) + len(hashes) > MAX_ITEMS:
            raise _refuse(f"more than {MAX_ITEMS} items", f"{base}.mm_hashes", "TOO_MANY_ITEMS")
        for n, (h, p, k) in enumerate(zip(hashes, places, kwargs, strict=True)):
            hp, pp, kp = (f"{base}.{key}.{m}[{n}]"
                          for key in ("mm_hashes", "mm_placeholders", "kwargs_data"))
            if h.WhichOneof("kind") != "string_value" or not h.string_value:
                raise _refuse("must be a non-empty string", hp)
            if p.WhichOneof("kind") != "struct_value" or set(p.struct_value.fields) != {
                    "offset", "length"}:
                raise _refuse('must be {"offset": int, "length": int}', pp)
            offset = _count(p.struct_value.fields["offset"], pp + ".offset")
            length = _count(p.struct_value.fields["length"], pp + ".length")
            if k.WhichOneof("kind") != "string_value":
                raise _refuse("must be a base64 string (null: resolved from a cache, which "
                              "this server does not do)", kp)
            try:
                raw = base64.b64decode(k.string_value, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise _refuse("is not valid base64", kp, "FEATURES_INVALID") from exc
            out.append(FeatureItem(m, h.string_value, offset, length, raw))
    return out


def token_media(*, parts: Any, features: struct_pb2.Struct | None, typed: Any,
                prefix: str = "") -> TokenMedia | None:
    """The checked media of a token-in body (`prefix`: where its fields sit,
    "nvext." on chat), or None without any; content_parts and features are
    mutually exclusive (vLLM's rule), so are features and mm_features."""
    given = [name for name, on in (("content_parts", bool(parts)),
                                   ("features", features is not None),
                                   ("mm_features", typed is not None)) if on]
    if not given:
        return None
    if len(given) > 1:
        raise InvalidArgument(f"{prefix}{given[0]} and {prefix}{given[1]} are mutually "
                              "exclusive", param=prefix + given[1], reason="FIELDS_CONFLICT")
    if parts:
        if len(parts) > MAX_ITEMS:
            raise _refuse(f"more than {MAX_ITEMS} items", prefix + "content_parts",
                          "TOO_MANY_ITEMS")
        return TokenMedia(parts=_parts(parts, prefix), param=prefix + "content_parts",
                          prefix=prefix)
    if features is not None:
        items = _json_features(features, prefix)
        return (TokenMedia(features=items, param=prefix + "features", prefix=prefix)
                if items else None)
    if len(typed.items) > MAX_ITEMS:
        raise _refuse(f"more than {MAX_ITEMS} items", prefix + "mm_features", "TOO_MANY_ITEMS")
    items = _typed_features(typed, prefix)
    return (TokenMedia(features=items, param=prefix + "mm_features", prefix=prefix)
            if items else None)


def check_model_takes(engine: Engine, media: TokenMedia) -> None:
    """Media to a text-only model: INVALID_ARGUMENT naming the field."""
    if not getattr(engine, "takes_media", False):
        raise InvalidArgument(f"{media.param}: the served model takes text only, not images",
                              param=media.param, reason="UNSUPPORTED_MODALITY")


async def prepare(engine: Any, request: EngineRequest, media: TokenMedia, *,
                  max_tokens_param: str, max_tokens: int | None) -> None:
    """Prepare `media` with `request`'s ids (the engine's processor or its
    feature checks, admitted, off the event loop) and run the request on
    the expanded prompt: its length checked again, an unset max_tokens
    recomputed for it."""
    try:
        mm = await engine.prepare_media(request.prompt_token_ids, parts=media.parts,
                                        features=media.features, tenant=request.tenant)
    except InvalidArgument as exc:  # the engine names the fields as Generate's: where they sit
        if media.prefix and exc.param and not exc.param.startswith(media.prefix):
            exc.message = exc.message.replace(exc.param, media.prefix + exc.param, 1)
            exc.param = media.prefix + exc.param
        raise
    ids = mm.prompt_token_ids
    v.prompt_fits(media.param, len(ids), engine.max_model_len)
    request.params.max_tokens = v.max_tokens(max_tokens_param, max_tokens, len(ids),
                                             engine.max_model_len)
    request.prompt_token_ids = ids
    request.multimodal = mm
