"""Other tools' results -> sweeper trace sets (one module per format, one registry).

::

    from sweeper.importers import import_run
    folder = import_run("aiperf", [Path("results/")], run_id="minimax-mi355x", gpu="MI355X")

Each importer reads its tool's files into an :class:`~sweeper.importers._common.Imported`
(requests on sweeper's clock, the tool's name, version and fidelity, its own summary numbers);
:func:`import_run` adds what the user passed (server log, GPU, labels) and writes the trace set
with the one writer, atomically. Bad input raises :class:`~sweeper.errors.ImportFormatError`
naming the file and the line or key.

=============  ==========================================================  ===========
kind           reads                                                       fidelity
=============  ==========================================================  ===========
aiperf         profile_export.jsonl (+ profile_export_aiperf.json,         per_chunk
               server_metrics_export.csv, server.log); a folder per level
vllm-bench     ``vllm bench serve`` result JSON, one per level             per_chunk
               (``--save-detailed``) or summary
llmperf        ``*_individual_responses.json`` (+ ``*_summary.json``)      per_request
guidellm       ``benchmarks.json`` (report schema version 1)               per_request
=============  ==========================================================  ===========
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from sweeper.errors import ConfigError
from sweeper.importers._common import Imported, ImportOptions, write_imported
from sweeper.importers.aiperf import read_aiperf
from sweeper.importers.guidellm import read_guidellm
from sweeper.importers.llmperf import read_llmperf
from sweeper.importers.vllm_bench import read_vllm_bench
from sweeper.store import DEFAULT_TRACES_DIR

Reader = Callable[[Sequence[Path]], Imported]

IMPORTERS: dict[str, Reader] = {
    "aiperf": read_aiperf,
    "vllm-bench": read_vllm_bench,
    "llmperf": read_llmperf,
    "guidellm": read_guidellm,
}

__all__ = ["IMPORTERS", "ImportOptions", "Imported", "import_run", "read_import"]


def read_import(kind: str, paths: Sequence[Path | str]) -> Imported:
    """Read foreign result files into memory (nothing written)."""
    reader = IMPORTERS.get(kind)
    if reader is None:
        raise ConfigError(f"unknown import kind {kind!r}; choose one of {', '.join(IMPORTERS)}")
    if not paths:
        raise ConfigError(f"give at least one file or folder to import as {kind}")
    return reader([Path(p) for p in paths])


def import_run(
    kind: str,
    paths: Sequence[Path | str],
    *,
    run_id: str | None = None,
    out: Path | str = DEFAULT_TRACES_DIR,
    server_log: Path | str | None = None,
    gpu: str | None = None,
    gpu_count: int | None = None,
    labels: dict[str, str] | None = None,
    compress: bool = False,
) -> Path:
    """Import ``paths`` (files or folders of ``kind``) as one trace set under ``out``; return
    its folder. Nothing is left in ``out`` if anything fails."""
    imported = read_import(kind, paths)
    options = ImportOptions(
        run_id=run_id,
        out=Path(out),
        server_log=Path(server_log) if server_log is not None else None,
        gpu=gpu,
        gpu_count=gpu_count,
        labels=dict(labels or {}),
        compress=compress,
    )
    return write_imported(kind, imported, options)
