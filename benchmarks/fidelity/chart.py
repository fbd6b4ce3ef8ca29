"""The docs page's chart: each tool's p99 ITL error against the aggregate token rate it drove.

Altair (Vega-Lite) rendered to SVG with vl-convert, once per language; the SVG keeps its text as
text, so the browser's fonts (CJK included) draw it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd
import vl_convert

LABELS = {
    "en": {
        "x": "token rate the server wrote (tokens/s, log)",
        "itl": "|p99 ITL error| (ms, log): every chunk gap",
        "tpot": "|p99 TPOT error| (ms, log): per-request mean gap",
        "tool": "tool",
        "title": "Error of each tool's p99 against the server's truth (dashed: 1 ms)",
    },
    "zh": {
        "x": "服务器实际写出的 token 速率(tokens/s,对数)",
        "itl": "p99 ITL 误差绝对值(毫秒,对数):每个分块间隔",
        "tpot": "p99 TPOT 误差绝对值(毫秒,对数):每请求平均间隔",
        "tool": "工具",
        "title": "各工具 p99 相对服务器真值的误差(虚线:1 毫秒)",
    },
}
FLOOR_MS = 0.01  # errors below this are drawn at it (a log scale has no zero)
LIMIT_MS = 1.0


def _panel(rows: list[dict[str, Any]], metric: str, words: dict[str, str]) -> alt.LayerChart:
    key = f"err_{metric}_p99_ms"
    data = pd.DataFrame(
        [
            {
                "tool": row["tool"],
                "concurrency": row["concurrency"],
                "rate": row["token_rate"],
                "error_ms": max(abs(row[key]), FLOOR_MS),
            }
            for row in rows
            if not row.get("error") and row.get(key) is not None
        ]
    )
    base = alt.Chart(data).encode(
        x=alt.X("rate:Q", scale=alt.Scale(type="log"), title=words["x"]),
        y=alt.Y("error_ms:Q", scale=alt.Scale(type="log"), title=words[metric]),
        color=alt.Color("tool:N", title=words["tool"]),
        tooltip=["tool", "concurrency", "rate", "error_ms"],
    )
    # Joined in concurrency order: a tool that falls behind writes fewer tokens/s at more
    # streams, and its line turns back.
    lines = base.mark_line(point=True).encode(order=alt.Order("concurrency:Q"))
    labels = base.mark_text(dx=6, dy=-6, fontSize=9).encode(text="concurrency:Q")
    limit = (
        alt.Chart(pd.DataFrame({"y": [LIMIT_MS]}))
        .mark_rule(strokeDash=[4, 4], color="gray")
        .encode(y="y:Q")
    )
    return (lines + labels + limit).properties(width=380, height=300)


def chart_itl_error(rows: list[dict[str, Any]], lang: str = "en") -> alt.HConcatChart:
    """Two panels: p99 ITL (chunk gaps) error and p99 TPOT (per-request mean) error."""
    words = LABELS[lang]
    return alt.hconcat(_panel(rows, "itl", words), _panel(rows, "tpot", words)).properties(
        title=words["title"]
    )


def write_charts(
    rows: list[dict[str, Any]], folder: Path, stem: str = "fidelity-itl-error"
) -> list[Path]:
    """``<stem>.svg`` (English) and ``<stem>-zh.svg`` in ``folder`` (not ``.zh.svg``: the i18n
    plugin would take that for a localized copy of the same file)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for lang in LABELS:
        spec = chart_itl_error(rows, lang).to_dict()
        path = folder / (f"{stem}.svg" if lang == "en" else f"{stem}-{lang}.svg")
        path.write_text(vl_convert.vegalite_to_svg(spec))
        paths.append(path)
    return paths
