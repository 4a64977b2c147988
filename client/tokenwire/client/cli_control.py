"""`tokenwire control ...`: the ControlService for operators.

    tokenwire control status
    tokenwire control pause --mode keep
    tokenwire control update-weights /ckpt/step-42 --version step-42
    tokenwire control resume
    tokenwire control reset-cache
    tokenwire control --fleet HOST:PORT,HOST:PORT update-weights /ckpt/step-42 \
        --version step-42 --rollback-path /ckpt/step-41

With --fleet, update-weights runs on every replica as one operation
(pause all, update all, resume all; if one fails, every replica that began
loading reloads its old weights under its old version: --rollback-path, or
the folder it reported before; one whose rollback fails stays paused) and
prints the per-replica report with each server's final state; status
prints every replica's state. After a failed load a server refuses
`resume` until a load succeeds; `resume --force` overrides.

Prints the control state as JSON; exit status 1 with the error on stderr
when the server refuses. The admin key comes from --admin-api-key or
$TOKENWIRE_ADMIN_API_KEY.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from google.protobuf import json_format

from tokenwire.client._common import DEFAULT_TARGET
from tokenwire.client.errors import TokenwireError
from tokenwire.client.sync_client import Client


def add_control_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    control = sub.add_parser("control",
                             help="pause/resume generation, update weights (RL training)",
                             description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    control.add_argument("--server", default=os.environ.get("TOKENWIRE_SERVER", DEFAULT_TARGET),
                         help=f"server address (default $TOKENWIRE_SERVER or {DEFAULT_TARGET})")
    control.add_argument("--admin-api-key", default=None,
                         help="the admin key (default $TOKENWIRE_ADMIN_API_KEY)")
    control.add_argument("--timeout", type=float, default=600.0, help="deadline in seconds")
    control.add_argument("--fleet", action="extend", metavar="HOST:PORT,...", default=None,
                         type=lambda v: [t for t in v.split(",") if t],
                         help="every replica's server address (not the gateway's), comma-"
                              "separated or repeated: update-weights and status act on all")
    ops = control.add_subparsers(dest="op", required=True)
    ops.add_parser("status", help="paused, version, adapters, requests in flight")
    pause = ops.add_parser("pause", help="pause generation")
    pause.add_argument(
        "--mode",
        choices=("abort", "wait", "keep"),
        default="abort",
        help="abort in-flight requests (default), wait for them, or keep them frozen",
    )
    pause.add_argument("--keep-cache", action="store_true", help="do not clear the KV/prefix cache")
    resume = ops.add_parser("resume", help="resume generation")
    resume.add_argument("--force", action="store_true",
                        help="resume even though the last weight load failed (the weights may "
                             "be mixed; their tokens carry the '+failed-load' version)")
    update = ops.add_parser("update-weights", help="reload weights from a checkpoint folder")
    update.add_argument("path", help="a folder on the server with the same architecture")
    update.add_argument("--version", default="", help="the weight version after the update")
    update.add_argument("--pause-mode", choices=("abort", "wait", "keep"), default="keep")
    update.add_argument("--keep-cache", action="store_true",
                        help="do not reset the prefix cache (stale KV may be reused)")
    update.add_argument("--rollback-path", default="",
                        help="with --fleet: the weights to go back to if a replica fails "
                             "(default: the folder each server reported serving before the "
                             "update; a replica that knows none is left paused)")
    ops.add_parser("reset-cache", help="reset the prefix cache")
    control.set_defaults(func=run_control)


def run_fleet(ns: argparse.Namespace) -> int:
    from tokenwire.client.fleet import update_fleet

    if ns.op == "update-weights":
        report = update_fleet(ns.fleet, ns.path, version=ns.version, rollback_path=ns.rollback_path,
                              pause_mode=ns.pause_mode, clear_cache=not ns.keep_cache,
                              admin_api_key=ns.admin_api_key, timeout=ns.timeout)
        print(json.dumps(report.as_dict(), indent=2))
        return 0 if report.ok else 1
    if ns.op != "status":
        print(f"tokenwire control {ns.op}: with --fleet only update-weights and status",
              file=sys.stderr)
        return 2
    states = {}
    for target in ns.fleet:
        with Client(target, timeout=ns.timeout, admin_api_key=ns.admin_api_key) as client:
            try:
                states[target] = json_format.MessageToDict(
                    client.control.state(), preserving_proto_field_name=True)
            except TokenwireError as err:
                states[target] = {"error": f"{err.code.name}: {err.message}"}
    print(json.dumps(states, indent=2))
    return 0 if all("error" not in s for s in states.values()) else 1


def run_control(ns: argparse.Namespace) -> int:
    if ns.fleet:
        return run_fleet(ns)
    with Client(ns.server, timeout=ns.timeout, admin_api_key=ns.admin_api_key) as client:
        ctl = client.control
        try:
            if ns.op == "pause":
                state = ctl.pause(ns.mode, clear_cache=not ns.keep_cache)
            elif ns.op == "resume":
                state = ctl.resume(force=ns.force)
            elif ns.op == "update-weights":
                state = ctl.update_weights_from_path(
                    ns.path, ns.version, pause_mode=ns.pause_mode, clear_cache=not ns.keep_cache,
                ).state
            elif ns.op == "reset-cache":
                ctl.reset_prefix_cache()
                state = ctl.state()
            else:
                state = ctl.state()
        except TokenwireError as err:
            print(f"tokenwire control {ns.op}: {err.code.name}: {err.message}", file=sys.stderr)
            return 1
    print(json_format.MessageToJson(state, preserving_proto_field_name=True))
    return 0
