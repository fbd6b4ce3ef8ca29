"""sweeper: concurrency sweeps of LLM inference servers, with per-token timestamps.

The Python API mirrors the CLI, one function per stage of the flow::

    record_sweep(RecordConfig(...))         # sweeper record: a server -> traces/<run-id>/
    import_run("aiperf", [folder])          # sweeper import: another tool's files -> a trace set
    ts = load_trace_set("traces/<run-id>")  # the trace set: manifest, requests, server metrics
    summarize(ts)                           # sweeper summary: the per-level table (JSON contract)
    analyze_run(ts)                         # sweeper findings: why the curve bends
    build_pages("traces", "docs")           # sweeper build: the report pages, en + zh

``from sweeper import charts`` gives the chart functions (one per figure). The stages live in
the packages of the same names: :mod:`sweeper.record`, :mod:`sweeper.importers`,
:mod:`sweeper.analysis`, :mod:`sweeper.findings`, :mod:`sweeper.report`. Everything but the trace
set is imported when first used, so ``import sweeper`` stays quick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sweeper.lazy import lazy_names
from sweeper.store import TraceSet, discover_trace_sets, load_trace_set
from sweeper.version import __version__

if TYPE_CHECKING:
    from sweeper.analysis.summary import summarize
    from sweeper.findings import analyze_run
    from sweeper.importers import import_run
    from sweeper.record import RecordConfig, record_sweep
    from sweeper.report import charts
    from sweeper.report.site import build_pages

# name -> the module that defines it (a module itself where the name is a module)
_LAZY = {
    "RecordConfig": "sweeper.record",
    "record_sweep": "sweeper.record",
    "import_run": "sweeper.importers",
    "summarize": "sweeper.analysis.summary",
    "analyze_run": "sweeper.findings",
    "build_pages": "sweeper.report.site",
    "charts": "sweeper.report.charts",
}


__getattr__, __dir__ = lazy_names("sweeper", _LAZY, globals())


__all__ = [
    "RecordConfig",
    "TraceSet",
    "__version__",
    "analyze_run",
    "build_pages",
    "charts",
    "discover_trace_sets",
    "import_run",
    "load_trace_set",
    "record_sweep",
    "summarize",
]
