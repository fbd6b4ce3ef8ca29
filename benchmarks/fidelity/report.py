"""Markdown tables of a fidelity results file, for docs/fidelity.md and docs/fidelity.zh.md.

python benchmarks/fidelity/report.py benchmarks/results/fidelity-2cpu.json [--lang zh]
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import click

HEADERS = {
    "en": (
        "tool", "streams", "tok/s (truth)", "TTFT p50 err", "TTFT p99 err", "ITL p50 err",
        "ITL p99 err", "TPOT p99 err", "CPU (cores)", "delivery p50 / p99 / max",
        "loop lag p99", "read delay p99", "merged", "flagged",
    ),
    "zh": (
        "工具", "并发流", "token/s(真值)", "TTFT p50 误差", "TTFT p99 误差", "ITL p50 误差",
        "ITL p99 误差", "TPOT p99 误差", "CPU(核)", "送达延迟 p50 / p99 / 最大",
        "事件循环滞后 p99", "读取等待 p99", "合并分块", "自检告警",
    ),
}  # fmt: skip
WORDS = {
    "en": {"yes": "yes", "no": "no", "failed": "failed"},
    "zh": {"yes": "是", "no": "否", "failed": "失败"},
}


def _num(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:+.{digits}f}" if digits and value < 0 else f"{value:.{digits}f}"


def markdown_table(rows: list[dict[str, Any]], lang: str = "en") -> str:
    words = WORDS[lang]
    lines = [
        "| " + " | ".join(HEADERS[lang]) + " |",
        "|" + "|".join(["---"] + ["--:"] * (len(HEADERS[lang]) - 1)) + "|",
    ]
    for row in rows:
        if row.get("error"):
            cells = [row["tool"], str(row["concurrency"]), words["failed"]] + ["–"] * 11
        else:
            delivery = row.get("delivery")
            lag = row.get("loop_lag")
            flagged = row.get("flagged")
            stamps = row.get("stamps") or {}
            cells = [
                row["tool"],
                str(row["concurrency"]),
                f"{row['token_rate']:.0f}",
                _num(row.get("err_ttft_p50_ms")),
                _num(row.get("err_ttft_p99_ms")),
                _num(row.get("err_itl_p50_ms")),
                _num(row.get("err_itl_p99_ms")),
                _num(row.get("err_tpot_p99_ms")),
                _num(row.get("cpu_cores")),
                (
                    f"{delivery['p50_ms']:.2f} / {delivery['p99_ms']:.2f} / {delivery['max_ms']:.1f}"
                    if delivery
                    else "–"
                ),
                _num(lag["p99_ms"]) if lag else "–",
                _num(stamps.get("read_delay_p99_ms")),
                f"{stamps['merged_chunks'] / stamps['chunks']:.1%}"
                if stamps.get("chunks")
                else "–",
                (words["yes"] if flagged else words["no"]) if flagged is not None else "–",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def sustained_table(summary: dict[str, Any], lang: str = "en") -> str:
    head = {
        "en": ("tool", "ITL: best", "ITL: contiguous", "ITL: strict", "TPOT: best",
               "TPOT: contiguous"),
        "zh": ("工具", "ITL:最高", "ITL:连续", "ITL:严格", "TPOT:最高", "TPOT:连续"),
    }[lang]  # fmt: skip
    tools = list(
        dict.fromkeys([*summary["sustained_tok_s"]["itl"], *summary["sustained_tok_s"]["tpot"]])
    )
    lines = ["| " + " | ".join(head) + " |", "|---|--:|--:|--:|--:|--:|"]
    for tool in tools:
        cells = [tool]
        for metric, keys in (
            ("itl", ("best", "contiguous", "strict")),
            ("tpot", ("best", "contiguous")),
        ):
            rate = summary["sustained_tok_s"][metric].get(tool)
            cells += [f"{rate[k]:.0f}" if rate and k in rate else "–" for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@click.command()
@click.argument("results", type=click.Path(exists=True, path_type=Path))
@click.option("--lang", type=click.Choice(["en", "zh"]), default="en")
def main(results: Path, lang: str) -> None:
    data = json.loads(results.read_text())
    print(markdown_table(data["rows"], lang))
    print()
    print(sustained_table(data["summary"], lang))


if __name__ == "__main__":
    main()
