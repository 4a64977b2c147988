"""Generate (token-in / token-out, vLLM's /inference/v1/generate shape):
request -> plan, run, response/chunks."""
