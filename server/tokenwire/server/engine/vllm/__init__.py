"""The vLLM adapter: AsyncLLM behind domain.Engine / domain.EngineControl,
vLLM's CLI flags, the shared engine core of several serving processes. The
only package that imports vLLM."""
