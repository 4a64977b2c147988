"""The RL example's pieces (examples/rl) without a model: the task's reward,
GRPO's advantages and clipped loss, token selection by version lag, and the
tokenwire side on the fake engine (a multi-turn rollout built from ids, a
weight push that fails with the server's version in the error, and vLLM's
weight-sync protocol over the ControlService)."""

from __future__ import annotations

import asyncio
import collections.abc
import random
from pathlib import Path

import pytest
import torch

from examples.rl import grpo, task
from examples.rl.rollout import Sampling, rollout
from examples.rl.weights import FleetPush, PathPush, TokenwireWeightSyncClient, WeightPushError
from tests.servers import ThreadServer, fake_serving
from tokenwire.client import AsyncClient
from tokenwire.server.engine.fake.engine import EOS, FakeEngine


def test_reward_needs_the_right_last_number_and_the_end_of_turn() -> None:
    assert task.turn_reward("3 + 4 = 7", 7, finished=True) == 1.0
    assert task.turn_reward("7", 7, finished=True) == 1.0
    # cut off by the budget
    assert task.turn_reward("3 + 4 = 7, and then", 7, finished=False) == 0.5
    assert task.turn_reward("To add 3 and 4", 7, finished=False) == 0.0
    assert task.turn_reward("7 is not 3 + 4 = 8", 7, finished=True) == 0.0
    assert task.turn_reward("no number", 7, finished=True) == 0.0
    p = task.make_problem(random.Random(1), turns=2)
    a, b = (int(x) for x in p.questions[0].removeprefix("What is ").rstrip("?").split(" + "))
    c = int(p.questions[1].removeprefix("Now add ").rstrip("."))
    assert p.answers == (a + b, a + b + c)
    assert task.reward([str(a + b), "wrong"], [True, True], p) == 0.5


def _sample(group: int, reward: float) -> grpo.Sample:
    s = grpo.Sample(group=group)
    s.reward = reward
    return s


def test_group_advantages_are_normalised_per_group_and_zero_without_signal() -> None:
    samples = [_sample(0, r) for r in (1.0, 0.0, 0.0, 1.0)] + [_sample(1, 0.5) for _ in range(4)]
    grpo.group_advantages(samples)
    assert [round(s.advantage, 3) for s in samples[:4]] == [1.0, -1.0, -1.0, 1.0]
    assert all(s.advantage == 0.0 for s in samples[4:])


def test_clipped_loss_stops_the_gradient_outside_the_trust_region() -> None:
    old = torch.log(torch.tensor([0.5, 0.5]))
    new = torch.log(torch.tensor([0.5, 0.9])).requires_grad_(True)  # ratios 1.0 and 1.8
    adv = torch.tensor([1.0, 1.0])
    loss = grpo.clipped_loss(new, old, adv, clip=0.2)
    loss.backward()
    assert loss.item() == pytest.approx(-(1.0 + 1.2) / 2)
    assert new.grad is not None
    assert new.grad[0].item() == pytest.approx(-0.5) and new.grad[1].item() == 0.0


def test_tokens_are_kept_by_version_lag_and_the_rest_counted() -> None:
    s = grpo.Sample(group=0)
    s.extend([1, 2], sampled=False)
    s.extend([3, 4, 5, 6], sampled=True, logprobs=[-1.0] * 4,
             versions=grpo.span_versions([("s2", 0, 1), ("s3", 1, 3), ("x", 3, 4)], 4))
    assert s.versions == ["", "", "s2", "s3", "s3", "x"]
    sel = grpo.select_tokens([s], trainer_version=3, max_lag=0)
    assert sel.keep == [[False, False, False, True, True, False]]
    assert sel.dropped == 2 and sel.lags[1] == 1 and sel.lags[0] == 2
    assert grpo.select_tokens([s], trainer_version=3, max_lag=1).dropped == 1  # only "x"


def test_mismatch_is_mean_and_max_absolute_difference() -> None:
    m = grpo.mismatch([-1.0, -2.0, -3.0], [-1.0, -2.5, -2.9])
    assert m["tokens"] == 3 and m["max"] == pytest.approx(0.5)
    assert m["mean"] == pytest.approx(0.2)
    assert grpo.mismatch([], [])["max"] is None


@pytest.fixture(scope="module")
def control_server() -> collections.abc.Iterator[tuple[ThreadServer, FakeEngine]]:
    engine = FakeEngine(max_model_len=512)
    with fake_serving(engine, enable_control=True, weight_version="s0") as server:
        yield server, engine


def test_a_two_turn_rollout_builds_turn_two_from_ids(control_server) -> None:
    server, engine = control_server

    async def go() -> list[grpo.Sample]:
        async with AsyncClient(server.address) as client:
            problems = [task.make_problem(random.Random(i), turns=2) for i in range(2)]
            return await rollout(
                client, problems, Sampling(group_size=3, max_tokens=40, seed=7), EOS
            )

    samples = asyncio.run(go())
    assert len(samples) == 6 and {s.group for s in samples} == {0, 1}
    for s in samples:
        runs = [
            i
            for i, (a, b) in enumerate(zip([False, *s.sampled], s.sampled, strict=False))
            if b and not a
        ]
        assert len(runs) == 2, "one sampled run per turn"
        assert all(v == "s0" for v, on in zip(s.versions, s.sampled, strict=True) if on)
        assert all(lp <= 0.0 for lp, on in zip(s.logprobs, s.sampled, strict=True) if on)
        assert s.finished == [True, True] and len(s.texts) == 2
    # Turn 2 ran on exactly turn 1's prompt + completion ids + the next-turn suffix.
    turn2 = engine.requests[-1].prompt_token_ids
    assert any(list(turn2) == s.ids[: len(turn2)] for s in samples)


class _SavedPolicy:
    """Stands in for Policy: PathPush only calls save(folder)."""

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.safetensors").write_bytes(b"")
        return folder


def test_a_missing_folder_fails_the_push_and_names_the_version_still_served(
        control_server, tmp_path: Path) -> None:
    server, _ = control_server

    async def go() -> tuple[dict[str, float], WeightPushError, str]:
        async with AsyncClient(server.address) as client:
            push = PathPush(client, tmp_path)
            ok = await push.push(_SavedPolicy(), "s1")  # type: ignore[arg-type]
            with pytest.raises(WeightPushError) as exc:
                await push.load(tmp_path / "missing", "s2")
            return ok, exc.value, (await client.control.state()).weight_version

    ok, err, served = asyncio.run(go())
    assert ok["load_ms"] >= 0 and served == "s1"
    assert "INVALID_ARGUMENT" in str(err) and "'s2'" in str(err) and "serves 's1'" in str(err)


def test_fleet_push_puts_every_replica_on_the_version_or_fails(
    control_server, tmp_path: Path
) -> None:
    server, _ = control_server
    with fake_serving(enable_control=True, weight_version="s0") as other:
        push = FleetPush([server.address, other.address], tmp_path)
        done = asyncio.run(push.push(_SavedPolicy(), "f1"))  # type: ignore[arg-type]
        assert done["replicas"] == {server.address: "f1", other.address: "f1"}
        other.stop()  # a replica gone: the fleet update cannot succeed
        with pytest.raises(WeightPushError) as exc:
            asyncio.run(push.push(_SavedPolicy(), "f2"))  # type: ignore[arg-type]
        assert "whole fleet" in str(exc.value) and other.address in str(exc.value)


def test_weight_sync_client_drives_the_transfer_calls_in_vllms_order(control_server) -> None:
    server, engine = control_server
    engine.transfer_backend = True
    engine.transfers.clear()
    try:
        sync = TokenwireWeightSyncClient(server.address)
        sync.init_weight_transfer_engine({"master_address": "127.0.0.1", "master_port": 1})
        sync.next_version = "s9"
        # What vLLM's NCCLTrainerWeightTransferEngine.send_weights calls.
        sync.start_weight_update()
        sync.update_weights({"names": ["w"], "dtype_names": ["float32"], "shapes": [[1]]})
        sync.finish_weight_update()
        assert engine.transfers == ["init", "start", "update", "finish"]
        assert sync.client.control.state().weight_version == "s9"
    finally:
        engine.transfer_backend = False
