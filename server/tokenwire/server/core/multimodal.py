"""The rules for images in a chat request, engine-neutral: which URLs a
caller may name (data URLs of image types; http(s) only on the operator's
--allowed-media-domains; `file:` only under --allowed-local-media-path:
vLLM's flags, both off by default), typed bytes as data URLs, the bounds
per request (images, bytes, pixels summed from the headers, and the
placeholder tokens the images expand to against the context window) and per
image (a decodable header, pixels), all before any image is decoded, each
an INVALID_ARGUMENT naming the field. The server fetches nothing a
caller names unless the operator allowed it."""

from __future__ import annotations

import base64
import binascii
import io
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from tokenwire.server.core.errors import InvalidArgument

IMAGE_MIME_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif", "image/bmp"})
MAX_IMAGES_PER_REQUEST = 64  # before the model's own --limit-mm-per-prompt
MAX_MEDIA_BYTES = 10 << 20  # encoded image bytes per request (data URLs, gRPC bytes)
MAX_IMAGE_PIXELS = 4096 * 4096  # per image, read from its header before decoding
MAX_REQUEST_PIXELS = 4 * MAX_IMAGE_PIXELS  # per request, summed over its images' headers
# Data URLs up to this many characters in a request have their headers read
# on the caller's thread: a 64x64 PNG's costs about 0.1 ms, less than a hop
# to a worker thread and back (and the wait for the interpreter's lock there
# while the engine's processor thread runs); larger ones go off the loop.
INLINE_INSPECT_CHARS = 64 << 10


def _types() -> str:
    return ", ".join(sorted(IMAGE_MIME_TYPES))


def check_url(param: str, url: str) -> None:
    """The URL's form (the host and path rules need the server's flags:
    check_allowed): a data URL of an image type, or http(s) / file."""
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        head = url[5:].split(",", 1)[0]
        mime = head.split(";", 1)[0].lower()
        if mime not in IMAGE_MIME_TYPES:
            raise InvalidArgument(f"{param}: a data URL of type '{mime}' is not an image this "
                                  f"server reads ({_types()})", param=param,
                                  reason="UNSUPPORTED_MEDIA_TYPE")
        if not head.endswith(";base64"):
            raise InvalidArgument(f"{param}: a data URL must be base64 "
                                  "(data:image/png;base64,...)", param=param,
                                  reason="MEDIA_INVALID")
        return
    if scheme not in ("http", "https", "file"):
        raise InvalidArgument(f"{param}: scheme '{scheme or url[:16]}' is not served (a data "
                              "URL; http(s) from --allowed-media-domains)", param=param,
                              reason="MEDIA_URL_NOT_ALLOWED")


def check_allowed(param: str, url: str, domains: Sequence[str], local_path: str) -> None:
    """http(s) only on a host of `domains` (--allowed-media-domains), file:
    only with `local_path` set (--allowed-local-media-path; vLLM checks the
    path is under it); data URLs always."""
    scheme = url.split(":", 1)[0].lower()
    if scheme in ("http", "https"):
        host = urllib.parse.urlsplit(url).hostname or ""
        if host and host in domains:
            return
        raise InvalidArgument(
            f"{param}: the server fetches http(s) images only from its "
            f"--allowed-media-domains ({', '.join(domains) or 'none'}); send a data URL",
            param=param, reason="MEDIA_URL_NOT_ALLOWED")
    if scheme == "file" and not local_path:
        raise InvalidArgument(f"{param}: file URLs are read only under the server's "
                              "--allowed-local-media-path (not set)", param=param,
                              reason="MEDIA_URL_NOT_ALLOWED")


def image_url(param: str, image: Any) -> str:
    """A typed ImageInput (bytes + MIME type, or a URL) as the URL vLLM's
    parser loads: bytes become a data URL."""
    if image.data:
        if image.url:
            raise InvalidArgument(f"{param}: give data or url, not both",
                                  param=f"{param}.url", reason="FIELDS_CONFLICT")
        mime = image.mime_type.lower()
        if mime not in IMAGE_MIME_TYPES:
            raise InvalidArgument(f"{param}.mime_type '{image.mime_type}' is not one of "
                                  f"{_types()}", param=f"{param}.mime_type",
                                  reason="UNSUPPORTED_MEDIA_TYPE")
        return f"data:{mime};base64," + base64.b64encode(image.data).decode("ascii")
    if not image.url:
        raise InvalidArgument(f"{param}: set data (with mime_type) or url",
                              param=f"{param}.data", reason="FIELD_REQUIRED")
    check_url(f"{param}.url", image.url)
    return str(image.url)


def image_parts(messages: list[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """Each image part of template-ready messages: (its field, its URL)."""
    for i, m in enumerate(messages):
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if part.get("type") == "image_url":
                yield f"messages[{i}].content[{j}]", part["image_url"]["url"]


def data_url_chars(messages: list[dict[str, Any]]) -> int:
    """The characters of the data URLs among the messages' image parts
    (what reading their headers decodes)."""
    return sum(len(url) for _, url in image_parts(messages) if url.startswith("data:"))


def _data_len(url: str) -> int:
    """The decoded size of a data URL's payload (from its base64 length)."""
    if not url.startswith("data:"):
        return 0
    payload = len(url) - url.find(",") - 1
    return payload * 3 // 4


def check_request_media(messages: list[dict[str, Any]]) -> None:
    """The request's bounds, before anything is decoded: at most
    MAX_IMAGES_PER_REQUEST images and MAX_MEDIA_BYTES of image bytes."""
    count = total = 0
    for param, url in image_parts(messages):
        count += 1
        if count > MAX_IMAGES_PER_REQUEST:
            raise InvalidArgument(f"{param}: more than {MAX_IMAGES_PER_REQUEST} images in one "
                                  "request", param=param, reason="TOO_MANY_ITEMS")
        total += _data_len(url)
        if total > MAX_MEDIA_BYTES:
            raise InvalidArgument(f"{param}: the request's images exceed {MAX_MEDIA_BYTES} "
                                  "bytes", param=param, reason="MEDIA_TOO_LARGE")


def inspect_data_url(param: str, url: str) -> tuple[int, int]:
    """A data URL's image, read to its header only (no pixel decoding): its
    size; MEDIA_INVALID when it is not an image, MEDIA_TOO_LARGE past
    MAX_IMAGE_PIXELS. CPU work: call it off the event loop."""
    from PIL import Image, UnidentifiedImageError

    try:
        data = base64.b64decode(url.split(",", 1)[1], validate=True)
    except (binascii.Error, IndexError, ValueError) as exc:
        raise InvalidArgument(f"{param}: the data URL is not valid base64", param=param,
                              reason="MEDIA_INVALID") from exc
    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
    except Image.DecompressionBombError as exc:  # PIL's own bound: a header past 2 x 89 Mpx
        raise InvalidArgument(f"{param}: the image is larger than {MAX_IMAGE_PIXELS} pixels",
                              param=param, reason="MEDIA_TOO_LARGE") from exc
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise InvalidArgument(f"{param}: the image does not decode ({exc})", param=param,
                              reason="MEDIA_INVALID") from exc
    if width * height > MAX_IMAGE_PIXELS:
        raise InvalidArgument(f"{param}: the image has {width}x{height} pixels, more than "
                              f"{MAX_IMAGE_PIXELS} per image", param=param,
                              reason="MEDIA_TOO_LARGE")
    return width, height


class ImageBudget:
    """A request's images as their headers are read, before any is decoded:
    their pixels summed (MAX_REQUEST_PIXELS) and, where the engine can tell
    from an image's size how many image tokens it expands to
    (`tokens_of`), those summed against the context window (`window`): a
    request whose images alone cannot fit is refused before any decode."""

    def __init__(self, window: int = 0,
                 tokens_of: Callable[[int, int], int | None] | None = None):
        self._window = window
        self._tokens_of = tokens_of
        self.pixels = 0
        self.tokens = 0

    def add(self, param: str, size: tuple[int, int]) -> None:
        width, height = size
        self.pixels += width * height
        if self.pixels > MAX_REQUEST_PIXELS:
            raise InvalidArgument(f"{param}: the request's images hold {self.pixels} pixels, "
                                  f"more than {MAX_REQUEST_PIXELS} per request", param=param,
                                  reason="MEDIA_TOO_LARGE")
        tokens = self._tokens_of(width, height) if self._tokens_of else None
        if tokens is None or not self._window:
            return
        self.tokens += tokens
        if self.tokens >= self._window:
            raise InvalidArgument(f"{param}: the request's images expand to at least "
                                  f"{self.tokens} tokens; the context window is {self._window} "
                                  "tokens", param=param, reason="PROMPT_TOO_LONG")

    def inspect(self, param: str, url: str) -> None:
        """A data URL's header read (inspect_data_url) and its image counted;
        other URLs are counted when loaded (the operator's allowed hosts
        and folder). CPU work: call it off the event loop."""
        if url.startswith("data:"):
            self.add(param, inspect_data_url(param, url))
