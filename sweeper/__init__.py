"""sweeper: concurrency sweeps of LLM inference servers, with per-token timestamps.

The Python API mirrors the CLI: ``load_trace_set`` reads a recorded sweep, the functions in
:mod:`sweeper.metrics` turn it into pandas frames.
"""

from sweeper.store import TraceSet, discover_trace_sets, load_trace_set

__version__ = "0.1.0"

__all__ = ["TraceSet", "__version__", "discover_trace_sets", "load_trace_set"]
