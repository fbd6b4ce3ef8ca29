"""scripts/vllm_server.py without vLLM: the command it builds, its errors, and that stopping it
leaves no process behind, checked against a stand-in "python" that serves /health on the port it
is given and starts a child that ignores SIGTERM (as a stuck engine core would)."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import vllm_server  # noqa: E402
from vllm_server import VllmServer, VllmStartError  # noqa: E402

FAKE_PYTHON = textwrap.dedent(
    """\
    #!{python}
    # Stand-in for vLLM's python: serve /health on --port, leave a SIGTERM-proof child behind.
    import http.server, os, signal, sys, time
    argv = sys.argv
    port = int(argv[argv.index("--port") + 1])
    child = os.fork()
    if child == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(1)
    with open(os.environ["FAKE_CHILD_FILE"], "w") as fh:
        fh.write(str(child))
    if os.environ.get("FAKE_EXIT"):
        print("engine failed: out of memory", flush=True)
        sys.exit(3)

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    print("args: " + " ".join(argv[1:]), flush=True)
    http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
    """
)


@pytest.fixture
def fake_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "python"
    path.write_text(FAKE_PYTHON.format(python=sys.executable))
    path.chmod(0o755)
    monkeypatch.setenv("FAKE_CHILD_FILE", str(tmp_path / "child.pid"))
    return path


@pytest.fixture
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "small"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes once reaped or defunct.
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "zombie" not in status.read_text()


def test_command_defaults_and_overrides(model: Path) -> None:
    plain = VllmServer(model, port=1234).command()
    assert plain[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert plain[plain.index("--served-model-name") + 1] == "small"
    assert plain[plain.index("--max-model-len") + 1] == str(vllm_server.DEFAULT_MAX_MODEL_LEN)
    assert plain[plain.index("--kv-cache-memory-bytes") + 1] == str(
        vllm_server.DEFAULT_KV_CACHE_BYTES
    )
    assert "--enforce-eager" in plain
    given = VllmServer(
        model, port=1234, extra_args=["--max-model-len=1024", "--kv-cache-memory-bytes", "8"]
    ).command()
    assert given.count("--max-model-len") == 0 and "--max-model-len=1024" in given
    assert given.count("--kv-cache-memory-bytes") == 1
    assert given[given.index("--kv-cache-memory-bytes") + 1] == "8"


def test_missing_environment_and_model_say_how_to_make_them(tmp_path: Path, model: Path) -> None:
    with pytest.raises(VllmStartError, match="make vllm"):
        VllmServer(model, python=tmp_path / "nope" / "python").start()
    with pytest.raises(VllmStartError, match="make models"):
        VllmServer(tmp_path / "absent", python=sys.executable).start()


def test_start_waits_for_health_and_stop_leaves_nothing(
    fake_python: Path, model: Path, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    server = VllmServer(model, python=fake_python, log_path=log, extra_args=["--max-num-seqs", "4"])
    with server:
        assert server.process is not None
        pid = server.process.pid
        child = int((tmp_path / "child.pid").read_text())
        assert alive(pid) and alive(child)
        assert server.startup_s is not None and server.startup_s < vllm_server.START_TIMEOUT_S
    # SIGTERM ended the server; its SIGTERM-proof child went with the process group.
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)
    assert not alive(child)
    assert "--max-num-seqs 4" in log.read_text()


def test_a_server_that_exits_reports_its_log(
    fake_python: Path, model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_EXIT", "1")
    server = VllmServer(model, python=fake_python, log_path=tmp_path / "server.log")
    with pytest.raises(VllmStartError, match=r"exited with code 3(.|\n)*out of memory"):
        server.start()
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)  # the group was killed although the server had already exited
