"""Shared by the Ray tests: they need the ray extra, which ``make test`` installs (so under CI a
missing one is a failure, not a skip)."""

from __future__ import annotations

import importlib.util
import os

import pytest


def require_ray() -> None:
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI"):
            raise ImportError("the ray extra is not installed: pip install -e '.[ray]'")
        pytest.skip("the ray extra is not installed", allow_module_level=True)
