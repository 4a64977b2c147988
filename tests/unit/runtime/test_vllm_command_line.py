"""`vllm serve`'s command line on `tokenwire serve`: the positional model,
a vLLM YAML --config with frontend keys, and every vLLM frontend flag
(walked from vLLM's own parser) honoured or refused with a message that
names what to use instead."""

from __future__ import annotations

import argparse
import json

import pytest

from tokenwire.server.core.settings import add_arguments
from tokenwire.server.runtime.cli import parse_settings

pytest.importorskip("vllm")

from tokenwire.server.engine.vllm.args import build_parser, given_dests
from tokenwire.server.engine.vllm.frontend_flags import (
    FRONTEND,
    HONOURED,
    refuse_frontend_flags,
    vllm_frontend_actions,
)

NOT_ACTIONS = {"model_tag", "config"}  # the positional model; --config is vLLM's parser's own


def _off_default(parser: argparse.ArgumentParser, action: argparse.Action) -> list[str]:
    """A command line giving `action` a value other than vLLM's default."""
    flag = action.option_strings[0]
    if isinstance(action, argparse.BooleanOptionalAction):
        return ["--no-" + flag[2:]] if action.default else [flag]
    if action.nargs == 0:  # store_true
        return [flag]
    if action.choices:
        return [flag, next(str(c) for c in action.choices if c != action.default)]
    for value in ("7", '["https://example.com"]', "x"):  # the first its type takes
        try:
            parser.parse_args([flag, value])
        except SystemExit:
            continue
        return [flag, value]
    raise AssertionError(f"no value for {flag}")


def test_every_vllm_frontend_flag_is_honoured_or_refused() -> None:
    parser = build_parser(add_arguments)
    ours = parser._option_string_actions
    missing, wrong = [], []
    for action in vllm_frontend_actions():
        why = FRONTEND.get(action.dest)
        if why is None:
            missing.append(action.dest)
            continue
        if why == HONOURED or action.dest not in parser.tokenwire_refused:
            # honoured: tokenwire's own flag of that name (or the positional model, --config)
            if action.dest not in NOT_ACTIONS and action.option_strings[0] not in ours:
                wrong.append(f"{action.dest}: honoured but not in tokenwire's parser")
            continue
        argv = _off_default(parser, action)
        if argv[0] == "--grpc":
            with pytest.raises(SystemExit, match="drop --grpc"):
                parse_settings(argv)
            continue
        ns = parser.parse_args(argv)
        with pytest.raises(SystemExit) as exc_info:
            refuse_frontend_flags(parser, ns, given_dests(parser, argv))
        msg = str(exc_info.value)
        if why not in msg or "--" + action.dest.replace("_", "-") not in msg:
            wrong.append(f"{action.dest}: {msg}")
    assert not missing, f"vLLM frontend flags neither honoured nor refused: {missing}"
    assert not wrong, wrong


def test_refused_flag_names_what_to_use_and_exits_before_loading() -> None:
    with pytest.raises(SystemExit, match=r"--enable-ssl-refresh is vLLM's.*--tls-cert"):
        parse_settings(["--enable-ssl-refresh"])
    with pytest.raises(SystemExit, match=r"--enable-request-id-headers is vLLM's.*"
                                         r"`tokenwire up --enable-request-id-headers`"):
        parse_settings(["--enable-request-id-headers"])
    with pytest.raises(SystemExit, match=r"--allowed-origins.*gateway"):
        parse_settings(["--allowed-origins", '["*"]'])
    # At vLLM's own default a refused flag changes nothing, and passes.
    s = parse_settings(["--enable-log-deltas", "--allowed-methods", '["*"]'])
    assert s.model


def test_positional_model_as_vllm_serve_takes_it() -> None:
    s = parse_settings(["Qwen/X", "--max-model-len", "512"])
    assert s.model == "Qwen/X" and s.max_model_len == 512
    assert s.engine_args["model"] == "Qwen/X"
    fake = parse_settings(["Qwen/Y", "--engine", "fake"])
    assert fake.model == "Qwen/Y" and fake.resolved_served_name() == "Qwen/Y"


def test_vllm_yaml_config_with_frontend_keys(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    config = tmp_path / "serve.yaml"
    config.write_text("max-model-len: 1024\n"
                      "chat-template-content-format: string\n"
                      "response-role: assistant\n"
                      "api-key: [sk-a, sk-b]\n"
                      "enable-auto-tool-choice: true\n"
                      "tool-call-parser: hermes\n"
                      "enable-log-deltas: true\n"
                      "uvicorn-log-level: info\n"
                      "default-chat-template-kwargs:\n  enable_thinking: false\n")
    s = parse_settings(["Qwen/X", "--config", str(config), "--max-model-len", "512"])
    assert (s.model, s.max_model_len, s.chat_template_content_format) == ("Qwen/X", 512, "string")
    assert s.api_keys() == ("sk-a", "sk-b")
    assert s.enable_auto_tool_choice and s.tool_call_parser == "hermes"
    assert json.loads(s.default_chat_template_kwargs) == {"enable_thinking": False}
    config.write_text("ssl-ciphers: HIGH\n")
    with pytest.raises(SystemExit, match=r"--ssl-ciphers.*gRPC's TLS ciphers"):
        parse_settings(["Qwen/X", "--config", str(config)])


def test_vllm_tls_flags_are_the_grpc_listeners(tmp_path) -> None:
    """vLLM's --ssl-* on `tokenwire serve`: --ssl-certfile/--ssl-keyfile are
    --tls-cert/--tls-key; mTLS with --ssl-ca-certs and --ssl-cert-reqs 2; 1
    (CERT_OPTIONAL) is refused with what to use (gRPC cannot ask without
    requiring)."""
    s = parse_settings(["--ssl-certfile", "c.pem", "--ssl-keyfile", "k.pem",
                        "--ssl-ca-certs", "ca.pem", "--ssl-cert-reqs", "2"])
    assert (s.tls_cert, s.tls_key, s.ssl_ca_certs, s.ssl_cert_reqs) == (
        "c.pem", "k.pem", "ca.pem", 2)
    s.check_tls()
    config = tmp_path / "serve.yaml"
    config.write_text("ssl-certfile: c.pem\nssl-keyfile: k.pem\nssl-cert-reqs: 1\n"
                      "ssl-ca-certs: ca.pem\n")
    s = parse_settings(["--config", str(config)])
    assert (s.tls_cert, s.ssl_cert_reqs) == ("c.pem", 1)
    with pytest.raises(ValueError, match=r"--ssl-cert-reqs 1 .*--ssl-cert-reqs 2.*gateway"):
        s.check_tls()
    for argv, rule in ((["--ssl-cert-reqs", "2", "--ssl-certfile", "c", "--ssl-keyfile", "k"],
                        "needs --ssl-ca-certs"),
                       (["--ssl-ca-certs", "ca.pem"], "give --tls-cert and --tls-key"),
                       (["--ssl-certfile", "c"], "go together"),
                       (["--ssl-cert-reqs", "3", "--ssl-certfile", "c", "--ssl-keyfile", "k"],
                        "must be 0")):
        with pytest.raises(ValueError, match=rule):
            parse_settings(argv).check_tls()


def test_up_takes_the_positional_model_and_several_keys(monkeypatch) -> None:
    from tokenwire.cli import build_parser as top_parser
    from tokenwire.gateway.cli import plan_replicas
    from tokenwire.server.core.settings import from_namespace

    monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    ns, extra = top_parser().parse_known_args(
        ["up", "Qwen/X", "--max-model-len", "512", "--api-key", "sk-a", "sk-b"])
    ns.extra = extra
    (replica,) = plan_replicas(ns)
    argv = list(replica.argv)
    assert argv[argv.index("--model") + 1] == "Qwen/X" and "sk-a" not in argv  # keys: env
    assert from_namespace(ns).api_keys() == ("sk-a", "sk-b")


def test_up_takes_vllms_listener_flags_for_the_gateway(monkeypatch) -> None:
    """Under `tokenwire up`, vLLM's TLS, request-id and CORS flags (bare
    names) set the gateway's listener, the one a vLLM user calls; the
    servers get none of them (their gRPC TLS is --tls-cert/--tls-key)."""
    from tokenwire.cli import build_parser as top_parser
    from tokenwire.gateway import settings as gw_settings
    from tokenwire.gateway.cli import plan_replicas

    monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
    ns, extra = top_parser().parse_known_args(
        ["up", "Qwen/X", "--ssl-certfile", "c.pem", "--ssl-keyfile", "k.pem",
         "--ssl-ca-certs", "ca.pem", "--ssl-cert-reqs", "1", "--enable-request-id-headers",
         "--allowed-origins", '["https://app.example"]', "--allow-credentials"])
    assert extra == ["Qwen/X"]
    ns.extra = extra
    gateway = gw_settings.from_namespace(ns)
    assert (gateway.tls_cert, gateway.tls_key, gateway.ssl_ca_certs, gateway.ssl_cert_reqs) == (
        "c.pem", "k.pem", "ca.pem", 1)
    assert gateway.enable_request_id_headers and gateway.allow_credentials
    assert gateway.allowed_origins == ("https://app.example",)
    (replica,) = plan_replicas(ns)
    assert not any(a.startswith(("--ssl", "--tls", "--allow", "--enable-request"))
                   for a in replica.argv), replica.argv


def test_up_takes_its_own_keys_from_a_vllm_yaml(tmp_path, monkeypatch) -> None:
    """`tokenwire up MODEL --config vllm.yaml`: the keys `up` takes itself
    (its listener's: `port` is REST's, as in vLLM's YAML; --grpc-port, keys)
    are up's, the command line winning; the rest reach every replica's
    `tokenwire serve --config` (the engine's)."""
    import yaml

    from tokenwire.cli import build_parser as top_parser
    from tokenwire.gateway import settings as gw_settings
    from tokenwire.gateway.cli import plan_replicas, up_config
    from tokenwire.server.core.settings import from_namespace

    monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    config = tmp_path / "vllm.yaml"
    config.write_text("port: 8001\nhost: 127.0.0.1\ngrpc-port: 7001\nmax-model-len: 1024\n"
                      "api-key: [sk-a, sk-b]\nssl-certfile: c.pem\nssl-keyfile: k.pem\n"
                      "enable-request-id-headers: true\nallowed-origins: ['*']\n"
                      "default-chat-template-kwargs:\n  enable_thinking: false\n")
    parser = top_parser()
    argv = up_config(parser, ["Qwen/X", "--config", str(config), "--port", "9001"])
    ns, extra = parser.parse_known_args(["up", *argv])
    ns.extra = extra
    assert ns.gateway_listen_port == 9001 and ns.port == 7001  # REST: the command line wins
    gateway = gw_settings.from_namespace(ns)
    assert (gateway.tls_cert, gateway.enable_request_id_headers, gateway.allowed_origins) == (
        "c.pem", True, ("*",))
    server = from_namespace(ns)
    assert server.api_keys() == ("sk-a", "sk-b")
    assert json.loads(server.default_chat_template_kwargs) == {"enable_thinking": False}
    (replica,) = plan_replicas(ns)
    args = list(replica.argv)
    assert args[args.index("--model") + 1] == "Qwen/X" and args[args.index("--port") + 1] == "7001"
    served = yaml.safe_load(open(args[args.index("--config") + 1]).read())
    assert served == {"max-model-len": 1024}
    assert not any(a.startswith(("--ssl", "--tls", "--allow", "--api-key")) for a in args)
