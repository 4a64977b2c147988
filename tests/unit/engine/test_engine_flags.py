"""`tokenwire serve` takes vLLM's own engine flags (parsed by vLLM's
machinery), applies tokenwire's and the CPU platform's defaults only where
no flag was given, reads `--config FILE.yaml` with the command line
winning, and fails bad flags with exit status 2 before any model loads."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tokenwire.server.runtime.cli import parse_settings

pytest.importorskip("vllm")


def engine_args(*argv: str) -> dict:
    return parse_settings(list(argv)).engine_args


def test_help_lists_tokenwire_settings_and_vllm_engine_flags(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_settings(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "tokenwire (the server's own settings)" in out
    for flag in ("--enable-control", "--max-concurrent-requests",  # tokenwire's
                 "--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
                 "--quantization", "--tokenizer", "--override-generation-config",
                 "--enable-lora", "--max-lora-rank", "--distributed-executor-backend"):  # vLLM's
        assert flag in out, flag


@pytest.mark.parametrize(
    "argv", [["--no-such-flag"], ["--max-num-seqs", "many"], ["--dtype", "float7"]]
)
def test_bad_engine_flags_exit_2_before_loading(argv) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_settings(argv)
    assert exc.value.code == 2


def test_cpu_defaults_apply_only_where_no_flag_was_given() -> None:
    args = engine_args()
    assert (args["dtype"], args["block_size"], args["max_model_len"]) == ("float32", 32, 2048)
    assert args["kv_cache_memory_bytes"] == 256 << 20 and args["enable_chunked_prefill"] is False
    assert args["logprobs_mode"] == "processed_logprobs" and args["scheduling_policy"] == "priority"
    assert args["model"].endswith("SmolLM2-135M-Instruct")
    args = engine_args(
        "--dtype",
        "bfloat16",
        "--block-size",
        "64",
        "--logprobs-mode",
        "raw_logprobs",
        "--enable-chunked-prefill",
        "--kv-cache-bytes",
        str(1 << 30),
    )
    assert (args["dtype"], args["block_size"], args["logprobs_mode"]) == (
        "bfloat16",
        64,
        "raw_logprobs",
    )
    assert args["enable_chunked_prefill"] is True and args["kv_cache_memory_bytes"] == 1 << 30
    assert args["max_model_len"] == 2048  # still the CPU default: not given


def test_one_logprob_cap_for_vllm_and_tokenwire() -> None:
    """A trainer's vLLM flag (TRL: --max-logprobs -1) sets tokenwire's cap
    too, and tokenwire's flag sets vLLM's (issue #28)."""
    def caps(*argv: str) -> tuple[int, int]:
        s = parse_settings(list(argv))
        return s.max_top_logprobs, s.engine_args["max_logprobs"]

    assert caps() == (20, 20)
    assert caps("--max-logprobs", "100") == (100, 100)
    assert caps("--max-logprobs", "-1") == (1 << 20, -1)  # vLLM's "no cap"
    assert caps("--max-top-logprobs", "50") == (50, 50)
    # both given: as given
    assert caps("--max-top-logprobs", "5", "--max-logprobs", "30") == (5, 30)


def test_parallel_and_lora_flags_reach_the_engine_arguments() -> None:
    args = engine_args("-tp", "2", "--pipeline-parallel-size", "2", "--data-parallel-size", "2",
                       "--enable-lora", "--max-loras", "3", "--max-lora-rank", "32",
                       "--distributed-executor-backend", "ray", "--max-num-seqs", "2")
    assert (
        args["tensor_parallel_size"],
        args["pipeline_parallel_size"],
        args["data_parallel_size"],
    ) == (2, 2, 2)
    assert (args["enable_lora"], args["max_loras"], args["max_lora_rank"]) == (True, 3, 32)
    assert args["distributed_executor_backend"] == "ray" and args["max_num_seqs"] == 2
    settings = parse_settings(["--enable-lora", "--served-model-name", "policy", "--port", "0",
                               "--lora-modules", "sql=/a/sql", "math=/a/math"])
    assert (
        settings.enable_lora and settings.resolved_served_name() == "policy" and settings.port == 0
    )
    assert settings.lora_modules == ("sql=/a/sql", "math=/a/math")


def test_config_file_like_vllm_serve_with_the_command_line_winning(tmp_path: Path) -> None:
    cfg = tmp_path / "engine.yaml"
    cfg.write_text("max_num_seqs: 8\nblock_size: 64\nseed: 7\n")
    args = engine_args("--config", str(cfg), "--block-size", "16")
    assert (args["max_num_seqs"], args["block_size"], args["seed"]) == (8, 16, 7)
    assert args["dtype"] == "float32"  # not in the file or on the line: the CPU default


def test_the_fake_engine_does_not_import_vllm() -> None:
    code = (
        "import sys; from tokenwire.server.runtime.cli import parse_settings; "
        "s = parse_settings(['--engine', 'fake', '--max-model-len', '512', "
        "'--served-model-name', 'f']); "
        "print(s.max_model_len, s.resolved_served_name(), 'vllm' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["512", "f", "False"]
