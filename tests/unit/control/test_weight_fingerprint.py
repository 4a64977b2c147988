"""A loaded folder's fingerprint (issue #32 item 3): the server records
what the files of the folder it loaded were, reports it
(ControlState.weight_fingerprint), and an UpdateWeightsFromPath with
`expected_fingerprint` loads only a folder whose files still have it,
checked before anything pauses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.servers import fake_serving
from tokenwire.client import Client
from tokenwire.client.errors import FailedPreconditionError
from tokenwire.server.control.fingerprint import fingerprint
from tokenwire.server.engine.fake.engine import FakeEngine


def _checkpoint(folder: Path, content: bytes = b"step-1 weights") -> Path:
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(content)
    (folder / "config.json").write_text("{}")
    return folder


def test_a_folder_written_over_has_another_fingerprint(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "ckpt")
    weights = folder / "model.safetensors"
    before = fingerprint(str(folder), "*.safetensors")
    assert before.startswith("files-v1:1:") and before == fingerprint(str(folder), "*.safetensors")
    (folder / "notes.txt").write_text("not a weight file")  # not read by the loader
    assert fingerprint(str(folder), "*.safetensors") == before
    assert fingerprint(str(folder)) != fingerprint(str(folder), "*.safetensors")  # every file
    st = weights.stat()
    weights.write_bytes(b"step-9 weights")  # same size, the old mtime put back
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    rewritten = fingerprint(str(folder), "*.safetensors")
    assert rewritten != before
    replacement = folder / "tmp.part"  # written aside, then renamed over
    replacement.write_bytes(b"step-7 weights")
    os.replace(replacement, weights)
    assert fingerprint(str(folder), "*.safetensors") not in (before, rewritten)
    assert fingerprint(str(tmp_path / "missing")) == "" and fingerprint("org/model-id") == ""


@pytest.fixture()
def served():
    engine = FakeEngine(max_model_len=512)
    with fake_serving(engine, enable_control=True, weight_version="step-1") as server:
        yield server, engine


def test_the_state_reports_the_fingerprint_of_the_loaded_folder(served, tmp_path: Path) -> None:
    server, engine = served
    folder = _checkpoint(tmp_path / "ckpt")
    with Client(server.address, timeout=10) as client:
        assert client.control.state().weight_fingerprint == ""  # /fake/model: not a folder
        done = client.control.update_weights_from_path(str(folder), "step-2")
        assert done.state.weight_fingerprint == fingerprint(str(folder)) != ""
        engine.fail_reloads = 1
        with pytest.raises(FailedPreconditionError):
            client.control.update_weights_from_path(str(folder), "step-3")
        state = client.control.state()
        assert state.load_failed and (state.weight_path, state.weight_fingerprint) == ("", "")
        client.control.update_weights_from_path(str(folder), "step-3")
        client.control.resume()


def test_expected_fingerprint_refuses_a_changed_folder_before_pausing(
        served, tmp_path: Path) -> None:
    server, engine = served
    folder = _checkpoint(tmp_path / "ckpt")
    pauses = []
    pause = engine.pause

    async def counted(mode: str, clear_cache: bool) -> None:
        pauses.append(mode)
        await pause(mode, clear_cache)

    engine.pause = counted
    with Client(server.address, timeout=10) as client:
        recorded = client.control.update_weights_from_path(str(folder), "step-2").state
        assert len(pauses) == 1
        (folder / "model.safetensors").write_bytes(b"step-3 weights, written over")
        with pytest.raises(FailedPreconditionError) as exc:
            client.control.update_weights_from_path(
                str(folder), "step-2", expected_fingerprint=recorded.weight_fingerprint)
        assert (exc.value.reason, exc.value.param) == ("WEIGHTS_CHANGED", "expected_fingerprint")
        state = client.control.state()
        assert len(pauses) == 1 and not state.paused and not state.load_failed
        assert (state.weight_version, state.generation, state.updates) == (
            "step-2", recorded.generation, recorded.updates)
        assert state.weight_fingerprint == recorded.weight_fingerprint  # what was loaded then
        assert engine.loaded_paths == [str(folder)]
        # The fingerprint of the folder as it is now: loaded.
        client.control.update_weights_from_path(
            str(folder), "step-3", expected_fingerprint=fingerprint(str(folder)))
        assert client.control.state().weight_version == "step-3"
        assert engine.loaded_paths == [str(folder)] * 2
