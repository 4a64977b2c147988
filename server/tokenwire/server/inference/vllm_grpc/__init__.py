"""vLLM's gRPC engine service (`vllm.grpc.engine.VllmEngine`, smg-grpc-proto):
the service smg's router and llm-d's picker speak to vLLM workers, served
as a front of tokenwire's (docs/routers.md)."""
