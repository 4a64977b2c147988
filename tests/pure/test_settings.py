"""settings.py: every tokenwire setting documents itself (help from the
field's metadata) and closed sets are typed so the CLI shows the choices."""

from __future__ import annotations

import argparse

import pytest

from tokenwire.server.core import settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="serve", exit_on_error=False)
    settings.add_arguments(parser)
    return parser


def test_every_own_setting_has_help() -> None:
    actions = {a.dest: a for a in _parser()._actions}
    for field in settings.own_fields():
        assert actions[field.name].help, f"--{field.name.replace('_', '-')} has no help"


def test_closed_sets_are_choices() -> None:
    parser = _parser()
    engine = next(a for a in parser._actions if a.dest == "engine")
    assert tuple(engine.choices) == ("vllm", "fake")
    assert parser.parse_args(["--engine", "fake"]).engine == "fake"
    with pytest.raises(argparse.ArgumentError, match="invalid choice"):
        parser.parse_args(["--engine", "gpu"])


def test_flags_fill_the_settings() -> None:
    ns = _parser().parse_args(["--max-n", "4", "--no-warmup", "--lora-modules", "a=/x"])
    s = settings.from_namespace(ns)
    assert (s.max_n, s.warmup, s.lora_modules) == (4, False, ("a=/x",))
