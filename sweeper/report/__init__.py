"""The report: findings and frames -> a run's page (Markdown with Vega-Lite charts, en + zh) ->
the site (the runs index, comparison pages, the MkDocs plugin).

- :mod:`~sweeper.report.run_report`: ``collect_run``, everything one run's page rests on
  (``RunReport``), computed once for both languages;
- :mod:`~sweeper.report.charts`: one pure function per figure (altair);
- :mod:`~sweeper.report.markup`: escaping and the page's building blocks;
- :mod:`~sweeper.report.pages`: ``render_run_page``;
- :mod:`~sweeper.report.advice`: "What to change next";
- :mod:`~sweeper.report.provenance`: "How it was recorded";
- :mod:`~sweeper.report.site`: every page of a traces folder (``build_pages``), the page cache;
- :mod:`~sweeper.report.mkdocs_plugin`: the same generation inside ``mkdocs build / serve``.

The submodules are imported where they are used (``from sweeper.report.site import
build_pages``), so ``from sweeper import charts`` does not load the site machinery.
"""

__all__ = [
    "advice",
    "charts",
    "markup",
    "mkdocs_plugin",
    "pages",
    "provenance",
    "run_report",
    "site",
]
