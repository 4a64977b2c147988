"""vLLM's media flags on `tokenwire serve` reach vLLM's engine arguments
(--allowed-media-domains, --allowed-local-media-path,
--limit-mm-per-prompt), and the rule that reads them (core/multimodal.py)
lets a listed host and a set local path through, nothing else."""

from __future__ import annotations

import pytest

from tokenwire.server.core import multimodal
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.runtime.cli import parse_settings


def test_media_flags_reach_the_engine_arguments() -> None:
    s = parse_settings(["m", "--allowed-media-domains", "images.example", "cdn.example",
                        "--allowed-local-media-path", "/srv/img",
                        "--limit-mm-per-prompt", '{"image": 3}'])
    assert s.engine_args["allowed_media_domains"] == ["images.example", "cdn.example"]
    assert s.engine_args["allowed_local_media_path"] == "/srv/img"
    assert s.engine_args["limit_mm_per_prompt"] == {"image": 3}


@pytest.mark.parametrize(("url", "domains", "local", "allowed"), [
    ("https://images.example/a.png", ["images.example"], "", True),
    ("https://images.example.evil/a.png", ["images.example"], "", False),
    ("http://169.254.169.254/latest", [], "", False),
    ("file:///srv/img/a.png", [], "", False),
    ("file:///srv/img/a.png", [], "/srv/img", True),
    ("data:image/png;base64,AAAA", [], "", True),
])
def test_the_allow_list(url: str, domains: list[str], local: str, allowed: bool) -> None:
    if allowed:
        multimodal.check_allowed("p", url, domains, local)
        return
    with pytest.raises(InvalidArgument) as info:
        multimodal.check_allowed("p", url, domains, local)
    assert (info.value.reason, info.value.param) == ("MEDIA_URL_NOT_ALLOWED", "p")


def test_allowed_fetches_follow_no_redirect_and_are_bounded(monkeypatch) -> None:
    from tokenwire.server.engine.vllm.args import engine_env

    for name in ("VLLM_MEDIA_URL_ALLOW_REDIRECTS", "VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB",
                 "VLLM_MAX_IMAGE_PIXELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("VLLM_MAX_IMAGE_PIXELS", "1000")  # the operator's value wins
    engine_env()
    import os

    assert os.environ["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] == "0"
    assert os.environ["VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB"] == "10"
    assert os.environ["VLLM_MAX_IMAGE_PIXELS"] == "1000"
