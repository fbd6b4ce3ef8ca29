"""Analysis: a trace set -> tidy pandas frames and the per-level summary (the stage after the
trace set, before the findings).

- :mod:`~sweeper.analysis.completeness`: whether a run measured what it planned (levels missing
  or cut short, the command that resumes it);
- :mod:`~sweeper.analysis.frames`: per request, per gap, per level (``level_frame``); every
  column is named ``<metric>_<stat>_<unit>`` (``ttft_p99_ms``);
- :mod:`~sweeper.analysis.slo`: service-level terms (``ttft_p99<=2s``) and which requests meet
  them (goodput);
- :mod:`~sweeper.analysis.server_frames`: the server's Prometheus samples and log lines, per
  level (``server_level_frame``);
- :mod:`~sweeper.analysis.summary`: ``summarize``, the JSON contract of ``sweeper summary``;
- :mod:`~sweeper.analysis.tail_signature`: the shape of an ITL tail in the trace;
- :mod:`~sweeper.analysis.thresholds`: every threshold the findings use, as named data.

The submodules are imported where they are used (``from sweeper.analysis.frames import
level_frame``): the recorder reads the thresholds without loading pandas.
"""

__all__ = [
    "completeness",
    "frames",
    "server_frames",
    "slo",
    "summary",
    "tail_signature",
    "thresholds",
]
