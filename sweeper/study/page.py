"""The study page: one Markdown page per study and language, from :func:`summarize_study`'s
JSON: the configurations side by side (each level's throughput and latencies), the best
configuration and level per SLO, the Pareto frontiers, the ``--find-max`` limits and the
differences inside the noise.

:func:`render_study_page` is pure (summary in, Markdown out); the site decides where the page
goes and how a run id links to its run page (``run_link``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from sweeper.i18n import check_language, fmt_number

_WORDS = {
    "en": {
        "title": "Study {id}",
        "intro": "The same sweep against a server started once per configuration of its flags. "
        "Server command: `{template}`.",
        "configs": "Configurations",
        "flags": "flags",
        "status": "status",
        "run": "run",
        "error": "error",
        "levels": "Side by side",
        "level": "level",
        "repeats": "repeats",
        "out": "output tok/s",
        "gpu": "tok/s per GPU",
        "user": "tok/s per user",
        "ttft": "p99 TTFT ms",
        "itl50": "p50 ITL ms",
        "itl99": "p99 ITL ms",
        "best": "Best per service level",
        "best_intro": "For each service level, the configuration and level with the most "
        "goodput (requests/s meeting it) among the levels that meet it.",
        "slo": "service level",
        "goodput": "goodput req/s",
        "none": "no level meets it",
        "pareto": "Pareto frontier",
        "pareto_ttft": "Output tok/s per GPU against p99 TTFT (no other point is both faster to "
        "the first token and higher in throughput): {points}.",
        "pareto_user": "Output tok/s per GPU against tok/s per user (1000 / mean TPOT): {points}.",
        "find_max": "Highest level meeting {slo}",
        "find_line": "`{flags}`: meets at {meets}, fails at {fails}{open}.",
        "find_open": " (search unfinished)",
        "noise": "Inside the noise",
        "noise_intro": "Means over the repeats with their 95% Student t-interval; these "
        "differences are within it (Welch's interval of the difference holds 0):",
        "no_flags": "(no flags)",
        "e2el99": "p99 E2EL ms",
        "diff": "Against {base}",
        "diff_note": "Each configuration's change from the first at the same level; significant: "
        "Welch's 95% interval of the difference across repeats excludes 0.",
        "diff_note_single": "Each configuration's change from the first at the same level "
        "(one run each: record with --repeats to tell a change from the noise).",
        "significant": "significant",
        "in_noise": "within the noise",
        "interval_note": "With repeats: the mean and, in brackets, its 95% Student t-interval "
        "across the repeats (each repeat one sample).",
        "advice": "The advice checked",
        "advice_intro": "The flag changes the findings of {run} propose, each recorded beside "
        "its flags ({base}) on the same workload; each prediction against what was measured.",
        "advice_note": "Baseline: the original flags, recorded again in this study. A latency "
        "change is judged against it (with repeats: Welch's 95% interval; without: a change "
        "under 10% is inside the noise).",
        "not_tried": "Proposed without a value to try: {items}.",
        "change": "change",
        "prediction": "prediction",
        "predicted": "predicted",
        "baseline": "baseline",
        "measured": "measured",
        "verdict": "verdict",
        "kv_ceiling": "KV ceiling {from} → {to}",
        "kv_ceiling_up": "KV ceiling above {from}",
        "preemptions": "preemptions {from} → {to}",
        "itl_p99_ms": "p99 ITL at {level} shrinks from {from} ms",
        "ttft_p99_ms": "p99 TTFT at {level} shrinks from {from} ms",
        "confirmed": "confirmed",
        "not_confirmed": "not confirmed",
        "inconclusive": "inconclusive (inside the noise)",
        "not_measured": "not measured",
    },
    "zh": {
        "title": "对比实验 {id}",
        "intro": "同一组压测，每种服务器参数配置各启动一次服务器后分别录制。服务器命令：`{template}`。",
        "configs": "配置",
        "flags": "参数",
        "status": "状态",
        "run": "运行",
        "error": "错误",
        "levels": "并列对比",
        "level": "档位",
        "repeats": "重复次数",
        "out": "输出 tok/s",
        "gpu": "每 GPU tok/s",
        "user": "每用户 tok/s",
        "ttft": "p99 TTFT 毫秒",
        "itl50": "p50 ITL 毫秒",
        "itl99": "p99 ITL 毫秒",
        "best": "各服务等级的最佳选择",
        "best_intro": "对每个服务等级，在满足它的档位中选出 goodput（每秒满足该等级的请求数）最高的配置和档位。",
        "slo": "服务等级",
        "goodput": "goodput 请求/秒",
        "none": "没有档位满足",
        "pareto": "帕累托前沿",
        "pareto_ttft": "每 GPU 输出 tok/s 对 p99 TTFT（没有其他点首 token 更快且吞吐更高）：{points}。",
        "pareto_user": "每 GPU 输出 tok/s 对每用户 tok/s（1000 / 平均 TPOT）：{points}。",
        "find_max": "满足 {slo} 的最高档位",
        "find_line": "`{flags}`：{meets} 满足，{fails} 不满足{open}。",
        "find_open": "（搜索未完成）",
        "noise": "在噪声范围内的差异",
        "noise_intro": "数值为各次重复的均值及其 95% Student t 区间；以下差异落在区间之内"
        "（Welch 差值区间包含 0），无法区分：",
        "no_flags": "（无参数）",
        "e2el99": "p99 E2EL 毫秒",
        "diff": "与 {base} 对比",
        "diff_note": "同一档位上各配置相对第一种配置的变化；“显著”表示跨重复的 Welch 95% 差值区间不包含 0。",
        "diff_note_single": "同一档位上各配置相对第一种配置的变化（每种只录了一次：用 --repeats 重复录制，"
        "才能区分真实变化和噪声）。",
        "significant": "显著",
        "in_noise": "在噪声内",
        "interval_note": "有重复时：数值为各次重复的均值，方括号内为跨重复的 95% Student t 区间（每次重复算一个样本）。",
        "advice": "核对建议",
        "advice_intro": "{run} 的结论建议的参数改动，各自在其原参数（{base}）上改动后用同一负载录制；"
        "每条预测与实测对照。",
        "advice_note": "基线：原参数在本次实验中重新录制的结果。延迟的变化与基线比较（有重复时用 Welch 95% 区间；"
        "没有重复时，变化小于 10% 视为在噪声内）。",
        "not_tried": "只给出方向、没有可试数值的建议：{items}。",
        "change": "改动",
        "prediction": "预测",
        "predicted": "预测值",
        "baseline": "基线",
        "measured": "实测",
        "verdict": "结论",
        "kv_ceiling": "KV 并发上限 {from} → {to}",
        "kv_ceiling_up": "KV 并发上限高于 {from}",
        "preemptions": "抢占次数 {from} → {to}",
        "itl_p99_ms": "{level} 的 p99 ITL 从 {from} 毫秒下降",
        "ttft_p99_ms": "{level} 的 p99 TTFT 从 {from} 毫秒下降",
        "confirmed": "证实",
        "not_confirmed": "未证实",
        "inconclusive": "无法判断（在噪声内）",
        "not_measured": "未测到",
    },
}
_STATUS_ZH = {"complete": "完成", "failed": "失败", "incomplete": "未完成", "pending": "未开始",
              "running": "进行中"}  # fmt: skip


def _level(point: dict[str, Any], lang: str) -> str:
    if point.get("concurrency") is not None:
        return f"C={point['concurrency']}"
    rate = point.get("request_rate")
    if rate == "inf":
        return "全部同时发送" if lang == "zh" else "all at once"
    return f"{fmt_number(float(rate or 0), lang, 2)} " + ("请求/秒" if lang == "zh" else "req/s")


def _num(value: Any, lang: str, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return fmt_number(float(value), lang, digits)


def _flags(flags: str, w: dict[str, str]) -> str:
    return f"`{flags}`" if flags else w["no_flags"]


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return [*lines, ""]


def render_study_page(
    summary: dict[str, Any],
    lang: str = "en",
    *,
    run_link: Callable[[str], str] | None = None,
    charts: bool = True,
) -> str:
    """The study page in ``lang`` (``en`` / ``zh``) as Markdown; ``charts``: with the curves and
    the Pareto chart (Vega-Lite specs in ``div``s, as the run pages embed theirs)."""
    lang = check_language(lang)
    w = _WORDS[lang]
    link = run_link or (lambda run_id: "")

    def run_cell(run_id: str) -> str:
        target = link(run_id)
        return f"[{run_id}]({target})" if target else f"`{run_id}`"

    out = [f"# {w['title'].format(id=summary['study_id'])}", ""]
    out += [w["intro"].format(template=summary["template"]), ""]
    out += [f"## {w['configs']}", ""]
    rows = []
    for config in summary["configs"]:
        status = (
            _STATUS_ZH.get(config["status"], config["status"]) if lang == "zh" else config["status"]
        )
        error = (config["error"] or "").splitlines()[0] if config["error"] else ""
        rows.append([_flags(config["flags"], w), status, run_cell(config["run_id"]), error])
    out += _table([w["flags"], w["status"], w["run"], w["error"]], rows)
    out += _side_by_side(summary, lang, w)
    if charts and summary["points"]:
        out += _charts(summary, lang)
    out += _best_section(summary, lang, w)
    out += _pareto_section(summary, lang, w)
    out += _find_max_section(summary, lang, w)
    out += _advice_section(summary, lang, w, run_cell)
    out += _diff_section(summary, lang, w)
    if summary["indistinguishable"]:
        out += [f"## {w['noise']}", "", w["noise_intro"], ""]
        out += [f"- {_noise_sentence(pair, lang, w)}" for pair in summary["indistinguishable"]]
        out.append("")
    return "\n".join(out).rstrip() + "\n"


_CHART_LABELS = {
    "en": ({}, {}),
    "zh": (
        {"x": "输出 tok/s", "y": "p99 TTFT（毫秒，对数）", "config": "配置"},
        {
            "x": "p99 TTFT（毫秒，对数）",
            "y": "每 GPU 输出 tok/s",
            "config": "配置",
            "front": "帕累托前沿",
        },
    ),
}


def _charts(summary: dict[str, Any], lang: str) -> list[str]:
    from sweeper.report.markup import chart_html
    from sweeper.study.charts import chart_study_curves, chart_study_pareto

    curves, front = _CHART_LABELS[lang]
    return [
        chart_html(chart_study_curves(summary, curves)),
        "",
        chart_html(chart_study_pareto(summary, front)),
        "",
    ]


def _with_interval(value: Any, interval: dict[str, Any] | None, lang: str, digits: int) -> str:
    """``12.3`` or, across repeats, ``12.3 [11.0, 13.6]`` (the 95% t-interval)."""
    text = _num(value, lang, digits)
    if interval and interval.get("low") is not None:
        low, high = _num(interval["low"], lang, digits), _num(interval["high"], lang, digits)
        text += f" [{low}, {high}]"
    return text


def _side_by_side(summary: dict[str, Any], lang: str, w: dict[str, str]) -> list[str]:
    headers = [w["flags"], w["level"], w["repeats"], w["out"], w["gpu"], w["user"],
               w["ttft"], w["itl50"], w["itl99"]]  # fmt: skip
    intervals = {
        (c["flags"], iv.get("concurrency"), iv.get("request_rate")): iv
        for c in summary["configs"]
        for iv in c.get("intervals", [])
    }
    rows = []
    for p in summary["points"]:
        iv = intervals.get((p["flags"], p.get("concurrency"), p.get("request_rate"))) or {}
        lat = {m: iv.get(f"{m}_ms", {}) for m in ("ttft", "itl")}
        rows.append([
            _flags(p["flags"], w), _level(p, lang), str(p["n"]),
            _with_interval(p["output_throughput_tok_s"], iv.get("output_throughput_tok_s"), lang, 1),
            _num(p["output_throughput_per_gpu_tok_s"], lang), _num(p["tokens_per_user_tok_s"], lang),
            _with_interval(p["ttft_p99_ms"], lat["ttft"].get("p99"), lang, 2),
            _with_interval(p["itl_p50_ms"], lat["itl"].get("p50"), lang, 2),
            _with_interval(p["itl_p99_ms"], lat["itl"].get("p99"), lang, 2),
        ])  # fmt: skip
    note = [w["interval_note"], ""] if intervals else []
    return [f"## {w['levels']}", "", *note, *_table(headers, rows)]


def _best_section(summary: dict[str, Any], lang: str, w: dict[str, str]) -> list[str]:
    rows = []
    for label, top in summary["best"].items():
        if top is None:
            rows.append([f"`{label}`", w["none"], "", "", ""])
            continue
        rows.append([f"`{label}`", _flags(top["flags"], w), _level(top, lang),
                     _num(top["goodput_rps"], lang, 3), _num(top["output_throughput_tok_s"], lang)])  # fmt: skip
    headers = [w["slo"], w["flags"], w["level"], w["goodput"], w["out"]]
    return [f"## {w['best']}", "", w["best_intro"], "", *_table(headers, rows)]


def _pareto_section(summary: dict[str, Any], lang: str, w: dict[str, str]) -> list[str]:
    sep = "、" if lang == "zh" else ", "
    texts = []
    for front, key in zip(summary["pareto"], ("pareto_ttft", "pareto_user"), strict=True):
        points = sep.join(f"{_flags(p['flags'], w)} {_level(p, lang)}" for p in front["points"])
        texts.append(w[key].format(points=points or "-"))
    return [f"## {w['pareto']}", "", *(f"- {t}" for t in texts), ""]


_METRIC_NAMES = {
    "en": {"output_throughput_tok_s": "output tok/s", "ttft_ms.p99": "p99 TTFT",
           "itl_ms.p99": "p99 ITL", "e2el_ms.p99": "p99 E2EL"},
    "zh": {"output_throughput_tok_s": "输出 tok/s", "ttft_ms.p99": "p99 TTFT",
           "itl_ms.p99": "p99 ITL", "e2el_ms.p99": "p99 E2EL"},
}  # fmt: skip


def _noise_sentence(pair: dict[str, Any], lang: str, w: dict[str, str]) -> str:
    """``C=16 and C=32 are not distinguishable at p99 TTFT`` (one configuration's levels) or
    two configurations at one level, in the page's language."""
    metric = _METRIC_NAMES[lang].get(pair["metric"], pair["metric"])
    a, b = pair["a"], pair["b"]
    if pair["kind"] == "levels":
        first, second, where = _level(a, lang), _level(b, lang), _flags(a["flags"], w)
    else:
        first, second, where = _flags(a["flags"], w), _flags(b["flags"], w), _level(a, lang)
    if lang == "zh":
        space = " " if metric[:1].isascii() else ""  # a space between Chinese and Latin only
        return f"{first} 与 {second} 的{space}{metric} 无法区分（{where}）"
    return f"{first} and {second} are not distinguishable at {metric} ({where})"


_DIFF_METRICS = ("output_throughput_tok_s", "ttft_ms.p99", "itl_ms.p99", "e2el_ms.p99")


def _change(item: dict[str, Any], lang: str, w: dict[str, str]) -> str:
    change = item.get("change_pct")
    if change is None:
        return "-"
    text = ("+" if change >= 0 else "") + fmt_number(change, lang, 1) + "%"
    significant = item.get("significant")
    verdict = None if significant is None else w["significant" if significant else "in_noise"]
    if verdict:
        text += f"（{verdict}）" if lang == "zh" else f" ({verdict})"
    return text


def _diff_section(summary: dict[str, Any], lang: str, w: dict[str, str]) -> list[str]:
    diffs = summary.get("diffs") or []
    if not diffs:
        return []
    base = _flags(diffs[0]["a"], w)
    headers = [w["flags"], w["level"], w["out"], w["ttft"], w["itl99"], w["e2el99"]]
    rows = [
        [
            _flags(d["b"], w),
            _level(d, lang),
            *(_change(d["metrics"][m], lang, w) for m in _DIFF_METRICS),
        ]
        for d in diffs
    ]
    note = w["diff_note"] if summary.get("interval") else w["diff_note_single"]
    return [f"## {w['diff'].format(base=base)}", "", note, "", *_table(headers, rows)]


def _find_max_section(summary: dict[str, Any], lang: str, w: dict[str, str]) -> list[str]:
    searched = [c for c in summary["configs"] if c.get("find_max")]
    if not searched:
        return []
    out = [f"## {w['find_max'].format(slo='`' + searched[0]['find_max']['slo'] + '`')}", ""]
    for config in searched:
        found = config["find_max"]
        rate = any(lv.get("concurrency") is None for lv in config["levels"])

        def name(value: float | None, rate: bool = rate) -> str:
            if value is None:
                return "-"
            return _level({"request_rate": value} if rate else {"concurrency": int(value)}, lang)

        out.append("- " + w["find_line"].format(
            flags=config["flags"] or w["no_flags"], meets=name(found["meets"]),
            fails=name(found["fails"]), open="" if found["done"] else w["find_open"],
        ))  # fmt: skip
    return [*out, ""]


def _prediction(check: dict[str, Any], lang: str, w: dict[str, str]) -> str:
    metric = check["metric"]
    digits = 0 if metric in ("kv_ceiling", "preemptions") else 1
    key = "kv_ceiling_up" if metric == "kv_ceiling" and check.get("to") is None else metric
    level = _level({"concurrency": check["level"]}, lang) if check.get("level") else ""
    return w[key].format(
        **{
            "from": _num(check.get("from"), lang, digits),
            "to": _num(check.get("to"), lang, digits),
        },
        level=level,
    )


def _advice_section(
    summary: dict[str, Any], lang: str, w: dict[str, str], run_cell: Callable[[str], str]
) -> list[str]:
    """``--from-advice``: each prediction of each change tried, against the measurement."""
    advice = summary.get("advice")
    if not advice:
        return []
    rows = []
    for check in advice["checks"]:
        digits = 0 if check["metric"] in ("kv_ceiling", "preemptions") else 1
        rows.append([
            f"`{check['flag']} {check['value']}`",
            _prediction(check, lang, w),
            _num(check.get("to"), lang, digits) if check.get("to") is not None else "-",
            _num(check.get("baseline"), lang, digits),
            _num(check.get("measured"), lang, digits),
            w[check["verdict"]],
            run_cell(check["run_id"]) if check.get("run_id") else "-",
        ])  # fmt: skip
    intro = w["advice_intro"].format(
        run=run_cell(advice["run_id"]), base=_flags(advice["baseline"], w)
    )
    headers = [w["change"], w["prediction"], w["predicted"], w["baseline"], w["measured"],
               w["verdict"], w["run"]]  # fmt: skip
    out = [f"## {w['advice']}", "", intro, "", w["advice_note"], "", *_table(headers, rows)]
    if advice.get("not_tried"):
        sep = "、" if lang == "zh" else "; "
        items = sep.join(
            f"`{n['flag']}` {n['direction']} ({n['finding']})" for n in advice["not_tried"]
        )
        out += [w["not_tried"].format(items=items), ""]
    return out
