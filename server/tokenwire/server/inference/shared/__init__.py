"""What the request kinds share, each module named for what it holds:
request side identity.py, tenant_policy.py, openai_body.py (what chat and
completion bodies read alike), sampling.py, messages.py, prompt_chars.py,
nvext.py (also the response's); response side choices.py,
logprobs.py, usage.py, outputs.py; render.py (an engine request as a
GenerateRequest). None of them imports a kind (chat/, completion/,
generate/): the import-linter contract "shared-imports-no-kind"."""
