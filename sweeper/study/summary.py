"""``sweeper study summary``: a study's configurations side by side (docs/study.md).

:func:`summarize_study` returns plain JSON-ready Python::

    {"study_version": 1, "study_id": "s1", "template": "...", "slos": ["ttft_p99<=2s", ...],
     "interval": "t95_across_repeats" | null,
     "configs": [{"index": 1, "flags": "--max-num-seqs 64", "run_id": "s1-max-num-seqs-64",
                  "status": "complete", "error": null, "server_log": "logs/....log",
                  "runs": [{"run_id", "kind", "repeat", "probe", "status"}],
                  "levels": [<summary level objects of repeat 1 and the probes, with run_id>],
                  "repeats": [{"run_id", "levels"}] (with --repeats),
                  "intervals": [{"level", "concurrency", "request_rate", "n", "<metric>": ...}],
                  "find_max": {"slo", "meets", "fails", "done", "probes"} | null}],
     "pareto": [{"x": "ttft_p99_ms", "y": "output_throughput_per_gpu_tok_s", "points": [...]},
                {"x": "tokens_per_user_tok_s", "y": "output_throughput_per_gpu_tok_s", ...}],
     "best": {"<slo>": {"flags", "run_id", "level", "concurrency" | "request_rate",
                        "goodput_rps", "output_throughput_tok_s"} | null},
     "indistinguishable": [{"kind", "metric", "a", "b", "difference", "text"}],
     "diffs": [{"a": <first flags>, "b": <flags>, "level", "concurrency" | "request_rate",
                "metrics": {"<metric>": {"a", "b", "change_pct", "significant"}}}],
     "advice": {"run_id", "baseline", "not_tried", "checks": [{"finding", "flag", "value",
                "flags", "run_id", "metric", "level", "from", "to", "direction", "baseline",
                "measured", "verdict"}]} | null}

A level of a configuration is one point: with repeats its numbers are the means over the
repeats (and probes count once each). ``best`` judges each level by the SLO's terms on its
statistics (as the findings' SLO table does) and picks the most goodput (requests/s meeting every
term, per request) among those that meet it.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from sweeper.analysis.frames import LATENCY_METRICS, STAT_NAMES
from sweeper.analysis.slo import SLO, parse_slos, slo_label
from sweeper.analysis.summary import summarize
from sweeper.analysis.thresholds import DEFAULT_SLO_TABLE
from sweeper.i18n import level_label
from sweeper.schema import MANIFEST_FILE
from sweeper.store import load_trace_set
from sweeper.study.model import StudyConfiguration, StudyManifest, read_study, study_folder
from sweeper.study.stats import INTERVAL, difference_interval, mean_interval

STUDY_SUMMARY_VERSION = 1
SCALARS = ("output_throughput_tok_s", "output_throughput_per_gpu_tok_s", "request_throughput_rps")
# What the indistinguishable pairs compare: (JSON path, how a sentence names it).
COMPARED = (
    ("output_throughput_tok_s", "output tok/s"),
    ("ttft_ms.p99", "p99 TTFT"),
    ("itl_ms.p99", "p99 ITL"),
    ("e2el_ms.p99", "p99 E2EL"),
)
PER_GPU = "output_throughput_per_gpu_tok_s"
PER_USER = "tokens_per_user_tok_s"


# Open loop: TTFT and E2EL from the schedule (null in a closed loop); SLO terms judge a rate
# level on them (SLO.column_for).
SCHEDULED_METRICS = ("ttft_sched_ms", "e2el_sched_ms")


def value_at(level: dict[str, Any], path: str) -> float | None:
    """``"ttft_ms.p99"`` of a summary level object (None when absent or not a number)."""
    value: Any = level
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def per_user(level: dict[str, Any]) -> float | None:
    """Tokens/s one user sees while decoding, 1000 / mean TPOT (InferenceMAX's interactivity)."""
    tpot = value_at(level, "tpot_ms.mean")
    return 1000.0 / tpot if tpot else None


def level_key(level: dict[str, Any]) -> tuple[str, float]:
    """A level's identity across runs: ("c", C) or ("rate", offered req/s)."""
    if level.get("concurrency") is not None:
        return ("c", float(level["concurrency"]))
    rate = level.get("offered_rate_rps")
    return ("rate", math.inf if rate == "inf" else float(rate or 0))


def _where(level: dict[str, Any]) -> dict[str, Any]:
    kind, value = level_key(level)
    out: dict[str, Any] = {"level": level.get("level")}
    if kind == "c":
        out["concurrency"] = int(value)
    else:
        out["request_rate"] = "inf" if value == math.inf else value
    return out


def _name(where: dict[str, Any]) -> str:
    if "concurrency" in where:
        return f"C={where['concurrency']}"
    rate = where["request_rate"]
    return level_label(1, math.inf if rate == "inf" else rate, "en")


def _slo_sets(slos: Sequence[str] | None) -> list[tuple[str, list[SLO]]]:
    texts = list(slos) if slos else list(DEFAULT_SLO_TABLE)
    return [(slo_label(terms), terms) for terms in (parse_slos(t) for t in texts)]


def _run_levels(
    folder: Path, run_id: str, slo_sets: list[tuple[str, list[SLO]]]
) -> list[dict[str, Any]] | None:
    """A run's summary levels, each with its run id and its goodput per SLO (``goodput``)."""
    if not (folder / run_id / MANIFEST_FILE).exists():
        return None
    ts = load_trace_set(folder / run_id)
    levels = summarize(ts)["levels"]
    goodput: dict[str, list[Any]] = {}
    for label, terms in slo_sets:
        with_slo = summarize(ts, slos=terms)["levels"]
        goodput[label] = [(lv.get("goodput_rps"), lv) for lv in with_slo]
    for i, level in enumerate(levels):
        level["run_id"] = run_id
        level["goodput"] = {label: pairs[i][0] for label, pairs in goodput.items()}
    return levels


def _config_entry(
    configuration: StudyConfiguration, out: Path, slo_sets: list[tuple[str, list[SLO]]]
) -> dict[str, Any]:
    by_run = {r.run_id: _run_levels(out, r.run_id, slo_sets) for r in configuration.runs}
    sweeps = [r for r in configuration.sweeps if by_run.get(r.run_id) is not None]
    probes = [r for r in configuration.runs if r.kind == "probe" and by_run.get(r.run_id)]
    levels = [
        *(by_run[sweeps[0].run_id] or [] if sweeps else []),
        *(level for r in probes for level in by_run[r.run_id] or []),
    ]
    levels.sort(key=level_key)
    entry: dict[str, Any] = {
        "index": configuration.index,
        "flags": configuration.flags,
        "run_id": configuration.run_id,
        "status": configuration.status,
        "error": configuration.error,
        "server_log": configuration.server_log,
        "runs": [
            {
                "run_id": r.run_id,
                "kind": r.kind,
                "repeat": r.repeat,
                "probe": r.probe,
                "status": r.status,
                "error": r.error,
            }
            for r in configuration.runs
        ],
        "levels": levels,
        "find_max": configuration.find_max.model_dump() if configuration.find_max else None,
    }
    if len(sweeps) > 1:
        entry["repeats"] = [{"run_id": r.run_id, "levels": by_run[r.run_id]} for r in sweeps]
        entry["intervals"] = _intervals([by_run[r.run_id] or [] for r in sweeps])
    entry["points"] = _points(entry, [by_run[r.run_id] or [] for r in sweeps], levels)
    return entry


def _samples(repeats: list[list[dict[str, Any]]]) -> dict[tuple[str, float], list[dict[str, Any]]]:
    grouped: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for levels in repeats:
        for level in levels:
            grouped.setdefault(level_key(level), []).append(level)
    return grouped


def _intervals(repeats: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Per level, the mean and 95% t-interval over the repeats of each throughput and each
    latency statistic."""
    out = []
    for _key, group in sorted(_samples(repeats).items()):
        item: dict[str, Any] = {**_where(group[0]), "n": len(group)}
        for name in SCALARS:
            item[name] = mean_interval([value_at(g, name) for g in group])
        for metric in LATENCY_METRICS:
            item[metric] = {
                stat: mean_interval([value_at(g, f"{metric}.{stat}") for g in group])
                for stat in STAT_NAMES
            }
        out.append(item)
    return out


def _mean(values: list[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


def _points(
    entry: dict[str, Any], repeats: list[list[dict[str, Any]]], levels: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """One point per level of the configuration: repeats averaged, probes as they are."""
    grouped = _samples(repeats)
    for level in levels:
        if level.get("run_id") not in {lv[0]["run_id"] for lv in repeats if lv}:
            grouped.setdefault(level_key(level), []).append(level)
    points = []
    for _key, group in sorted(grouped.items()):
        point: dict[str, Any] = {"flags": entry["flags"], "run_id": group[0]["run_id"]}
        point.update(_where(group[0]))
        point["n"] = len(group)
        for name in SCALARS:
            point[name] = _mean([value_at(g, name) for g in group])
        for metric in (*LATENCY_METRICS, *SCHEDULED_METRICS):
            for stat in STAT_NAMES:
                point[f"{metric.removesuffix('_ms')}_{stat}_ms"] = _mean(
                    [value_at(g, f"{metric}.{stat}") for g in group]
                )
        point[PER_USER] = _mean([per_user(g) for g in group])
        point["goodput"] = {
            label: _mean([(g.get("goodput") or {}).get(label) for g in group])
            for label in (group[0].get("goodput") or {})
        }
        points.append(point)
    return points


def pareto(points: list[dict[str, Any]], x: str, y: str, *, x_lower: bool) -> list[dict[str, Any]]:
    """The points no other point beats on both axes (y higher; x lower or higher as said)."""
    usable = [p for p in points if p.get(x) is not None and p.get(y) is not None]

    def better_or_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
        x_ok = a[x] <= b[x] if x_lower else a[x] >= b[x]
        return bool(x_ok and a[y] >= b[y])

    front = [
        p
        for p in usable
        if not any(
            q is not p and better_or_equal(q, p) and (q[x], q[y]) != (p[x], p[y]) for q in usable
        )
    ]
    front.sort(key=lambda p: p[x])
    return [
        {
            k: p[k]
            for k in ("flags", "run_id", "level", "concurrency", "request_rate", x, y)
            if k in p
        }
        for p in front
    ]


def best_points(
    points: list[dict[str, Any]], slo_sets: list[tuple[str, list[SLO]]]
) -> dict[str, Any]:
    """For each SLO, the point with the most goodput among those meeting it (judged as
    :meth:`SLO.column_for` says: a rate level from the schedule), or None."""
    best: dict[str, Any] = {}
    for label, terms in slo_sets:
        meeting = [
            p for p in points
            if all((v := p.get(t.column_for(p))) is not None and v <= t.bound_ms for t in terms)
            and (p["goodput"].get(label) is not None)
        ]  # fmt: skip
        if not meeting:
            best[label] = None
            continue
        top = max(meeting, key=lambda p: (p["goodput"][label], p["output_throughput_tok_s"] or 0))
        best[label] = {
            **{
                k: top[k]
                for k in ("flags", "run_id", "level", "concurrency", "request_rate")
                if k in top
            },
            "goodput_rps": top["goodput"][label],
            "output_throughput_tok_s": top["output_throughput_tok_s"],
        }
    return best


def _comparisons(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pairs whose difference is inside the noise: neighbouring levels of one configuration,
    and one level across configurations, for throughput and p99 TTFT / ITL / E2EL."""
    out = []
    samples = []
    for config in configs:
        repeats = [r["levels"] or [] for r in config.get("repeats", [])]
        samples.append(_samples(repeats))
    for config, grouped in zip(configs, samples, strict=True):
        keys = sorted(grouped)
        for ka, kb in itertools.pairwise(keys):
            out += _pair("levels", config, grouped[ka], config, grouped[kb])
    for i, (ca, ga) in enumerate(zip(configs, samples, strict=True)):
        for cb, gb in list(zip(configs, samples, strict=True))[i + 1 :]:
            for key in sorted(set(ga) & set(gb)):
                out += _pair("configs", ca, ga[key], cb, gb[key])
    return out


def _pair(
    kind: str,
    ca: dict[str, Any],
    a: list[dict[str, Any]],
    cb: dict[str, Any],
    b: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    out = []
    for path, words in COMPARED:
        found = difference_interval([value_at(x, path) for x in a], [value_at(x, path) for x in b])
        if found is None or not found[1] <= 0 <= found[2]:
            continue
        wa, wb = _where(a[0]), _where(b[0])
        if kind == "levels":
            text = f"{_name(wa)} and {_name(wb)} are not distinguishable at {words} ({ca['flags'] or 'no flags'})"
        else:
            text = (
                f"{ca['flags'] or 'no flags'} and {cb['flags'] or 'no flags'} are not "
                f"distinguishable at {words} at {_name(wa)}"
            )
        out.append({
            "kind": kind, "metric": path,
            "a": {"flags": ca["flags"], **wa}, "b": {"flags": cb["flags"], **wb},
            "difference": {"mean": found[0], "low": found[1], "high": found[2]},
            "text": text,
        })  # fmt: skip
    return out


def _column(path: str) -> str:
    """A compared metric's point column: ``ttft_ms.p99`` -> ``ttft_p99_ms``."""
    if "." not in path:
        return path
    metric, stat = path.split(".")
    return f"{metric.removesuffix('_ms')}_{stat}_ms"


def _point_key(point: dict[str, Any]) -> tuple[str, float]:
    if point.get("concurrency") is not None:
        return ("c", float(point["concurrency"]))
    rate = point.get("request_rate")
    return ("rate", math.inf if rate == "inf" else float(rate or 0))


def _diffs(configs: list[dict[str, Any]], points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each configuration against the first at each level both measured: the change of
    throughput and p99 TTFT / ITL / E2EL, and (with repeats on both sides) whether it is
    significant (Welch's 95% interval of the difference excludes 0; null without repeats)."""
    if len(configs) < 2:
        return []
    base = configs[0]["flags"]
    by_key = {(p["flags"], _point_key(p)): p for p in points}
    samples = {
        c["flags"]: _samples([r["levels"] or [] for r in c.get("repeats", [])]) for c in configs
    }
    out = []
    for point in points:
        if point["flags"] == base:
            continue
        key = _point_key(point)
        first = by_key.get((base, key))
        if first is None:
            continue
        metrics: dict[str, Any] = {}
        for path, _ in COMPARED:
            a, b = first.get(_column(path)), point.get(_column(path))
            found = difference_interval(
                [value_at(x, path) for x in samples[base].get(key, [])],
                [value_at(x, path) for x in samples[point["flags"]].get(key, [])],
            )
            metrics[path] = {
                "a": a,
                "b": b,
                "change_pct": (b - a) / a * 100 if a and b is not None else None,
                "significant": None if found is None else not found[1] <= 0 <= found[2],
            }
        item: dict[str, Any] = {"a": base, "b": point["flags"]}
        item.update({k: point[k] for k in ("level", "concurrency", "request_rate") if k in point})
        item["metrics"] = metrics
        out.append(item)
    return out


def summarize_study(
    study_id: str, out: Path | str = "traces", *, slos: Sequence[str] | None = None
) -> dict[str, Any]:
    """The study summary (see the module docstring)."""
    folder = study_folder(out, study_id)
    manifest = read_study(folder)
    slo_sets = _slo_sets(slos)
    configs = [_config_entry(c, Path(out), slo_sets) for c in manifest.configurations]
    points = [p for c in configs for p in c.pop("points")]
    repeated = any("repeats" in c for c in configs)
    diffs = _diffs(configs, points)
    return {
        "study_version": STUDY_SUMMARY_VERSION,
        "study_id": manifest.study_id,
        "template": manifest.template,
        "slos": [label for label, _ in slo_sets],
        "interval": INTERVAL if repeated else None,
        "configs": configs,
        "points": points,
        "pareto": [
            {
                "x": "ttft_p99_ms",
                "y": PER_GPU,
                "x_better": "lower",
                "points": pareto(points, "ttft_p99_ms", PER_GPU, x_lower=True),
            },
            {
                "x": PER_USER,
                "y": PER_GPU,
                "x_better": "higher",
                "points": pareto(points, PER_USER, PER_GPU, x_lower=False),
            },
        ],
        "best": best_points(points, slo_sets),
        "indistinguishable": _comparisons(configs) if repeated else [],
        "diffs": diffs,
        "advice": _advice(manifest, configs, diffs, Path(out)),
    }


def _advice(
    manifest: StudyManifest,
    configs: list[dict[str, Any]],
    diffs: list[dict[str, Any]],
    out: Path,
) -> dict[str, Any] | None:
    """``--from-advice``: the advised run, its baseline flags, each prediction checked."""
    if manifest.advice is None:
        return None
    from sweeper.study.advice import check_advice

    advice = manifest.advice
    return {
        "run_id": advice.run_id,
        "baseline": advice.baseline,
        "not_tried": advice.not_tried,
        "checks": check_advice(advice, configs, diffs, out),
    }


CSV_FIELDS = (
    "index", "flags", "run_id", "status", "level", "concurrency", "request_rate", "n",
    *SCALARS, PER_USER,
    *(f"{m.removesuffix('_ms')}_{s}_ms" for m in LATENCY_METRICS for s in STAT_NAMES),
)  # fmt: skip


def study_csv(summary: dict[str, Any]) -> str:
    """One row per configuration and level (its point: repeats averaged), goodput per SLO last."""
    buffer = io.StringIO()
    slos = summary["slos"]
    fields = [*CSV_FIELDS, *(f"goodput_rps[{s}]" for s in slos)]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    status = {c["flags"]: (c["index"], c["status"]) for c in summary["configs"]}
    for point in summary["points"]:
        index, state = status[point["flags"]]
        row = {k: point.get(k) for k in CSV_FIELDS}
        row.update(index=index, status=state)
        row.update({f"goodput_rps[{s}]": point["goodput"].get(s) for s in slos})
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:,.{digits}f}"


def _pm(value: Any, interval: dict[str, Any] | None, path: str, digits: int) -> str:
    """``314.1`` or, across repeats, ``314.1 ±12.0`` (half the 95% t-interval)."""
    text = _fmt(value, digits)
    found: Any = interval
    for part in path.split("."):
        found = found.get(part) if isinstance(found, dict) else None
    if isinstance(found, dict) and found.get("high") is not None and found.get("mean") is not None:
        text += f" ±{found['high'] - found['mean']:,.{digits}f}"
    return text


def render_study_summary(summary: dict[str, Any], console: Console) -> None:
    """The configurations side by side, then the best per SLO and the pairs inside the noise."""
    console.print(f"[bold]study {summary['study_id']}[/bold]  {summary['template']}")
    table = Table(title="Configurations x levels", title_justify="left")
    for header in ("flags", "level", "n", "out tok/s", "tok/s/GPU", "tok/s/user",
                   "TTFT p99 ms", "ITL p50 ms", "ITL p99 ms"):  # fmt: skip
        table.add_column(header, justify="left" if header == "flags" else "right")
    by_flags = {c["flags"]: c for c in summary["configs"]}
    intervals = {
        (c["flags"], iv.get("concurrency"), iv.get("request_rate")): iv
        for c in summary["configs"]
        for iv in c.get("intervals", [])
    }
    for point in summary["points"]:
        iv = intervals.get((point["flags"], point.get("concurrency"), point.get("request_rate")))
        table.add_row(
            point["flags"] or "(no flags)", _name(point), str(point["n"]),
            _pm(point["output_throughput_tok_s"], iv, "output_throughput_tok_s", 1),
            _fmt(point[PER_GPU]), _fmt(point[PER_USER]),
            _pm(point["ttft_p99_ms"], iv, "ttft_ms.p99", 2),
            _pm(point["itl_p50_ms"], iv, "itl_ms.p50", 2),
            _pm(point["itl_p99_ms"], iv, "itl_ms.p99", 2),
        )  # fmt: skip
    console.print(table)
    for config in summary["configs"]:
        if config["status"] == "failed":
            first = (config["error"] or "").splitlines()[0] if config["error"] else ""
            console.print(
                f"[bold red]Failed:[/bold red] {config['flags'] or '(no flags)'}: {first}"
            )
    best = Table(title="Best per SLO (most goodput meeting it)", title_justify="left")
    for header in ("SLO", "flags", "level", "goodput req/s", "out tok/s"):
        best.add_column(header)
    for label, top in summary["best"].items():
        if top is None:
            best.add_row(label, "no level meets it", "", "", "")
        else:
            best.add_row(label, top["flags"] or "(no flags)", _name(top),
                         _fmt(top["goodput_rps"], 3), _fmt(top["output_throughput_tok_s"]))  # fmt: skip
    console.print(best)
    for front in summary["pareto"]:
        names = ", ".join(f"{p['flags'] or '(no flags)'} {_name(p)}" for p in front["points"])
        console.print(f"Pareto ({front['y']} vs {front['x']}, {front['x_better']} better): {names}")
    for config in summary["configs"]:
        found = config.get("find_max")
        if found:
            console.print(
                f"--find-max {found['slo']} ({by_flags[config['flags']]['flags'] or 'no flags'}): "
                f"meets at {_fmt(found['meets'], 0)}, fails at {_fmt(found['fails'], 0)}"
                f"{'' if found['done'] else ' (search unfinished)'}"
            )
    if summary["interval"]:
        console.print(
            "±: half the 95% Student t-interval of the mean across repeats (each repeat one "
            "sample)."
        )
    for pair in summary["indistinguishable"]:
        console.print(f"[yellow]Inside the noise:[/yellow] {pair['text']}")
    _print_advice(summary, console)


def _print_advice(summary: dict[str, Any], console: Console) -> None:
    """``--from-advice``: each prediction against the measurement."""
    advice = summary.get("advice")
    if not advice:
        return
    table = Table(
        title=f"Advice of {advice['run_id']} checked (baseline {advice['baseline'] or 'no flags'})",
        title_justify="left",
    )
    for header in ("change", "metric", "level", "from", "predicted", "baseline", "measured",
                   "verdict"):  # fmt: skip
        table.add_column(header, justify="left" if header in ("change", "metric") else "right")
    for c in advice["checks"]:
        digits = 0 if c["metric"] in ("kv_ceiling", "preemptions") else 1
        predicted = _fmt(c["to"], digits) if c["to"] is not None else c["direction"]
        table.add_row(
            f"{c['flag']} {c['value']}", c["metric"], _fmt(c["level"], 0), _fmt(c["from"], digits),
            predicted, _fmt(c["baseline"], digits), _fmt(c["measured"], digits),
            c["verdict"].replace("_", " "),
        )  # fmt: skip
    console.print(table)
    for item in advice["not_tried"]:
        console.print(
            f"Not tried (no value): {item['flag']} {item['direction']} ({item['finding']})"
        )
