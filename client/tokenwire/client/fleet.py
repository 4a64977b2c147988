"""Fleet-wide control: pause → update weights → resume across every replica
as one operation, with rollback.

    report = update_fleet(["10.0.0.1:50051", "10.0.0.2:50051"], "/ckpt/step-42",
                          version="step-42")
    report.ok, [(r.version, r.paused) for r in report.replicas]

1. Every replica's state is read first: its weight version, the folder
   its weights came from (`GetControlState.weight_path`) and what that
   folder's files were when the server loaded it (`weight_fingerprint`).
2. The target version is announced to every replica
   (AnnounceWeightVersion): until a replica commits it, it counts as one
   update behind, so requests bounded by max_weight_lag 0 are refused there
   retry-safe and a gateway sends them to a replica that committed.
   Then every replica is paused, and all load the new weights (in
   parallel); each report says when its replica committed (`committed_at`).
3. If any step fails anywhere, every replica that began loading (it
   updated, or its load failed half-way) reloads its old weights under its
   old version: from `rollback_path` when given, else from the folder it
   reported in step 1. With neither, it is not rolled back
   (ROLLBACK_PATH_UNKNOWN). A rollback to the folder reported in step 1
   sends that folder's fingerprint, so its server reloads it only if its
   files are still the ones it loaded (else FAILED_PRECONDITION
   WEIGHTS_CHANGED: the folder was overwritten in place, and reloading it
   would label new weights with the old version); without a fingerprint it
   is not rolled back (ROLLBACK_FINGERPRINT_UNKNOWN). A rollback to the
   folder just loaded (`path`, or the folder the replica reported after
   its update) is refused (ROLLBACK_TO_NEW_PATH): it holds the new weights.
   A replica whose update was refused by the
   server's request checks (INVALID_ARGUMENT: the server checks the path
   before pausing, so it never began loading) or its access check is not
   touched.
4. After a failure the announce is withdrawn everywhere. Every replica
   this operation paused is resumed — except one that may
   hold other weights than its old ones because its rollback failed or
   could not run: that one is left paused (its report says so), so no
   token is sampled on weights nobody can name.
5. Every replica's state is read again for the report: what each server
   says (version, paused, load_failed, weight_path), not what this client
   assumed. `ok` is decided last: every replica updated, resumed, and
   reports the new version, running, with no failed load.

Dynamo leaves this to the caller; a trainer wants the fleet on one version,
whichever it is, and no replica serving weights under the wrong label.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import posixpath
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from tokenwire.client.errors import FailedPreconditionError, TokenwireError
from tokenwire.client.sync_client import Client

# Codes an UpdateWeightsFromPath ends with only before the server does any
# engine work: its request checks (the path is checked before pausing) and
# its access checks. Any other failure may have begun loading.
NEVER_STARTED = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED,
                           grpc.StatusCode.PERMISSION_DENIED})


@dataclasses.dataclass
class ReplicaReport:
    """What happened on one replica."""

    target: str
    old_version: str = ""  # before the update (GetControlState)
    old_path: str = ""  # the folder its weights came from before the update ("" unknown)
    # What old_path's files were when the server loaded it ("" unknown).
    old_fingerprint: str = ""
    announced: bool = False  # it was told the target version before loading
    paused_for_update: bool = False  # this operation paused it
    update_started: bool = False  # it began loading the new weights
    updated: bool = False
    committed_at: float | None = None  # when its update to the new version returned (Unix time)
    new_path: str = ""  # the folder it reported right after its update (its real path)
    rolled_back: bool = False
    resumed: bool = False
    left_paused: bool = False  # its rollback failed or could not run: not resumed
    # What the server says at the end (GetControlState read last; "" and
    # None when it did not answer).
    version: str = ""
    paused: bool | None = None
    load_failed: bool | None = None
    weight_path: str = ""
    errors: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class FleetReport:
    """The whole operation: ok when every replica updated, resumed, and
    reports the new version, running, with no failed load."""

    ok: bool
    version: str  # the version every replica reports at the end ("" when they differ)
    replicas: list[ReplicaReport]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _error(step: str, exc: TokenwireError) -> str:
    return f"{step}: {exc.code.name} [{exc.reason}] {exc.message}"


def _each(clients: Sequence[Client], reports: Sequence[ReplicaReport], step: str,
          fn: Callable[[Client, ReplicaReport], None]) -> bool:
    """Run `fn` on every replica at once; record failures; True if all passed."""
    def one(pair: tuple[Client, ReplicaReport]) -> bool:
        client, report = pair
        try:
            fn(client, report)
            return True
        except TokenwireError as exc:
            report.errors.append(_error(step, exc))
            return False

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(clients))) as pool:
        return all(list(pool.map(one, zip(clients, reports, strict=True))))


def update_fleet(
    targets: Sequence[str], path: str, *, version: str, rollback_path: str = "",
    pause_mode: str = "keep", clear_cache: bool = True, admin_api_key: str | None = None,
    timeout: float = 600.0,
) -> FleetReport:
    """Update every replica's weights from `path` (a folder each replica can
    read) to `version`, as one operation; see the module doc. Without a
    `rollback_path`, a rollback reloads the folder each replica reported
    before the update."""
    clients = [Client(t, timeout=timeout, admin_api_key=admin_api_key) for t in targets]
    reports = [ReplicaReport(target=t) for t in targets]
    all_updated = False
    try:
        def read_old(client: Client, report: ReplicaReport) -> None:
            state = client.control.state()
            report.old_version, report.old_path = state.weight_version, state.weight_path
            report.old_fingerprint = state.weight_fingerprint

        def announce(client: Client, report: ReplicaReport) -> None:
            client.control.announce_weight_version(version)
            report.announced = True

        def pause(client: Client, report: ReplicaReport) -> None:
            client.control.pause(pause_mode, clear_cache=False)
            report.paused_for_update = True

        def update(client: Client, report: ReplicaReport) -> None:
            try:
                done = client.control.update_weights_from_path(
                    path, version, pause_mode=pause_mode, clear_cache=clear_cache)
            except TokenwireError as exc:
                report.update_started = exc.code not in NEVER_STARTED
                raise
            report.new_path = done.state.weight_path
            report.update_started = report.updated = True
            report.committed_at = time.time()

        all_updated = (_each(clients, reports, "state", read_old)
                       and _each(clients, reports, "announce", announce)
                       and _each(clients, reports, "pause", pause)
                       and _each(clients, reports, "update", update))
        if not all_updated:
            _rollback(clients, reports, path, rollback_path, clear_cache)
    finally:
        if not all_updated:
            _withdraw(clients, reports)
        try:
            _resume(clients, reports, all_updated)
            _each(clients, reports, "final state", _read_final)
        finally:
            for client in clients:
                client.close()
    ok = all_updated and all(
        r.resumed and not r.errors and r.version == version and r.paused is False
        and r.load_failed is False for r in reports)
    finals = {r.version for r in reports}
    common = finals.pop() if len(finals) == 1 and all(r.paused is not None for r in reports) else ""
    return FleetReport(ok=ok, version=common, replicas=reports)


def _rollback(clients: Sequence[Client], reports: Sequence[ReplicaReport], path: str,
              rollback_path: str, clear_cache: bool) -> None:
    """Every replica that began loading reloads its old weights under its old
    version (a failed load may have left anything), from a folder that still
    holds them: not the new one, and not one rewritten since it was loaded."""
    def back(client: Client, report: ReplicaReport) -> None:
        if not report.update_started:  # never began loading: still on its old weights
            return
        old = rollback_path or report.old_path
        if not old:
            raise FailedPreconditionError(
                "no rollback path: the server did not know the folder of its weights before "
                "the update (after a weight transfer or a failed load) and none was given "
                "(--rollback-path)", reason="ROLLBACK_PATH_UNKNOWN")
        if _same_folder(old, path) or _same_folder(old, report.new_path):
            raise FailedPreconditionError(
                f"not rolled back: the rollback folder {old!r} is the folder of the new weights "
                f"({path!r}): reloading it would label them with the old version "
                f"{report.old_version!r}", param="rollback_path", reason="ROLLBACK_TO_NEW_PATH")
        expected = report.old_fingerprint if old == report.old_path else ""
        if old == report.old_path and not expected and not rollback_path:
            raise FailedPreconditionError(
                f"not rolled back: the server did not record what the files of {old!r} were "
                "when it loaded them, so it cannot tell whether the folder still holds the old "
                "weights (give --rollback-path to vouch for a folder)",
                reason="ROLLBACK_FINGERPRINT_UNKNOWN")
        client.control.update_weights_from_path(old, report.old_version, pause_mode="keep",
                                                clear_cache=clear_cache,
                                                expected_fingerprint=expected)
        report.rolled_back = True

    _each(clients, reports, "rollback", back)


def _same_folder(a: str, b: str) -> bool:
    """The same folder as far as this client can tell: the server's real
    paths, or names that differ only in slashes and dots (the server's
    fingerprint check catches what a link hides)."""
    return bool(a and b) and posixpath.normpath(a) == posixpath.normpath(b)


def _withdraw(clients: Sequence[Client], reports: Sequence[ReplicaReport]) -> None:
    """The update did not go through: no replica waits for its version."""
    def withdraw(client: Client, report: ReplicaReport) -> None:
        if report.announced:
            client.control.announce_weight_version("")

    _each(clients, reports, "withdraw announce", withdraw)


def _resume(clients: Sequence[Client], reports: Sequence[ReplicaReport],
            all_updated: bool) -> None:
    """Resume every replica this operation paused whose weights are known:
    untouched, all updated, or rolled back. The others stay paused."""
    def resume(client: Client, report: ReplicaReport) -> None:
        if not report.paused_for_update:
            return
        if report.update_started and not all_updated and not report.rolled_back:
            report.left_paused = True
            report.errors.append(
                "left paused: its rollback failed or was refused (see the rollback error), so "
                "it may serve the new or mixed weights; load known weights (update-weights), "
                "then resume it")
            return
        client.control.resume()
        report.resumed = True

    _each(clients, reports, "resume", resume)


def _read_final(client: Client, report: ReplicaReport) -> None:
    state = client.control.state()
    report.version, report.paused = state.weight_version, state.paused
    report.load_failed, report.weight_path = state.load_failed, state.weight_path
