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

import time
from array import array

from sweeper.record.progress import percentile
from sweeper.schema import StampCheck
from sweeper.units import NS_PER_MS

MAX_SAMPLES = 1_000_000  # read delays kept per level (8 MB); counts stay exact past it
KERNEL_SHARE = 0.99  # a level's stamps are the kernel's when at least this share of reads were
# A process that spent this share of its time handling reads is short of CPU for the chunks
# (what is left of its time goes to the loop itself, sends and bookkeeping).
BUSY_SHARE = 0.5
CPU_BUSY_SHARE = 0.8  # a process that used this much of a core is busy, whatever with
PPM = 1_000_000


StampState = tuple[int, int, int, int, bytes, int, int, bytes, int]
"""What :meth:`StampStats.state` carries from a worker to the parent."""


class StampStats:
    """One process's reads during one level. ``state()``/``merge()`` carry a worker's to the parent.

    Besides the stamps' own figures it keeps what names the part of the recorder that lagged
    (:meth:`lagged_part`): how long each read's parsing took (``parse_ns``, from the read to its
    events handled, against the time between the process's first and last read), and in a
    closed loop how long each stream took from a request's end to sending its next (the *send
    gap*)."""

    def __init__(self) -> None:
        self.reads = 0
        self.kernel_reads = 0
        self.chunks = 0
        self.merged = 0
        self.delays_ns = array("q")
        self.parse_ns = 0
        self.first_read_ns: int | None = None
        self.last_read_ns = 0
        self.gaps_ns = array("q")
        self.busy_shares: list[float] = []  # merged from the workers: one per process
        self.cpu_shares: list[float] = []
        self._cpu0 = self._wall0 = 0  # the process's CPU and wall time at its first read

    def add_read(
        self, age_ns: int | None, chunks: int, parse_ns: int = 0, read_ns: int | None = None
    ) -> None:
        """One socket read that completed ``chunks`` content chunks of one stream; ``age_ns``:
        how long its bytes waited in the socket (None: no kernel time); ``parse_ns``: how long
        handling them took, from the read (at ``read_ns``, the caller's clock)."""
        self.reads += 1
        self.chunks += chunks
        if chunks > 1:
            self.merged += chunks - 1
        if age_ns is not None:
            self.kernel_reads += 1
            if len(self.delays_ns) < MAX_SAMPLES:
                self.delays_ns.append(age_ns)
        if read_ns is not None:
            self.parse_ns += max(parse_ns, 0)
            if self.first_read_ns is None:
                self.first_read_ns = read_ns
                self._cpu0, self._wall0 = time.process_time_ns(), time.monotonic_ns()
            self.last_read_ns = max(self.last_read_ns, read_ns)

    def add_gap(self, gap_ns: int) -> None:
        """A closed-loop stream sent its next request ``gap_ns`` after its last one ended."""
        if len(self.gaps_ns) < MAX_SAMPLES:
            self.gaps_ns.append(max(gap_ns, 0))

    def busy_share(self) -> float | None:
        """The share of this process's time spent handling reads (the most of any process
        merged in); None without timed reads."""
        span = self.last_read_ns - (self.first_read_ns or 0)
        own = self.parse_ns / span if self.first_read_ns is not None and span > 0 else None
        shares = [*self.busy_shares, *([own] if own is not None else [])]
        return max(shares) if shares else None

    def cpu_share(self) -> float | None:
        """The CPU this process used from its first read to now (the level's end), per second
        (1.0: a whole core; the most of any process merged in); None without timed reads."""
        wall = time.monotonic_ns() - self._wall0
        own = (
            (time.process_time_ns() - self._cpu0) / wall
            if self.first_read_ns is not None and wall > 0
            else None
        )
        shares = [*self.cpu_shares, *([own] if own is not None else [])]
        return max(shares) if shares else None

    def state(self) -> StampState:
        share, cpu = self.busy_share(), self.cpu_share()
        return (
            self.reads, self.kernel_reads, self.chunks, self.merged, self.delays_ns.tobytes(),
            self.parse_ns, round(share * PPM) if share is not None else -1, self.gaps_ns.tobytes(),
            round(cpu * PPM) if cpu is not None else -1,
        )  # fmt: skip

    def merge(self, state: StampState) -> None:
        reads, kernel_reads, chunks, merged, delays, parse_ns, share_ppm, gaps, cpu_ppm = state
        if cpu_ppm >= 0:
            self.cpu_shares.append(cpu_ppm / PPM)
        self.reads += reads
        self.kernel_reads += kernel_reads
        self.chunks += chunks
        self.merged += merged
        self.parse_ns += parse_ns
        if share_ppm >= 0:
            self.busy_shares.append(share_ppm / PPM)
        for samples, into in ((delays, self.delays_ns), (gaps, self.gaps_ns)):
            more = array("q")
            more.frombytes(samples)
            into.extend(more[: max(MAX_SAMPLES - len(into), 0)])

    def gap_p99_ms(self) -> float | None:
        if not self.gaps_ns:
            return None
        return percentile([g / NS_PER_MS for g in self.gaps_ns], 99)

    def lagged_part(
        self, read_delay_p99_ms: float | None, *, loop_lag: bool = False
    ) -> tuple[str, str]:
        """Which part of the recorder lagged, ``"parse"``, ``"send"`` or ``"read"``, and a
        sentence that says so with the figures and what would help. Parse: the process spent
        at least :data:`BUSY_SHARE` of its time handling reads: it is short of CPU for the
        chunks, and more ``--workers`` help. Otherwise the event loop waited on something else
        (other work in the process, or the machine's other processes), and the part named is
        where it showed most: sends (a closed-loop stream's next request left that long, p99,
        after its last one was read) or reads (bytes waited that long in their sockets). With
        ``loop_lag`` the figure given is the event loop's lag (no kernel stamps to read the
        sockets' wait from), and it is named so."""
        share = self.busy_share()
        gap = self.gap_p99_ms()
        delay = read_delay_p99_ms or 0.0
        figures = ", ".join(
            text
            for text in (
                f"handling reads took {share:.0%} of the process's time"
                if share is not None
                else "",
                f"next requests left {gap:.1f} ms after the last was read (p99)" if gap else "",
                (
                    f"the event loop lagged {delay:.1f} ms (p99)"
                    if loop_lag
                    else f"reads waited {delay:.1f} ms (p99)"
                )
                if read_delay_p99_ms is not None
                else "",
            )
            if text
        )
        said = f" ({figures})" if figures else ""
        if share is not None and share >= BUSY_SHARE:
            return "parse", (
                f"the lag was in parsing{said}: this process is short of CPU for its chunks, "
                "more --workers would help"
            )
        part = "send" if gap is not None and gap > delay else "read"
        where = f"the lag was in {'sending' if part == 'send' else 'reading'}{said}"
        cpu = self.cpu_share()
        if cpu is not None and cpu >= CPU_BUSY_SHARE:
            return part, (
                f"{where}: this process was busy ({cpu:.0%} of a core), more --workers would help"
            )
        busy = f" ({cpu:.0%} of a core)" if cpu is not None else ""
        return part, (
            f"{where}: this process was not busy{busy}, so its event loop waited on other "
            "work or the machine's other processes: fewer streams or a less loaded machine "
            "would help more than --workers"
        )

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
