"""The recorder's docs cannot drift: every schema field is documented in the trace-schema page and
every ``sweeper record`` option in the record page, in English and in Chinese."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from sweeper import schema
from sweeper.cli.record import record_command

DOCS = Path(__file__).resolve().parents[2] / "docs"
MODELS = [
    obj for obj in vars(schema).values()
    if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.__module__ == schema.__name__
    and not obj.__name__.startswith("_")
]  # fmt: skip


@pytest.mark.parametrize("page", ["trace-schema.md", "trace-schema.zh.md"])
def test_every_schema_field_is_documented(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    missing = [
        f"{model.__name__}.{name}"
        for model in MODELS
        for name in model.model_fields
        if f"`{name}`" not in text
    ]
    assert not missing, f"{page} does not document: {missing}"
    assert [m.__name__ for m in MODELS if m.__name__ not in text] == []


@pytest.mark.parametrize("page", ["record.md", "record.zh.md"])
def test_every_record_option_is_documented(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    options = [opt for param in record_command.params for opt in param.opts + param.secondary_opts]
    missing = [
        opt
        for opt in options
        if opt.startswith("--") and f"`{opt}" not in text and f"/ {opt}`" not in text
    ]
    assert not missing, f"{page} does not document: {missing}"
