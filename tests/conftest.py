"""Fixtures shared by the whole suite: the real vLLM (CPU build) server.

``vllm_server(name, model=..., args=[...])`` starts a vLLM with the given flags once per session
and configuration and returns a running :class:`VllmServer` (``base_url``, ``log_path``,
``log_text()``). Only one vLLM runs at a time (a 2-core machine): asking for another
configuration stops the previous one. Tests that record from the same configuration should share
a session fixture built on this one, so each configuration starts once.

When vLLM's environment or the models are missing the tests are skipped with the command that
makes them, except under CI (the ``CI`` environment variable set), where that is a failure.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / ".models"


def _load_runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "vllm_server", ROOT / "scripts" / "vllm_server.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["vllm_server"] = module
    spec.loader.exec_module(module)
    return module


vllm_runner = _load_runner()
VllmServer = vllm_runner.VllmServer


def unavailable(reason: str) -> None:
    """Skip locally; fail under CI, where everything must have been installed by .ci/run."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this is an error, not a skip)", pytrace=False)
    pytest.skip(reason)


def model_path(name: str) -> Path:
    return MODELS / name


def require_vllm(model: str = "tiny") -> Path:
    python = Path(vllm_runner.DEFAULT_PYTHON)
    if not python.exists():
        unavailable(f"vLLM environment missing ({python}): run `make vllm`")
    path = model_path(model)
    if not (path / "config.json").exists():
        unavailable(f"model {path} missing: run `make models`")
    return path


class _VllmPool:
    """At most one vLLM alive; each configuration is started once and kept until another is asked."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.current: tuple[str, object] | None = None
        self.startup_s: dict[str, float] = {}

    def get(self, name: str, model: str = "tiny", args: Sequence[str] = ()) -> object:
        if self.current is not None and self.current[0] == name:
            return self.current[1]
        self.close()
        path = require_vllm(model)
        server = VllmServer(path, extra_args=list(args), log_path=self.log_dir / f"{name}.log")
        started = time.monotonic()
        try:
            server.start()
        except vllm_runner.VllmStartError as error:
            pytest.fail(f"vLLM configuration {name!r} did not start: {error}", pytrace=False)
        self.startup_s[name] = time.monotonic() - started
        self.current = (name, server)
        return server

    def close(self) -> None:
        if self.current is not None:
            self.current[1].stop()  # type: ignore[attr-defined]
            self.current = None


@pytest.fixture(scope="session")
def vllm_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_VllmPool]:
    pool = _VllmPool(tmp_path_factory.mktemp("vllm-logs"))
    try:
        yield pool
    finally:
        pool.close()
        if pool.startup_s:
            starts = ", ".join(f"{k} {v:.0f} s" for k, v in pool.startup_s.items())
            print(f"\nvLLM start-up times: {starts}")


@pytest.fixture(scope="session")
def vllm_server(vllm_pool: _VllmPool) -> Callable[..., object]:
    """``vllm_server(name, model="tiny", args=[...])`` -> a running VllmServer."""
    return vllm_pool.get


@pytest.fixture(scope="session")
def vllm_model() -> Callable[[str], Path]:
    """``vllm_model("tiny")`` -> the model folder (skips, or fails under CI, when missing)."""
    return require_vllm


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM environment's Python (it has torch, transformers and tokenizers)."""
    require_vllm()
    return Path(vllm_runner.DEFAULT_PYTHON)
