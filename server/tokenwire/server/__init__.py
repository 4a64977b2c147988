"""The tokenwire server: a grpc.aio server over vLLM's AsyncLLM, in layered
packages (docs/architecture.md is the map)."""
