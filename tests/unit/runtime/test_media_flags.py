"""vLLM's media flags on `tokenwire serve` reach vLLM's engine arguments
(--allowed-media-domains, --allowed-local-media-path,
--limit-mm-per-prompt), and the rule that reads them (core/multimodal.py)
lets a listed host and a set local path through, nothing else."""

from __future__ import annotations

import pytest

from tests.unit.runtime.test_vllm_command_line import parse_settings
from tokenwire.server.core import multimodal
from tokenwire.server.core.errors import InvalidArgument


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
