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
        "x": "aggregate token rate the server wrote (tokens/s, log scale)",
        "y": "|p99 ITL error| vs server truth (ms, log scale)",
        "tool": "tool",
        "limit": "1 ms",
        "title": "Recorder fidelity: p99 inter-token latency error",
    },
    "zh": {
        "x": "服务器实际写出的总 token 速率(tokens/s,对数刻度)",
        "y": "p99 ITL 误差绝对值,相对服务器真值(毫秒,对数刻度)",
        "tool": "工具",
        "limit": "1 毫秒",
        "title": "记录器保真度:p99 token 间延迟误差",
    },
}
FLOOR_MS = 0.01  # errors below this are drawn at it (a log scale has no zero)


def chart_itl_error(rows: list[dict[str, Any]], lang: str = "en") -> alt.LayerChart:
    words = LABELS[lang]
    data = pd.DataFrame(
        [
            {
                "tool": row["tool"],
                "concurrency": row["concurrency"],
                "rate": row["token_rate"],
                "error_ms": max(abs(row["err_itl_p99_ms"]), FLOOR_MS),
            }
            for row in rows
            if not row.get("error") and "err_itl_p99_ms" in row
        ]
    )
    base = alt.Chart(data).encode(
        x=alt.X("rate:Q", scale=alt.Scale(type="log"), title=words["x"]),
        y=alt.Y("error_ms:Q", scale=alt.Scale(type="log"), title=words["y"]),
        color=alt.Color("tool:N", title=words["tool"]),
        tooltip=["tool", "concurrency", "rate", "error_ms"],
    )
    lines = base.mark_line(point=True)
    labels = base.mark_text(dx=6, dy=-6, fontSize=9).encode(text="concurrency:Q")
    limit = (
        alt.Chart(pd.DataFrame({"y": [1.0], "label": [words["limit"]]}))
        .mark_rule(strokeDash=[4, 4], color="gray")
        .encode(y="y:Q")
    )
    return (lines + labels + limit).properties(title=words["title"], width=560, height=320)


def write_charts(
    rows: list[dict[str, Any]], folder: Path, stem: str = "fidelity-itl-error"
) -> list[Path]:
    """``<stem>.svg`` (English) and ``<stem>.zh.svg`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for lang in LABELS:
        spec = chart_itl_error(rows, lang).to_dict()
        path = folder / (f"{stem}.svg" if lang == "en" else f"{stem}.{lang}.svg")
        path.write_text(vl_convert.vegalite_to_svg(spec))
        paths.append(path)
    return paths
