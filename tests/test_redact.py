"""sweeper.redact: the one rule for secrets. Each credential it must recognize, each form of a
known secret, the JSON it masks staying valid, the words it must leave alone (the sample runs,
their logs, a vLLM and an SGLang log, sweeper's own messages), and the old helpers using it."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest

from sweeper.facts.serverlog import parse_server_log
from sweeper.facts.serverlog import redact as serverlog_redact
from sweeper.record import redact_argv as record_redact_argv
from sweeper.redact import (
    PATTERNS,
    REDACTED,
    Redactor,
    header_secrets,
    redact,
    redact_argv,
    strip_credentials,
    url_secrets,
)
from sweeper.schema import Target
from sweeper.schema import strip_credentials as schema_strip_credentials

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = sorted(p for p in (ROOT / "traces").iterdir() if (p / "manifest.json").exists())
KEY = "sk-proj-Q7f2LmZx9TcV4bN1"


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        ("curl --api-key sk-abc123 http://h", "sk-abc123", "curl --api-key *** http://h"),
        ("--api-key=sk-abc123 --model m", "sk-abc123", "--api-key=*** --model m"),
        ("--token tk-99zz --hf-token hf_77", "tk-99zz", "--token *** --hf-token ***"),
        ("-H 'Authorization: Bearer sk-live-1'", "sk-live-1", "-H 'Authorization: Bearer ***'"),
        ('-H "authorization: basic dXNlcjpwdw=="', "dXNlcjpwdw", '-H "authorization: basic ***"'),
        ("x-api-key: k-123456 and api-key: k-654321", "k-", "x-api-key: *** and api-key: ***"),
        ("http://alice:pa55w0rd@host:8000/v1", "pa55w0rd", "http://host:8000/v1"),
        ("https://ghp_tok3n@github.com/x", "ghp_tok3n", "https://github.com/x"),
        ("http://u:p@ss@h/x", "ss@", "http://h/x"),  # an unescaped @ in the password
        ("{'api_key': ['sk-1', 'sk-2'], 'hf_token': 'hf_x'}", "sk-", "{'api_key': ***, 'hf_token': '***'}"),
        ("api_key=None, admin_api_key='adm-1'", "adm-1", "api_key=None, admin_api_key='***'"),
        ("GET /metrics?token=abc&x=1", "abc", "GET /metrics?token=***&x=1"),
        ('{"password": "hunter2"}', "hunter2", '{"password": "***"}'),
        ("invalid Bearer eyJhbGciOi.x.y", "eyJ", "invalid Bearer ***"),
    ],
)  # fmt: skip
def test_each_recognized_credential_is_masked(text: str, secret: str, kept: str) -> None:
    assert redact(text) == kept
    assert secret not in redact(text)


@pytest.mark.parametrize(
    "text",
    [
        "pass the key with --api-key or the OPENAI_API_KEY environment variable",
        "Decode batch. #running-req: 233, #token: 370959, token usage: 0.82, #queue-req: 317",
        "--max-num-batched-tokens 256 --tokenizer /m --ssl-keyfile k.pem --kv-cache-dtype fp8",
        "Avg prompt throughput: 1.0 tokens/s, Running: 4 reqs, GPU KV cache usage: 3.2%",
        "server_args=ServerArgs(api_key=None, tokenizer_path='x', skip_tokenizer_init=False)",
        "Maximum concurrency for 2,048 tokens per request: 3.2x",
        "http://127.0.0.1:8000/metrics and user@example.com",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


def test_no_sample_run_or_log_changes() -> None:
    """Nothing in the sample trace sets is a secret: the rule leaves every byte as it is."""
    assert SAMPLES
    for folder in SAMPLES:
        for path in sorted(folder.iterdir()):
            opener = gzip.open if path.suffix == ".gz" else open
            with opener(path, "rt", encoding="utf-8") as fh:
                text = fh.read()
            masked = (
                PATTERNS.text(text)
                if path.name == "server.log"
                else "\n".join(PATTERNS.json(line) for line in text.split("\n"))
            )
            assert masked == text, path


def test_known_secrets_in_every_form_a_server_may_send_them_back() -> None:
    redactor = Redactor.for_run(
        api_key=KEY, urls=["http://alice:s3cr%40t-pw@h/v1", "http://tok-abcdef12@m/metrics"]
    )
    basic = base64.b64encode(b"alice:s3cr@t-pw").decode()
    for text in (
        f"echo: {KEY}!",  # anywhere, not only after a name
        f"the key {KEY[:12]}",  # clipped by an error message's length limit
        "s3cr%40t-pw and s3cr@t-pw",  # as written in the URL and percent-decoded
        f"Basic {basic} in the body",  # the Authorization an HTTP client made of the URL
        "token tok-abcdef12",  # a URL's lone user info
    ):
        masked = redactor.text(text)
        for secret in (KEY[:12], "s3cr", basic[:12], "tok-abcdef12"):
            assert secret not in masked, (text, masked)
        assert REDACTED in masked


def test_a_short_known_secret_is_only_masked_where_recognized() -> None:
    redactor = Redactor(["pw"])
    assert redactor.secrets == ()
    assert redactor.text("upward http://u:pw@h/") == "upward http://h/"


def test_json_documents_stay_valid_and_only_strings_change() -> None:
    redactor = Redactor.for_run(api_key=KEY)
    document = json.dumps(
        {
            "command": ["aiperf", "--api-key", "sk-zz", "-H", "Authorization: Bearer sk-hh"],
            "url": "http://u:pw@h/x",
            "kv_bytes_per_token": {"value": 3},
            "chunk_tokens": [1, 2],
            "message": f'401 {{"api_key": "{KEY}", "token": "abc"}} \'password\': \'pp\'',
            "tokens": 5,
        }
    )
    masked = json.loads(redactor.json(document))
    assert masked == {
        "command": ["aiperf", "--api-key", "***", "-H", "Authorization: Bearer ***"],
        "url": "http://h/x",
        "kv_bytes_per_token": {"value": 3},
        "chunk_tokens": [1, 2],
        "message": '401 {"api_key": "***", "token": "***"} \'password\': \'***\'',
        "tokens": 5,
    }


def test_argv_hides_the_value_after_an_option_named_like_a_key() -> None:
    argv = ["sweeper", "record", "--api-key", KEY, "--base-url", "http://u:pw@h", "--x=1"]
    assert redact_argv(argv) == [
        "sweeper", "record", "--api-key", "***", "--base-url", "http://h", "--x=1",
    ]  # fmt: skip
    assert redact_argv(["vllm", "serve", "--api-key", "--port", "1"]) == [
        "vllm", "serve", "--api-key", "--port", "1",
    ]  # fmt: skip
    assert redact_argv(["x", "--label", f"note={KEY}"], KEY) == ["x", "--label", "note=***"]


def test_header_and_url_secrets() -> None:
    assert header_secrets({"Authorization": f"Bearer {KEY}", "X-Api-Key": "k-1"}) == [KEY, "k-1"]
    basic = base64.b64encode(b"bob:pw-9").decode()
    assert header_secrets({"authorization": f"Basic {basic}"}) == [basic, "pw-9"]
    assert url_secrets("http://h/x") == [] and url_secrets(None) == []
    assert "pw-9" in url_secrets("https://bob:pw-9@h")


def test_the_old_helpers_are_this_rule() -> None:
    line = "non-default args: {'api_key': ['sk-abc'], 'max_num_seqs': 4, 'hf_token': 'hf_xyz'}"
    assert serverlog_redact(line) == redact(line)
    assert "sk-abc" not in serverlog_redact(line) and "'max_num_seqs': 4" in serverlog_redact(line)
    assert record_redact_argv(["--api-key", KEY], KEY) == ["--api-key", REDACTED]
    url = "https://user:sk-secret@api.example.com/v1"
    assert schema_strip_credentials(url) == strip_credentials(url) == "https://api.example.com/v1"
    assert Target(base_url=url).base_url == "https://api.example.com/v1"
    config = parse_server_log(
        "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: {'api_key': "
        "['sk-abc'], 'max_num_seqs': 4}"
    ).config
    assert config.max_num_seqs is not None and "sk-abc" not in (config.max_num_seqs.detail or "")


def test_a_large_log_is_masked_line_by_line_quickly() -> None:
    """A vLLM log is mostly lines with no credential word: the cheap test skips them."""
    import time

    line = "INFO 06-03 06:07:50 [loggers.py:1] Avg prompt throughput: 1.0 tokens/s, Running: 4\n"
    log = line * 50_000 + f"args: api_key='{KEY}'\n"  # ~4.5 MB
    start = time.perf_counter()
    masked = PATTERNS.text(log)
    assert time.perf_counter() - start < 5.0
    assert KEY not in masked and masked.count("\n") == log.count("\n")
