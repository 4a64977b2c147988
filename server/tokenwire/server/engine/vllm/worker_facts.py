"""What a router asks a vLLM worker about its model and its load (smg's
GetModelInfo and GetLoads, api/vllm_engine.py), read off vLLM's config,
its tokenizer and its own Prometheus gauges (the `vllm:*` series its
stat logger keeps: what llm-d's picker scrapes too)."""

from __future__ import annotations

from typing import Any


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value if isinstance(v, int)]


def model_facts(llm: Any, tokenizer: Any) -> dict[str, Any]:
    """The model's type, architectures, special ids and tokenizer folder
    (vLLM's worker advertises the HF config's EOS ids first, then the
    generation config's others)."""
    cfg = llm.model_config
    hf = cfg.hf_config
    eos = _ids(getattr(hf, "eos_token_id", None))
    try:
        generation = cfg.try_get_generation_config() or {}
    except Exception:  # an unreadable generation config: the HF config's ids
        generation = {}
    eos += [i for i in _ids(generation.get("eos_token_id")) if i not in eos]
    if not eos and getattr(tokenizer, "eos_token_id", None) is not None:
        eos = [int(tokenizer.eos_token_id)]

    def special(name: str) -> int:
        value = getattr(hf, name, None)
        if value is None:
            value = getattr(tokenizer, name, None)
        return int(value) if isinstance(value, int) else -1

    return {
        "model_type": str(getattr(hf, "model_type", "") or ""),
        "architectures": list(getattr(hf, "architectures", None) or []),
        "eos_token_ids": eos,
        "bos_token_id": special("bos_token_id"),
        "pad_token_id": special("pad_token_id"),
        "tokenizer_path": str(cfg.tokenizer or ""),
    }


_GAUGES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
           "vllm:kv_cache_usage_perc": "kv_cache_usage"}


def load_report() -> dict[str, float]:
    """Running and waiting requests and KV-cache usage (0..1), summed over
    the engine's ranks, from the gauges vLLM's stat logger set last (zeros
    before its first step, or with --disable-log-stats)."""
    from prometheus_client import REGISTRY

    found = {"running": 0.0, "waiting": 0.0, "kv_cache_usage": 0.0}
    for family in REGISTRY.collect():
        key = _GAUGES.get(family.name)
        if key is None:
            continue
        values = [s.value for s in family.samples if s.name == family.name]
        if values:
            found[key] = max(values) if key == "kv_cache_usage" else sum(values)
    return found
