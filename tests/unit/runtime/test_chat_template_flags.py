"""vLLM's chat-template flags: --chat-template (a file or the text),
--default-chat-template-kwargs (under each request's kwargs),
--chat-template-content-format and --response-role. The option plumbing,
the rendering with the real tokenizer, and the reply's role on the fake
engine."""

from __future__ import annotations

import pathlib

import grpc
import pytest

from tests.rpc import chat_request
from tests.servers import ThreadServer
from tokenwire.server.core.domain import RenderOptions
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.tokenizer_ops import (
    ChatTemplateDefaults,
    TokenizerOps,
    load_chat_template,
)
from tokenwire.server.runtime.cli import main, parse_settings
from tokenwire.v1 import service_pb2_grpc

MODEL = pathlib.Path(__file__).resolve().parents[3] / ".models" / "SmolLM2-135M-Instruct"
TEMPLATE = ("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant] {% endif %}")
MESSAGES = [{"role": "user", "content": "hello there"}]


def test_flags_parse_as_vllm_spells_them(tmp_path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text(TEMPLATE)
    s = parse_settings(["--engine", "fake", "--chat-template", str(path),
                        "--default-chat-template-kwargs", '{"enable_thinking": false}',
                        "--response-role", "bot", "--chat-template-content-format", "openai"])
    assert (s.chat_template, s.response_role, s.chat_template_content_format) == (
        str(path), "bot", "openai")
    d = ChatTemplateDefaults.from_settings(s)
    assert d.template == TEMPLATE and d.kwargs == {"enable_thinking": False}
    assert d.content_format == "openai"
    assert ChatTemplateDefaults.from_settings(ServerSettings()) == ChatTemplateDefaults()


def test_template_text_and_bad_values(tmp_path) -> None:
    assert load_chat_template(TEMPLATE) == TEMPLATE  # the text itself, as vLLM takes it
    assert load_chat_template("") is None
    with pytest.raises(ValueError, match=r"--chat-template 'no-such\.jinja'"):
        load_chat_template("no-such.jinja")
    with pytest.raises(ValueError, match="--default-chat-template-kwargs"):
        ChatTemplateDefaults.from_settings(ServerSettings(default_chat_template_kwargs="[1]"))
    with pytest.raises(ValueError, match="not JSON"):
        ChatTemplateDefaults.from_settings(ServerSettings(default_chat_template_kwargs="{x"))
    with pytest.raises(SystemExit, match=r"no-such\.jinja"):  # before any model loads
        main(["--engine", "fake", "--chat-template", "no-such.jinja"])
    with pytest.raises(SystemExit):
        parse_settings(["--engine", "fake", "--chat-template-content-format", "xml"])


@pytest.fixture(scope="module")
def tokenizer():
    transformers = pytest.importorskip("transformers")
    if not MODEL.is_dir():
        pytest.skip("no .models/SmolLM2-135M-Instruct (make model)")
    return transformers.AutoTokenizer.from_pretrained(str(MODEL))


def test_server_template_file_changes_the_prompt_ids(tokenizer, tmp_path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text(TEMPLATE)
    plain = TokenizerOps(tokenizer).render_chat(MESSAGES, RenderOptions())
    ops = TokenizerOps(tokenizer, ChatTemplateDefaults.from_settings(
        ServerSettings(chat_template=str(path))))
    ids = ops.render_chat(MESSAGES, RenderOptions())
    assert ids != plain
    assert tokenizer.decode(ids) == "[user] hello there\n[assistant] "
    # A (trusted) request's own template still wins over the server's.
    own = ops.render_chat(MESSAGES, RenderOptions(chat_template="{{ messages[0].content }}!"))
    assert tokenizer.decode(own) == "hello there!"


def test_default_kwargs_under_the_requests(tokenizer) -> None:
    template = "{{ greeting }} {{ name }}"
    ops = TokenizerOps(tokenizer, ChatTemplateDefaults(
        template=template, kwargs={"greeting": "hi", "name": "server"}))
    assert tokenizer.decode(ops.render_chat(MESSAGES, RenderOptions())) == "hi server"
    asked = RenderOptions(template_kwargs={"name": "request"})
    assert tokenizer.decode(ops.render_chat(MESSAGES, asked)) == "hi request"


def test_content_format_openai_hands_content_parts(tokenizer) -> None:
    template = ("{% for m in messages %}{% if m.content is string %}S:{{ m.content }}"
                "{% else %}{% for p in m.content %}{{ p.type }}:{{ p.text }}{% endfor %}"
                "{% endif %}{% endfor %}")
    for fmt, want in (("string", "S:hello there"), ("auto", "S:hello there"),
                      ("openai", "text:hello there")):
        ops = TokenizerOps(tokenizer, ChatTemplateDefaults(template=template,
                                                           content_format=fmt))
        assert tokenizer.decode(ops.render_chat(MESSAGES, RenderOptions())) == want


def test_response_role_on_the_fake_engine() -> None:
    settings = ServerSettings(engine="fake", port=0, max_model_len=512, response_role="bot")
    server = ThreadServer(settings, FakeEngine(max_model_len=512)).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            unary = stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=10)
            assert unary.choices[0].message.role == "bot"
            first = next(iter(stub.StreamChatCompletion(chat_request(max_tokens=2), timeout=10)))
            assert first.choices[0].delta.role == "bot"
            # Without the generation prompt: the last message's role (vLLM's).
            cont = chat_request(max_tokens=2, add_generation_prompt=False,
                                continue_final_message=True,
                                messages=[{"role": "user", "content": "hi"},
                                          {"role": "assistant", "content": "Hel"}])
            got = stub.CreateChatCompletion(cont, timeout=10)
            assert got.choices[0].message.role == "assistant"
    finally:
        server.stop()
