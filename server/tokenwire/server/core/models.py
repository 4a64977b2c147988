"""Where the built models live: the demo model (the default --model), the
tiny random model and the tiny random VLM. Only paths: building them is
runtime/demo_model.py."""

from __future__ import annotations

import os
import pathlib

DEMO_NAME = "SmolLM2-135M-Instruct"
TINY_NAME = "tiny-random-llama"
TINY_VLM_NAME = "tiny-random-vlm"


def models_dir() -> pathlib.Path:
    """Where built models live: $TOKENWIRE_MODELS_DIR, else ``.models`` at the
    root of a source checkout, else ``~/.cache/tokenwire/models``."""
    env = os.environ.get("TOKENWIRE_MODELS_DIR")
    if env:
        return pathlib.Path(env)
    here = pathlib.Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "proto").is_dir():
            return parent / ".models"
    return pathlib.Path.home() / ".cache" / "tokenwire" / "models"


def demo_model_path() -> pathlib.Path:
    return models_dir() / DEMO_NAME


def tiny_model_path() -> pathlib.Path:
    return models_dir() / TINY_NAME


def tiny_vlm_path() -> pathlib.Path:
    return models_dir() / TINY_VLM_NAME
