"""Which media a token-in prompt's parts may name: data URLs of image
types, http(s) URLs on a host of the operator's --allowed-media-domains
(vLLM's flag; none by default), gRPC bytes with an image MIME type (made a
data URL); anything else INVALID_ARGUMENT naming the part, so the server
never fetches what a caller names unless the operator allowed the host."""

from __future__ import annotations

import base64
import urllib.parse
from collections.abc import Sequence

from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.media_inputs import MediaPart

IMAGE_MIME_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif"})


def media_url(part: MediaPart, allowed_domains: Sequence[str]) -> str:
    """The URL vLLM's media connector loads for `part`: a data URL (bytes
    from gRPC become one), or an http(s) URL on an allowed domain; anything
    else is refused here, so the server fetches nothing a caller names."""
    if part.data:
        if part.url:
            raise InvalidArgument(f"{part.param}: give url or data, not both",
                                  param=part.param, reason="FIELDS_CONFLICT")
        mime = part.mime_type.lower()
        if mime not in IMAGE_MIME_TYPES:
            raise InvalidArgument(
                f"{part.param}.mime_type '{part.mime_type}' is not one of "
                f"{', '.join(sorted(IMAGE_MIME_TYPES))}",
                param=part.param + ".mime_type", reason="UNSUPPORTED_MEDIA_TYPE")
        return f"data:{mime};base64," + base64.b64encode(part.data).decode("ascii")
    url = part.url
    if not url:
        raise InvalidArgument(f"{part.param}.url is required (a data URL, or http(s) on an "
                              "allowed domain)", param=part.param + ".url", reason="FIELD_REQUIRED")
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        head = url[5:].split(",", 1)[0].split(";", 1)[0].lower()
        if head not in IMAGE_MIME_TYPES:
            raise InvalidArgument(
                f"{part.param}.url: a data URL of type '{head}' is not an image this server "
                f"reads ({', '.join(sorted(IMAGE_MIME_TYPES))})",
                param=part.param + ".url", reason="UNSUPPORTED_MEDIA_TYPE")
        return url
    if scheme in ("http", "https"):
        host = urllib.parse.urlsplit(url).hostname or ""
        if host and host in allowed_domains:
            return url
        raise InvalidArgument(
            f"{part.param}.url: the server fetches http(s) media only from its "
            f"--allowed-media-domains ({', '.join(allowed_domains) or 'none'}); send the image "
            "as a data URL", param=part.param + ".url", reason="MEDIA_URL_NOT_ALLOWED")
    raise InvalidArgument(f"{part.param}.url: scheme '{scheme or url[:16]}' is not served "
                          "(data URLs, or http(s) from --allowed-media-domains)",
                          param=part.param + ".url", reason="MEDIA_URL_NOT_ALLOWED")
