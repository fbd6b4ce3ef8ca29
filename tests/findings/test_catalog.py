"""Every sentence the findings can write has its Chinese translation, with the same placeholders."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from babel.messages.pofile import read_po

from sweeper.errors import ConfigError
from sweeper.findings import SLO, parse_slos

ROOT = Path(__file__).resolve().parents[2]
PO = ROOT / "sweeper" / "locale" / "zh" / "LC_MESSAGES" / "findings.po"
SOURCES = [
    *sorted((ROOT / "sweeper" / "findings").glob("*.py")),
    ROOT / "sweeper" / "cli" / "findings.py",
]
PLACEHOLDER = re.compile(r"\{(\w+)\}")


def extracted_messages(tmp_path: Path) -> set[str]:
    pot = tmp_path / "findings.pot"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "babel.messages.frontend",
            "extract",
            "-k",
            "N_",
            "-o",
            str(pot),
            *map(str, SOURCES),
        ],
        check=True,
        capture_output=True,
    )
    with pot.open("rb") as fh:
        return {m.id for m in read_po(fh) if m.id}


def test_every_message_is_translated_with_the_same_placeholders(tmp_path: Path) -> None:
    with PO.open("rb") as fh:
        catalog = {m.id: m.string for m in read_po(fh) if m.id}
    messages = extracted_messages(tmp_path)
    assert len(messages) > 80
    untranslated = sorted(m for m in messages if not catalog.get(m))
    assert untranslated == []
    for msgid in messages:
        assert set(PLACEHOLDER.findall(msgid)) == set(PLACEHOLDER.findall(catalog[msgid])), msgid


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ttft_p99<=2s", [SLO(metric="ttft", stat="p99", bound_ms=2000)]),
        (
            "ttft_p99<=2s,itl_p50<=25ms",
            [
                SLO(metric="ttft", stat="p99", bound_ms=2000),
                SLO(metric="itl", stat="p50", bound_ms=25),
            ],
        ),
        (
            " TPOT_mean <= 40 , e2el_p90<=1500 ",
            [
                SLO(metric="tpot", stat="mean", bound_ms=40),
                SLO(metric="e2el", stat="p90", bound_ms=1500),
            ],
        ),
        ("itl_p99<=500us", [SLO(metric="itl", stat="p99", bound_ms=0.5)]),
    ],
)
def test_parse_slos(text: str, expected: list[SLO]) -> None:
    assert parse_slos(text) == expected


@pytest.mark.parametrize("bad", ["ttft<=2s", "ttft_p98<=2s", "ttft_p99>=2s", "ttft_p99<=2h", ""])
def test_bad_slo_names_the_term(bad: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_slos(bad)
    assert (repr(bad) if bad else "empty") in str(err.value)  # the bad term, or that it is empty
    assert "ttft_p99<=2s" in str(err.value)  # the example of the right form


def test_slo_labels_round_trip() -> None:
    for text in ("ttft_p99<=2s", "itl_p50<=25ms", "tpot_mean<=40ms"):
        (slo,) = parse_slos(text)
        assert slo.label == text
        assert parse_slos(slo.label) == [slo]
