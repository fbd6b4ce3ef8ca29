"""The metrics parser's child process: ``python -I path/to/metrics_child.py PREFIX...``.

Reads metrics pages from stdin and writes their kept samples to stdout, one message per page,
each framed as a 4-byte big-endian length and a UTF-8 body (the page in; a JSON list of
``[name, labels, value]`` out). It imports nothing but prometheus_client, so it starts fast, and
it runs in its own process so parsing a large page never holds the recorder's GIL
(:class:`sweeper.record.scrape.MetricsParser`).
"""

from __future__ import annotations

import json
import signal
import struct
import sys
from typing import BinaryIO

from prometheus_client.parser import text_string_to_metric_families

FRAME = struct.Struct(">I")
DROP_SUFFIXES = ("_created",)  # samples that only repeat when a series was created


def rows(text: str, prefixes: tuple[str, ...]) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample of the kept families, as exposed."""
    out = []
    for family in text_string_to_metric_families(text):
        if prefixes and not family.name.startswith(prefixes):
            continue
        for sample in family.samples:
            if not sample.name.endswith(DROP_SUFFIXES):
                out.append((sample.name, dict(sample.labels), float(sample.value)))
    return out


def read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(FRAME.size)
    if len(head) < FRAME.size:
        return None
    (size,) = FRAME.unpack(head)
    return stream.read(size)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the recorder's to handle
    prefixes = tuple(sys.argv[1:])
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while (page := read_frame(source)) is not None:
        try:
            answer: object = rows(page.decode("utf-8", errors="replace"), prefixes)
        except Exception as exc:  # a page the parser rejects: say why, keep serving
            answer = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        body = json.dumps(answer, separators=(",", ":")).encode()
        sink.write(FRAME.pack(len(body)) + body)
        sink.flush()


if __name__ == "__main__":
    main()
