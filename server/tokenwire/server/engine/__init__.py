"""The engines behind the domain.Engine protocol: the vLLM adapter
(engine.vllm, the only package importing vLLM), the fake engine for tests
(engine.fake), and the guards every engine runs under."""
