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
vllm-bench     ``vllm bench serve`` result JSON, one per level: C or a     per_chunk
               request rate (``--save-detailed``) or summary
llmperf        ``*_individual_responses.json`` (+ ``*_summary.json``)      per_request
guidellm       ``benchmarks.json`` (report schema version 1): concurrent   per_request
               and synchronous, or constant / poisson / throughput
=============  ==========================================================  ===========
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sweeper.errors import ConfigError
from sweeper.importers._common import Imported, ImportOptions, write_imported
from sweeper.importers._openloop import Load
from sweeper.importers.aiperf import read_aiperf
from sweeper.importers.guidellm import read_guidellm
from sweeper.importers.llmperf import read_llmperf
from sweeper.importers.vllm_bench import read_vllm_bench
from sweeper.store import DEFAULT_TRACES_DIR

Reader = Callable[..., Imported]

IMPORTERS: dict[str, Reader] = {
    "aiperf": read_aiperf,
    "vllm-bench": read_vllm_bench,
    "llmperf": read_llmperf,
    "guidellm": read_guidellm,
}

# Tools whose files can hold both closed-loop (concurrency) and open-loop (rate) runs: they
# take ``load`` to pick one kind (a GuideLLM sweep report holds both).
MIXED_LOAD = ("vllm-bench", "guidellm")

__all__ = [
    "IMPORTERS",
    "MIXED_LOAD",
    "ImportOptions",
    "Imported",
    "Load",
    "import_run",
    "read_import",
]


def read_import(kind: str, paths: Sequence[Path | str], *, load: Load | None = None) -> Imported:
    """Read foreign result files into memory (nothing written). ``load`` (``"concurrency"`` or
    ``"rate"``) picks which kind of level to import where the files hold both."""
    reader = IMPORTERS.get(kind)
    if reader is None:
        raise ConfigError(f"unknown import kind {kind!r}; choose one of {', '.join(IMPORTERS)}")
    if not paths:
        raise ConfigError(f"give at least one file or folder to import as {kind}")
    options: dict[str, Any] = {}
    if load is not None:
        if kind not in MIXED_LOAD:
            raise ConfigError(
                f"--load is for {' and '.join(MIXED_LOAD)} results; {kind} runs are "
                "concurrency levels only"
            )
        options["load"] = load
    return reader([Path(p) for p in paths], **options)


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
    load: Load | None = None,
) -> Path:
    """Import ``paths`` (files or folders of ``kind``) as one trace set under ``out``; return
    its folder. Nothing is left in ``out`` if anything fails. ``load`` as in :func:`read_import`."""
    imported = read_import(kind, paths, load=load)
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
