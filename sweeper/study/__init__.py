"""Studies (``sweeper study``): the same sweep against a server started once per configuration
of its flags, grouped under one study manifest, compared side by side.

- :mod:`~sweeper.study.model`: ``study.json`` (:class:`StudyManifest`), its reader and writer;
- :mod:`~sweeper.study.configs`: ``--config`` / ``--grid`` / the YAML study file -> flag sets,
  and the run ids of each configuration's trace sets;
- :mod:`~sweeper.study.server`: a configuration's server (process group, log, health, stop,
  ``PR_SET_PDEATHSIG``, the pid file);
- :mod:`~sweeper.study.runner`: :func:`run_study`, the loop over configurations;
- :mod:`~sweeper.study.search`: ``--find-max``, bisecting for the highest level meeting an SLO;
- :mod:`~sweeper.study.stats`: means and 95% t-intervals across repeats;
- :mod:`~sweeper.study.summary`: :func:`summarize_study`, the JSON of ``sweeper study summary``;
- :mod:`~sweeper.study.charts`: the study charts (curves with intervals, the Pareto chart);
- :mod:`~sweeper.study.page`: :func:`render_study_page`, the study page (Markdown, en + zh).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sweeper.lazy import lazy_names

if TYPE_CHECKING:
    from sweeper.study.configs import expand_configurations, read_study_file
    from sweeper.study.model import StudyManifest, read_study, study_folder
    from sweeper.study.page import render_study_page
    from sweeper.study.runner import StudyPlan, run_study
    from sweeper.study.search import DEFAULT_TOLERANCE
    from sweeper.study.summary import render_study_summary, study_csv, summarize_study

# name -> the module that defines it. Imported when first used: the site reads a study's
# manifest without the runner (and the recorder and HTTP client it brings).
_LAZY = {
    "expand_configurations": "sweeper.study.configs",
    "read_study_file": "sweeper.study.configs",
    "StudyManifest": "sweeper.study.model",
    "read_study": "sweeper.study.model",
    "study_folder": "sweeper.study.model",
    "render_study_page": "sweeper.study.page",
    "StudyPlan": "sweeper.study.runner",
    "run_study": "sweeper.study.runner",
    "DEFAULT_TOLERANCE": "sweeper.study.search",
    "render_study_summary": "sweeper.study.summary",
    "study_csv": "sweeper.study.summary",
    "summarize_study": "sweeper.study.summary",
}


__getattr__, __dir__ = lazy_names("sweeper.study", _LAZY, globals())


__all__ = [
    "DEFAULT_TOLERANCE",
    "StudyManifest",
    "StudyPlan",
    "expand_configurations",
    "read_study",
    "read_study_file",
    "render_study_page",
    "render_study_summary",
    "run_study",
    "study_csv",
    "study_folder",
    "summarize_study",
]
