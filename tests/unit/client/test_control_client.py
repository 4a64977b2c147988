"""client.control (sync and async), client.control.paused() and the
`tokenwire control` CLI against a fake-engine server with control on."""

from __future__ import annotations

import asyncio
import collections.abc
import json
from pathlib import Path

import pytest

from tests.servers import ThreadServer, fake_serving
from tokenwire.cli import main as cli_main
from tokenwire.client import (
    AsyncClient,
    Client,
    FailedPreconditionError,
    InvalidArgumentError,
    UnauthenticatedError,
)


@pytest.fixture(scope="module")
def server() -> collections.abc.Iterator[ThreadServer]:
    with fake_serving(enable_control=True, admin_api_key="adm") as srv:
        yield srv


def test_paused_always_resumes_and_updates_version(server: ThreadServer, tmp_path: Path) -> None:
    with Client(server.address, timeout=10, admin_api_key="adm") as client:
        with pytest.raises(RuntimeError), client.control.paused("keep") as state:
            assert state.paused
            assert client.control.state().paused
            raise RuntimeError("the trainer failed mid-update")
        assert not client.control.state().paused
        resp = client.control.update_weights_from_path(str(tmp_path), "step-1")
        assert resp.state.weight_version == "step-1"
        chat = client.chat(messages="hi", max_tokens=2)
        assert chat.system_fingerprint == "step-1"
        assert chat.choices[0].weight_versions[0].version == "step-1"
        with pytest.raises(InvalidArgumentError) as exc:
            client.control.pause("soon")
        assert exc.value.param == "mode"
    with Client(server.address, timeout=10, admin_api_key="") as client, \
            pytest.raises(UnauthenticatedError):
        client.control.pause()


def test_async_control(server: ThreadServer) -> None:
    async def run() -> tuple[bool, bool, str]:
        async with AsyncClient(server.address, timeout=10, admin_api_key="adm") as client:
            async with client.control.paused("abort") as state:
                inside = state.paused
            after = (await client.control.state()).paused
            await client.control.set_weight_version("async-v")
            return inside, after, (await client.control.state()).weight_version

    assert asyncio.run(run()) == (True, False, "async-v")


def test_cli(server: ThreadServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["control", "--server", server.address, "--admin-api-key", "adm"]
    assert cli_main([*base, "pause", "--mode", "keep"]) == 0
    assert json.loads(capsys.readouterr().out)["paused"] is True
    assert cli_main([*base, "update-weights", str(tmp_path), "--version", "cli-v"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["weight_version"] == "cli-v" and out["paused"] is True  # paused by the operator
    assert cli_main([*base, "resume"]) == 0
    assert json.loads(capsys.readouterr().out)["paused"] is False
    assert cli_main([*base, "reset-cache"]) == 0
    capsys.readouterr()
    assert cli_main([*base, "update-weights", str(tmp_path / "missing")]) == 1
    assert "INVALID_ARGUMENT" in capsys.readouterr().err


def test_resume_after_a_failed_load_needs_force(server: ThreadServer, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """After a failed load the server refuses a plain Resume; resume(force=True)
    (sync, async) and `tokenwire control resume --force` override it."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "BROKEN").touch()  # the fake engine's load of this folder fails
    base = ["control", "--server", server.address, "--admin-api-key", "adm"]
    with Client(server.address, timeout=10, admin_api_key="adm") as client:
        for resume in (lambda: client.control.resume(force=True).paused,
                       lambda: asyncio.run(_async_resume(server.address)),
                       lambda: _cli_resume(base, capsys)):
            client.control.pause("keep")
            with pytest.raises(FailedPreconditionError) as exc:
                client.control.update_weights_from_path(str(broken), "never")
            assert exc.value.reason == "WEIGHT_LOAD_FAILED"
            assert client.control.state().load_failed
            with pytest.raises(FailedPreconditionError) as exc:
                client.control.resume()
            assert exc.value.reason == "WEIGHTS_FAILED_LOAD"
            assert cli_main([*base, "resume"]) == 1
            assert "FAILED_PRECONDITION" in capsys.readouterr().err
            assert client.control.state().paused
            assert resume() is False
            assert not client.control.state().paused
        client.control.update_weights_from_path(str(tmp_path), "good")  # a load clears it
        assert not client.control.state().load_failed


async def _async_resume(address: str) -> bool:
    async with AsyncClient(address, timeout=10, admin_api_key="adm") as client:
        return bool((await client.control.resume(force=True)).paused)


def _cli_resume(base: list[str], capsys: pytest.CaptureFixture[str]) -> bool:
    assert cli_main([*base, "resume", "--force"]) == 0
    return bool(json.loads(capsys.readouterr().out)["paused"])
