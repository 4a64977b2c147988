"""vLLM's finish_reason "error" (a retryable request-level failure, as a
multimodal processor-cache drift) at the adapter's conversion: the ids that
came with it are delivered unfinished, then the request ends with
UNAVAILABLE ENGINE_REQUEST_FAILED (vLLM's server answers 500)."""

from __future__ import annotations

from types import SimpleNamespace


def test_a_choice_finished_with_vllms_error_ends_the_request_after_its_ids() -> None:
    """vLLM's finish_reason "error" (retryable, e.g. a processor-cache
    drift) is not passed on as a finished choice: the ids that came with it
    are delivered unfinished, then UNAVAILABLE ENGINE_REQUEST_FAILED."""
    from tokenwire.server.engine.vllm.convert import convert_output, engine_failure

    def out(ids: list[int], reason: str | None) -> SimpleNamespace:
        choice = SimpleNamespace(index=0, token_ids=ids, text="x" * len(ids), logprobs=None,
                                 finish_reason=reason, stop_reason=None, weight_versions=None)
        return SimpleNamespace(outputs=[choice], num_cached_tokens=0, finished=reason is not None,
                               prompt_token_ids=[1, 2], prompt_logprobs=None, metrics=None)

    assert engine_failure(convert_output(out([5], "length"), 0.0, True)) is None
    before, error = engine_failure(convert_output(out([], "error"), 0.0, True))
    assert before is None and error.reason == "ENGINE_REQUEST_FAILED"
    assert error.code.name == "UNAVAILABLE"
    before, error = engine_failure(convert_output(out([7, 8], "error"), 0.0, True))
    assert before is not None and not before.finished
    assert [(c.token_ids, c.finish_reason) for c in before.choices] == [([7, 8], None)]


def test_vllms_engine_death_is_a_retry_safe_unavailable() -> None:
    """vLLM's EngineDeadError under a call: UNAVAILABLE ENGINE_DEAD with a
    RetryInfo delay (Trust IV item 7: `tokenwire up` restarts the replica,
    a fleet has others), which the client's retry policy retries."""
    from vllm.v1.engine.exceptions import EngineDeadError

    from tokenwire.client import RetryPolicy
    from tokenwire.client.errors import UnavailableError
    from tokenwire.server.core.errors import ENGINE_DEAD_RETRY_SECONDS, to_status
    from tokenwire.server.engine.vllm.convert import map_engine_error

    error = map_engine_error(EngineDeadError())
    assert (error.code.name, error.reason) == ("UNAVAILABLE", "ENGINE_DEAD")
    assert error.retry_after == ENGINE_DEAD_RETRY_SECONDS
    assert ("retry-after-ms", "1000") in to_status(error).trailing_metadata
    assert RetryPolicy().should_retry(UnavailableError("dead", reason="ENGINE_DEAD"), 1)
