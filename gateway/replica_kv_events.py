"""`tokenwire up --replicas N` with vLLM's --kv-events-config: each replica's
engine publishes its KV-cache events on ports of its own, so N engines on
one host do not collide on one ZMQ bind ("Address already in use")."""

from __future__ import annotations

import json

KV_EVENTS_FLAG = "--kv-events-config"
KV_EVENTS_DEFAULT_ENDPOINT = "tcp://*:5557"  # vLLM's KVEventsConfig.endpoint


def for_replica(argv: list[str], index: int) -> list[str]:
    """Replica `index`'s engine flags: vLLM's --kv-events-config (JSON) with
    its tcp ports (endpoint, replay_endpoint) moved up by index x the
    replica's data-parallel size, so the replicas' engines on one host bind
    ports of their own (each data-parallel rank adds its rank to them, as
    under `vllm serve`). Replica 0 keeps the ports as given; a port of 0
    (the OS's choice) and ipc:// endpoints stay as they are."""
    at = next((k for k, a in enumerate(argv)
               if a == KV_EVENTS_FLAG or a.startswith(KV_EVENTS_FLAG + "=")), None)
    if index == 0 or at is None:
        return list(argv)
    inline = argv[at] != KV_EVENTS_FLAG
    raw = argv[at].split("=", 1)[1] if inline else (argv[at + 1] if at + 1 < len(argv) else "")
    try:
        config = json.loads(raw)
    except ValueError:
        return list(argv)  # vLLM refuses it, for every replica alike
    if not isinstance(config, dict) or not config.get("enable_kv_cache_events"):
        return list(argv)
    step = index * _data_parallel_size(argv)
    config["endpoint"] = _moved(str(config.get("endpoint") or KV_EVENTS_DEFAULT_ENDPOINT), step)
    if config.get("replay_endpoint"):
        config["replay_endpoint"] = _moved(str(config["replay_endpoint"]), step)
    value = json.dumps(config, separators=(",", ":"))
    if inline:
        return [*argv[:at], f"{KV_EVENTS_FLAG}={value}", *argv[at + 1:]]
    return [*argv[:at], KV_EVENTS_FLAG, value, *argv[at + 2:]]


def _moved(endpoint: str, step: int) -> str:
    host, sep, port = endpoint.rpartition(":")
    if not (endpoint.startswith("tcp://") and sep and port.isdigit() and int(port)):
        return endpoint
    return f"{host}:{int(port) + step}"


def _data_parallel_size(argv: list[str]) -> int:
    for k, a in enumerate(argv):
        for flag in ("--data-parallel-size", "-dp"):
            value = (argv[k + 1] if a == flag and k + 1 < len(argv)
                     else a.split("=", 1)[1] if a.startswith(flag + "=") else None)
            if value is not None and value.isdigit():
                return max(1, int(value))
    return 1
