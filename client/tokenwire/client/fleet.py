"""Fleet-wide control: pause → update weights → resume across every replica
as one operation, with rollback.

    report = update_fleet(["10.0.0.1:50051", "10.0.0.2:50051"], "/ckpt/step-42",
                          version="step-42", rollback_path="/ckpt/step-41")
    report.ok, [r.version for r in report.replicas]

Every replica is paused first; then all load the new weights (in parallel).
If any step fails on any replica, every replica that may hold other weights
than before (updated, or failed mid-load) reloads the rollback path under
its old version; in every case every replica that was paused is resumed.
The report says per replica what happened. Dynamo leaves this to the
caller; a trainer wants the fleet on one version, whichever it is.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from tokenwire.client.errors import TokenwireError
from tokenwire.client.sync_client import Client


@dataclasses.dataclass
class ReplicaReport:
    """What happened on one replica."""

    target: str
    old_version: str = ""
    version: str = ""  # the weight version it serves at the end ("" when unknown)
    paused: bool = False
    update_started: bool = False  # it began loading the new weights
    updated: bool = False
    rolled_back: bool = False
    resumed: bool = False
    errors: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class FleetReport:
    """The whole operation: ok when every replica runs the new version."""

    ok: bool
    version: str  # the version every replica should serve now (new, or the old on rollback)
    replicas: list[ReplicaReport]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _each(clients: Sequence[Client], reports: Sequence[ReplicaReport], step: str,
          fn: Callable[[Client, ReplicaReport], None]) -> bool:
    """Run `fn` on every replica at once; record failures; True if all passed."""
    def one(pair: tuple[Client, ReplicaReport]) -> bool:
        client, report = pair
        try:
            fn(client, report)
            return True
        except TokenwireError as exc:
            report.errors.append(f"{step}: {exc.code.name} [{exc.reason}] {exc.message}")
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
    `rollback_path`, a rollback reloads the model each replica serves
    (its engine config's `model`)."""
    clients = [Client(t, timeout=timeout, admin_api_key=admin_api_key) for t in targets]
    reports = [ReplicaReport(target=t) for t in targets]
    try:
        def read_old(client: Client, report: ReplicaReport) -> None:
            report.old_version = report.version = client.control.state().weight_version

        def pause(client: Client, report: ReplicaReport) -> None:
            client.control.pause(pause_mode, clear_cache=False)
            report.paused = True

        def update(client: Client, report: ReplicaReport) -> None:
            report.update_started = True
            client.control.update_weights_from_path(path, version, pause_mode=pause_mode,
                                                    clear_cache=clear_cache)
            report.updated, report.version = True, version

        ok = _each(clients, reports, "state", read_old)
        ok = ok and _each(clients, reports, "pause", pause)
        ok = ok and _each(clients, reports, "update", update)
        if not ok:
            _rollback(clients, reports, rollback_path, clear_cache)
        return FleetReport(ok=ok, version=version if ok else _common_old(reports), replicas=reports)
    finally:
        for client, report in zip(clients, reports, strict=True):
            if report.paused:
                try:
                    client.control.resume()
                    report.resumed = True
                except TokenwireError as exc:
                    report.errors.append(f"resume: {exc.code.name} {exc.message}")
            client.close()


def _common_old(reports: Sequence[ReplicaReport]) -> str:
    versions = {r.old_version for r in reports}
    return versions.pop() if len(versions) == 1 else ""


def _rollback(clients: Sequence[Client], reports: Sequence[ReplicaReport], rollback_path: str,
              clear_cache: bool) -> None:
    """Every replica that may hold other weights than before reloads the old
    ones under its old version (a failed load may have left anything)."""
    def back(client: Client, report: ReplicaReport) -> None:
        if not report.update_started:  # never began loading: still on its old weights
            return
        old = rollback_path or _model_path(client)
        client.control.update_weights_from_path(old, report.old_version, pause_mode="keep",
                                                clear_cache=clear_cache)
        report.rolled_back, report.version = True, report.old_version

    _each(clients, reports, "rollback", back)


def _model_path(client: Client) -> str:
    path = client.stats().engine_config.model
    if not path:
        raise TokenwireError("no rollback path: give one (the server does not report its model)",
                             code=grpc.StatusCode.FAILED_PRECONDITION, reason="ROLLBACK_PATH_UNKNOWN")
    return str(path)
