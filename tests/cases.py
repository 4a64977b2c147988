"""Cases and fixtures-as-functions shared by several test modules (unit,
fake-server and gateway tests import them from here, never from each other)."""

from __future__ import annotations

import datetime
import struct
import zlib

# (case id, request fields, expected code, expected ErrorInfo param)
CHAT_CASES = [
    ("unknown-extra-field", {"nvext": {"extra_fields": ["engine_data", "bogus"]}},
     "INVALID_ARGUMENT", "nvext.extra_fields"),
    ("token-id-beyond-vocab", {"nvext": {"token_data": [5, 10**6]}}, "INVALID_ARGUMENT",
     "nvext.token_data"),
    ("stop-id-beyond-vocab", {"stop_token_ids": [10**6]}, "INVALID_ARGUMENT", "stop_token_ids"),
    ("no-messages", {"messages": []}, "INVALID_ARGUMENT", "messages"),
    ("empty-prompt-raw",
     {"messages": [{"role": "user", "content": ""}], "nvext": {"use_raw_prompt": True}},
     "INVALID_ARGUMENT", "messages"),
    ("prompt-plus-max-tokens-too-long", {"max_tokens": 100000}, "INVALID_ARGUMENT", "max_tokens"),
    ("prompt-too-long", {"nvext": {"token_data": [5] * 5000}}, "INVALID_ARGUMENT",
     "nvext.token_data"),
    ("max-tokens-zero", {"max_tokens": 0}, "INVALID_ARGUMENT", "max_tokens"),
    ("max-tokens-negative", {"max_completion_tokens": -5}, "INVALID_ARGUMENT",
     "max_completion_tokens"),
    ("n-zero", {"n": 0}, "INVALID_ARGUMENT", "n"),
    ("stream-interval-zero", {"stream_options": {"stream_interval": 0}}, "INVALID_ARGUMENT",
     "stream_options.stream_interval"),
    ("stream-interval-too-big", {"stream_options": {"stream_interval": 5000}}, "INVALID_ARGUMENT",
     "stream_options.stream_interval"),
    ("n-too-big", {"n": 1000, "temperature": 1}, "INVALID_ARGUMENT", "n"),
    ("n-greedy", {"n": 2, "temperature": 0}, "INVALID_ARGUMENT", "n"),
    ("temperature-negative", {"temperature": -0.5}, "INVALID_ARGUMENT", "temperature"),
    ("temperature-nan", {"temperature": "NaN"}, "INVALID_ARGUMENT", "temperature"),
    ("top-p-zero", {"top_p": 0}, "INVALID_ARGUMENT", "top_p"),
    ("top-p-above-one", {"top_p": 1.5}, "INVALID_ARGUMENT", "top_p"),
    ("top-k-below-minus-one", {"top_k": -2}, "INVALID_ARGUMENT", "top_k"),
    ("min-p-above-one", {"min_p": 2}, "INVALID_ARGUMENT", "min_p"),
    ("presence-penalty", {"presence_penalty": 3}, "INVALID_ARGUMENT", "presence_penalty"),
    ("repetition-penalty-zero", {"repetition_penalty": 0}, "INVALID_ARGUMENT",
     "repetition_penalty"),
    ("top-logprobs-beyond-limit", {"logprobs": True, "top_logprobs": 50}, "INVALID_ARGUMENT",
     "top_logprobs"),
    ("top-logprobs-without-logprobs", {"top_logprobs": 3}, "INVALID_ARGUMENT", "top_logprobs"),
    ("unknown-role", {"messages": [{"role": "wizard", "content": "x"}]}, "INVALID_ARGUMENT",
     "messages[0].role"),
    ("image-part-not-a-url",
     {"messages": [{"role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "INVALID_ARGUMENT", "messages[0].content[0].image_url.url"),
    ("content-number", {"messages": [{"role": "user", "content": 5}]}, "INVALID_ARGUMENT",
     "messages[0].content"),
    ("stop-too-many", {"stop": [str(i) for i in range(17)]}, "INVALID_ARGUMENT", "stop"),
    ("stop-empty-string", {"stop": [""]}, "INVALID_ARGUMENT", "stop"),
    ("stop-string-too-long", {"stop": ["x" * 257]}, "INVALID_ARGUMENT", "stop"),
    ("stop-number", {"stop": 5}, "INVALID_ARGUMENT", "stop"),
    ("too-many-stop-ids", {"stop_token_ids": [5] * 257}, "INVALID_ARGUMENT", "stop_token_ids"),
    ("logit-bias-range", {"logit_bias": {"5": 500}}, "INVALID_ARGUMENT", "logit_bias[5]"),
    ("min-tokens-over-max", {"min_tokens": 10, "max_tokens": 5}, "INVALID_ARGUMENT", "min_tokens"),
    ("bad-tool-type", {"tools": [{"type": "code", "function": {"name": "f"}}]}, "INVALID_ARGUMENT",
     "tools[0]"),
    ("tool-no-name", {"tools": [{"type": "function", "function": {"name": ""}}]},
     "INVALID_ARGUMENT", "tools[0]"),
    ("tool-choice-unknown", {"tool_choice": "sometimes"}, "INVALID_ARGUMENT", "tool_choice"),
    ("tool-choice-unknown-function",
     {"tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": {"type": "function",
                      "function": {"name": "g"}}}, "INVALID_ARGUMENT", "tool_choice"),
    ("response-format-type", {"response_format": {"type": "xml"}}, "INVALID_ARGUMENT",
     "response_format"),
    ("json-schema-missing",
     {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "INVALID_ARGUMENT",
     "response_format"),
    ("continue-and-add-gen",
     {"continue_final_message": True, "add_generation_prompt": True,
      "messages": [{"role": "assistant", "content": "x"}]},
     "INVALID_ARGUMENT", "continue_final_message"),
    ("continue-not-assistant", {"continue_final_message": True}, "INVALID_ARGUMENT",
     "continue_final_message"),
    ("cache-salt-too-long", {"cache_salt": "x" * 2000}, "INVALID_ARGUMENT", "cache_salt"),
    ("unknown-model", {"model": "gpt-17"}, "NOT_FOUND", "model"),
]


GENERATE_CASES = [
    ("empty", {}, "token_ids"),
    ("beyond-vocab", {"token_ids": [1, 999]}, "token_ids"),
    ("max-tokens-zero", {"token_ids": [5, 6], "sampling_params": {"max_tokens": 0}},
     "sampling_params.max_tokens"),
    ("temperature", {"token_ids": [5, 6], "sampling_params": {"temperature": -1}},
     "sampling_params.temperature"),
    ("output-mode", {"token_ids": [5, 6], "output_mode": "bytes"}, "output_mode"),
    ("logprobs-limit", {"token_ids": [5, 6], "sampling_params": {"logprobs": 99}},
     "sampling_params.logprobs"),
    ("stream-interval", {"token_ids": [5, 6], "stream_options": {"stream_interval": 0}},
     "stream_options.stream_interval"),
]


def self_signed(tmp_path) -> tuple[str, str, bytes]:
    """A self-signed certificate for localhost: (cert path, key path, PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (tmp_path / "cert.pem").write_bytes(pem)
    (tmp_path / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    return str(tmp_path / "cert.pem"), str(tmp_path / "key.pem"), pem


def png_header(w: int, h: int) -> bytes:
    """A PNG of only its signature and header: a size, no pixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IEND", b""))
