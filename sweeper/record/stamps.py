"""How exact a level's chunk timestamps are: the recorder's self-check on its own reads.

Over plain TCP on Linux the raw client stamps each socket read with the kernel's receive time
(:mod:`sweeper.record.http`), so an event loop that reads late does not move the stamps. What
it can still do is let two chunks of one stream pile up in their socket: one read then returns
both, and the earlier chunk gets the later one's time, its gap before too long, the gap after
too short. This module counts, per level, the reads, how long their bytes had waited in the
socket (the *read delay*: read time - kernel receive time), and the chunks that shared a read
with the next chunk of their stream (*merged* chunks). A merged chunk's time may be late by up to
about the read delay; when enough of the chunks were merged while reads were late
(:meth:`sweeper.analysis.thresholds.Thresholds.stamps_distorted`, the same rule the ``client_health``
finding applies), the level's ITL percentiles may be off and the recorder warns.

Where there is no kernel time (httpx, TLS, other systems), a read is stamped when the loop got to
it, the event-loop lag (:mod:`sweeper.record.lag`) passes straight into the stamps, and the
warning follows that lag instead.
"""

from __future__ import annotations

from array import array

from sweeper.record.progress import percentile
from sweeper.schema import StampCheck
from sweeper.units import NS_PER_MS

MAX_SAMPLES = 1_000_000  # read delays kept per level (8 MB); counts stay exact past it
KERNEL_SHARE = 0.99  # a level's stamps are the kernel's when at least this share of reads were


class StampStats:
    """One process's reads during one level. ``state()``/``merge()`` carry a worker's to the parent."""

    def __init__(self) -> None:
        self.reads = 0
        self.kernel_reads = 0
        self.chunks = 0
        self.merged = 0
        self.delays_ns = array("q")

    def add_read(self, age_ns: int | None, chunks: int) -> None:
        """One socket read that completed ``chunks`` content chunks of one stream; ``age_ns``:
        how long its bytes waited in the socket (None: no kernel time)."""
        self.reads += 1
        self.chunks += chunks
        if chunks > 1:
            self.merged += chunks - 1
        if age_ns is not None:
            self.kernel_reads += 1
            if len(self.delays_ns) < MAX_SAMPLES:
                self.delays_ns.append(age_ns)

    def state(self) -> tuple[int, int, int, int, bytes]:
        return self.reads, self.kernel_reads, self.chunks, self.merged, self.delays_ns.tobytes()

    def merge(self, state: tuple[int, int, int, int, bytes]) -> None:
        reads, kernel_reads, chunks, merged, delays = state
        self.reads += reads
        self.kernel_reads += kernel_reads
        self.chunks += chunks
        self.merged += merged
        more = array("q")
        more.frombytes(delays)
        self.delays_ns.extend(more[: max(MAX_SAMPLES - len(self.delays_ns), 0)])

    def summary(self, concurrency: int) -> StampCheck | None:
        if not self.reads:
            return None
        # The kernel starts stamping a socket's reads once asked: a first read can come without.
        kernel = self.kernel_reads >= KERNEL_SHARE * self.reads
        delays = [d / NS_PER_MS for d in self.delays_ns] if kernel else []
        return StampCheck(
            concurrency=concurrency,
            source="kernel" if kernel else "read",
            reads=self.reads,
            chunks=self.chunks,
            merged_chunks=self.merged,
            read_delay_p50_ms=round(percentile(delays, 50), 4) if delays else None,
            read_delay_p99_ms=round(percentile(delays, 99), 4) if delays else None,
            read_delay_max_ms=round(max(delays), 4) if delays else None,
        )
