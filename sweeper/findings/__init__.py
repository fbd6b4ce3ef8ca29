"""Findings: why the curve bends, each a typed object with its numbers and a sentence in en and zh.

Entry points::

    analyze_run(ts, slos=parse_slos("ttft_p99<=2s,itl_p50<=25ms"))  # a TraceSet
    analyze(RunFrames(manifest, levels, server, requests=requests))  # frames (tests, notebooks)

Each finding of DESIGN.md "Findings" 1-11 has a stable id (``roofline``, ``scaling``, ``knee``,
``itl_tail``, ``tail_cause``, ``kv_ceiling``, ``memory_headroom``, ``recommended``, ``slo_table``,
``long_input``, ``client_health``), a severity, the levels it concerns, its ``numbers`` (the JSON
contract documented in docs/findings.md), the data it rests on and what is missing. A finding the
data cannot support has severity ``unknown`` and says what is missing; no number is invented.
Thresholds are data (:mod:`sweeper.analysis.thresholds`). Sentences are gettext messages (domain
``findings``; Chinese in ``sweeper/locale/zh/LC_MESSAGES/findings.po``); numbers are formatted
per language by Babel.

The package, one module a step:

- :mod:`~sweeper.findings.model`: :class:`Finding`, :class:`SLO` and the JSON contract;
- :mod:`~sweeper.findings.frames`: :class:`RunFrames`, what the rules read;
- ``_words``: the building blocks of the sentences (private to the package);
- :mod:`~sweeper.findings.levels`: how a level is named (``C=16``, or a rate run's ``4 req/s``);
- the rules, one module per group: :mod:`~sweeper.findings.scaling` (1-4),
  :mod:`~sweeper.findings.cause` (5, 11), :mod:`~sweeper.findings.capacity` (6-7),
  :mod:`~sweeper.findings.choice` (8-10); for rate runs (open loop)
  :mod:`~sweeper.findings.openloop` (2-3: scaling against the offered rate, the saturation rate)
  and :mod:`~sweeper.findings.goodput` (8-9 by goodput);
- :mod:`~sweeper.findings.proposals`: the server flag changes the findings advise, as data
  (``Finding.proposals``: flag, value, what it predicts);
- :mod:`~sweeper.findings.analyze`: every rule in order, for a trace set or frames.
"""

from sweeper.analysis.tail_signature import StallSignature, stall_signature
from sweeper.analysis.thresholds import DEFAULT_SLO_TABLE
from sweeper.findings.analyze import analyze, analyze_frames, analyze_run
from sweeper.findings.frames import RunFrames, run_frames
from sweeper.findings.model import (
    FINDING_IDS,
    SLO,
    TAIL_CAUSES,
    Finding,
    Prediction,
    Proposal,
    finding,
    findings_json,
    parse_slos,
    slo_label,
)

__all__ = [
    "DEFAULT_SLO_TABLE",
    "FINDING_IDS",
    "SLO",
    "TAIL_CAUSES",
    "Finding",
    "Prediction",
    "Proposal",
    "RunFrames",
    "StallSignature",
    "analyze",
    "analyze_frames",
    "analyze_run",
    "finding",
    "findings_json",
    "parse_slos",
    "run_frames",
    "slo_label",
    "stall_signature",
]
