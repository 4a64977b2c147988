"""The KV-transfer handshake at the vLLM adapter's conversion (issue #45
item 4): into vLLM's own SamplingParams.extra_args["kv_transfer_params"]
(as vLLM's chat, completion and generate servers put it, which the engine
core hands its KV connector), and RequestOutput.kv_transfer_params out."""

from __future__ import annotations

from types import SimpleNamespace

from tokenwire.server.core.domain import GenerationParams


def test_the_handshake_goes_in_extra_args_as_vllm_puts_it() -> None:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    from tokenwire.server.engine.vllm.convert import sampling_params

    given = {"do_remote_decode": True, "remote_block_ids": [1, 2]}
    sp = sampling_params(GenerationParams(kv_transfer_params=given, max_tokens=4), stream=False)
    assert isinstance(sp, SamplingParams)
    assert sp.extra_args == {"kv_transfer_params": given}
    # vLLM's engine-core request reads it from there (what the scheduler's connector sees)
    request = Request("r", prompt_token_ids=[1, 2, 3], sampling_params=sp, pooling_params=None)
    assert request.kv_transfer_params == given
    assert sampling_params(GenerationParams(), stream=True).extra_args is None


def test_the_connectors_answer_comes_out_of_the_final_output() -> None:
    from tokenwire.server.engine.vllm.convert import convert_output

    answer = {"do_remote_prefill": True, "remote_engine_id": "e", "remote_port": 5600}
    choice = SimpleNamespace(index=0, token_ids=[5], text="x", logprobs=None,
                             finish_reason="length", stop_reason=None, weight_versions=None)
    out = SimpleNamespace(outputs=[choice], num_cached_tokens=0, finished=True,
                          prompt_token_ids=[1, 2], prompt_logprobs=None, metrics=None,
                          kv_transfer_params=answer)
    assert convert_output(out, 0.0, True).kv_transfer_params == answer
    out.kv_transfer_params = None  # vLLM without a connector
    assert convert_output(out, 0.0, True).kv_transfer_params is None
