"""The timing signature of the ITL tail, read from the trace itself.

Chunked prefill leaves a recognisable mark: when a new request's prompt is prefilled, its chunks
ride in the same engine steps as every stream already decoding, so *all* those streams stall in
the same window, and that window lies inside the new request's prefill (its send .. its first
token). A preempted request stalls alone; a client that cannot keep up delays streams at random.

:func:`stall_signature` measures, for one level: which gaps are stalls (longer than
``long_gap_factor`` x the level's p50 ITL), the share of stalls shared by most of the other
streams decoding at that moment (synchronized: their stalls end within one typical gap of each
other, i.e. in the same engine step), and the share that overlaps another request's prefill
window, with the same share for ordinary gaps as a baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sweeper.analysis.thresholds import DEFAULT_THRESHOLDS, Thresholds
from sweeper.units import MS_PER_S


@dataclass(frozen=True)
class StallSignature:
    concurrency: int
    gaps: int
    stalls: int
    stall_threshold_ms: float
    synchronized_share: float  # of the stalls with another stream decoding; NaN if none
    prefill_overlap_share: float  # of the stalls examined
    prefill_overlap_share_normal: float  # of ordinary gaps (baseline)

    def strong(self, th: Thresholds = DEFAULT_THRESHOLDS) -> bool:
        """Synchronized across streams and inside other requests' prefills: a batched prefill."""
        # With no other stream decoding during the stalls (C=2: the other one is prefilling),
        # synchronization cannot be judged; the prefill overlap alone must carry it.
        synchronized = (
            not math.isfinite(self.synchronized_share)
            or self.synchronized_share >= th.sync_signature_share
        )
        return (
            self.stalls > 0
            and synchronized
            and self.prefill_overlap_share >= th.prefill_overlap_share
            and (
                not math.isfinite(self.prefill_overlap_share_normal)
                or self.prefill_overlap_share > self.prefill_overlap_share_normal
            )
        )


def _evenly(idx: np.ndarray, at_most: int) -> np.ndarray:
    if idx.size <= at_most:
        return idx
    return idx[np.linspace(0, idx.size - 1, at_most).round().astype(int)]


@dataclass(frozen=True)
class _Level:
    """One level's gaps and completed requests as arrays (seconds on the run's clock)."""

    itl_ms: np.ndarray
    start_s: np.ndarray  # each gap's start
    end_s: np.ndarray  # each gap's end (its chunk's arrival)
    owner: np.ndarray  # the request each gap belongs to
    p50_ms: float
    rid: np.ndarray
    send_s: np.ndarray
    first_s: np.ndarray  # first token
    last_s: np.ndarray  # last token


def _level(concurrency: int, requests: pd.DataFrame, gaps: pd.DataFrame) -> _Level | None:
    g = gaps[gaps["concurrency"] == concurrency]
    r = requests[(requests["concurrency"] == concurrency) & (requests["status"] == "ok")]
    if g.empty or r.empty:
        return None
    itl = g["itl_ms"].to_numpy(dtype=float)
    end = g["at_s"].to_numpy(dtype=float)
    send = r["send_s"].to_numpy(dtype=float)
    return _Level(
        itl_ms=itl,
        start_s=end - itl / MS_PER_S,
        end_s=end,
        owner=g["request_id"].to_numpy(dtype=object),
        p50_ms=float(np.nanmedian(itl)),
        rid=r["request_id"].to_numpy(dtype=object),
        send_s=send,
        first_s=send + r["ttft_ms"].to_numpy(dtype=float) / MS_PER_S,
        last_s=send + r["e2el_ms"].to_numpy(dtype=float) / MS_PER_S,
    )


def stall_signature(
    concurrency: int,
    requests: pd.DataFrame,
    gaps: pd.DataFrame,
    th: Thresholds = DEFAULT_THRESHOLDS,
) -> StallSignature | None:
    """The signature of one level, or None when the level has no per-chunk gaps."""
    level = _level(concurrency, requests, gaps)
    if level is None:
        return None
    itl, p50 = level.itl_ms, level.p50_ms
    limit = th.long_gap_factor * p50
    end_s, start_s, owner = level.end_s, level.start_s, level.owner
    is_stall = itl > limit
    stall_idx = _evenly(np.nonzero(is_stall)[0], th.signature_max_gaps)
    normal_idx = _evenly(np.nonzero(~is_stall)[0], th.signature_max_gaps)

    rid, send, first, last = level.rid, level.send_s, level.first_s, level.last_s

    def overlap_share(idx: np.ndarray) -> float:
        if idx.size == 0:
            return math.nan
        s, e, o = start_s[idx, None], end_s[idx, None], owner[idx, None]
        # Another request's prefill window [send, first token] overlaps the gap.
        hit = (send[None, :] < e) & (first[None, :] > s) & (rid[None, :] != o)
        return float(hit.any(axis=1).mean())

    sync_share = math.nan
    if stall_idx.size:
        s, e, o = start_s[stall_idx, None], end_s[stall_idx, None], owner[stall_idx, None]
        # Streams decoding through the whole gap (first token before it, last token after it).
        decoding = (first[None, :] <= s) & (last[None, :] >= e) & (rid[None, :] != o)
        all_stalls = np.nonzero(is_stall)[0]
        stall_owner = owner[all_stalls]
        # A stall shared with another stream ends in the same engine step: within one typical gap.
        overl = np.abs(end_s[all_stalls][None, :] - e) <= p50 / MS_PER_S
        synced: list[bool] = []
        for k in range(stall_idx.size):
            others = set(rid[decoding[k]])
            if not others:
                continue  # no other stream decoding (it may be the one prefilling): cannot tell
            stalled = set(stall_owner[overl[k]]) & others
            synced.append(len(stalled) / len(others) >= th.sync_others_fraction)
        sync_share = float(np.mean(synced)) if synced else math.nan

    return StallSignature(
        concurrency=concurrency,
        gaps=int(itl.size),
        stalls=int(is_stall.sum()),
        stall_threshold_ms=limit,
        synchronized_share=sync_share,
        prefill_overlap_share=overlap_share(stall_idx),
        prefill_overlap_share_normal=overlap_share(normal_idx),
    )


# ---------------------------------------------------------------------------------------------
# Attribution: what each long gap can be blamed on

PREFILL = "prefill"
PREEMPTION = "preemption"
UNEXPLAINED = "unexplained"
ATTRIBUTED_CAUSES = (PREFILL, PREEMPTION, UNEXPLAINED)
_CHUNK = 4096  # long gaps examined at once (bounds the gap x request matrices)


@dataclass(frozen=True)
class GapAttribution:
    """The long gaps of one level, each blamed on one cause, counted and weighed by the time it
    adds beyond the level's p50 ITL."""

    concurrency: int
    long_gaps: int
    gaps: dict[str, int]  # cause -> long gaps
    excess_ms: dict[str, float]  # cause -> time those gaps add beyond the p50 ITL
    preemptions: int  # the level's own server counted them

    @property
    def total_excess_ms(self) -> float:
        return float(sum(self.excess_ms.values()))


def _synchronized(
    start: np.ndarray,
    end: np.ndarray,
    owner: np.ndarray,
    rid: np.ndarray,
    first: np.ndarray,
    last: np.ndarray,
    window_s: float,
    th: Thresholds,
) -> np.ndarray:
    """Per long gap: whether most of the other streams decoding through it stalled in the same
    step (a long gap of theirs ends within ``window_s``); True where no other stream decoded
    (it cannot be told, so the prefill overlap alone decides)."""
    index = {r: i for i, r in enumerate(rid)}
    own_idx = np.array([index.get(o, -1) for o in owner])
    ends_by_request = [np.sort(end[own_idx == i]) for i in range(rid.size)]
    out = np.ones(end.size, dtype=bool)
    for lo in range(0, end.size, _CHUNK):
        s, e = start[lo : lo + _CHUNK], end[lo : lo + _CHUNK]
        mine = own_idx[lo : lo + _CHUNK]
        decoding = (first[None, :] <= s[:, None]) & (last[None, :] >= e[:, None])
        decoding[np.arange(e.size), mine] = False  # (-1 marks a gap of a failed request: no-op)
        stalled = np.zeros_like(decoding)
        for i, ends in enumerate(ends_by_request):
            if ends.size:
                near = np.searchsorted(ends, e + window_s) - np.searchsorted(ends, e - window_s)
                stalled[:, i] = near > 0
        others = decoding.sum(axis=1)
        shared = (stalled & decoding).sum(axis=1)
        out[lo : lo + _CHUNK] = (others == 0) | (shared >= th.sync_others_fraction * others)
    return out


def gap_attribution(
    concurrency: int,
    requests: pd.DataFrame,
    gaps: pd.DataFrame,
    preemptions: float,
    th: Thresholds = DEFAULT_THRESHOLDS,
) -> GapAttribution | None:
    """Blame each long gap of one level (the stall definition of :func:`stall_signature`) on
    what the evidence shows, in this order:

    - ``prefill``: inside another request's prefill window (its send .. its first token) and
      shared by most of the streams decoding then (one batched prefill chunk that every stream
      waits on: chunked prefill, or prefill interference without it);
    - ``preemption``: each preemption the level's own server counted explains the longest long
      gap not yet claimed (the preempted stream waits for KV room, then its context is
      recomputed), whatever else overlaps it, and the other streams' long gaps during it that
      no new request's prefill explains (they wait on the recompute); a count of N explains at
      most N such stalls, never the gaps of other steps;
    - ``unexplained``: the rest.

    None when the level has no per-chunk gaps."""
    level = _level(concurrency, requests, gaps)
    if level is None:
        return None
    p50 = level.p50_ms
    long_idx = np.nonzero(level.itl_ms > th.long_gap_factor * p50)[0]
    gap_ms = level.itl_ms[long_idx]
    end, start, owner = level.end_s[long_idx], level.start_s[long_idx], level.owner[long_idx]
    rid, send, first, last = level.rid, level.send_s, level.first_s, level.last_s
    prefill = np.zeros(long_idx.size, dtype=bool)
    for lo in range(0, long_idx.size, _CHUNK):
        k = slice(lo, lo + _CHUNK)
        hit = (send[None, :] < end[k, None]) & (first[None, :] > start[k, None])
        prefill[k] = (hit & (rid[None, :] != owner[k, None])).any(axis=1)
    prefill &= _synchronized(start, end, owner, rid, first, last, p50 / MS_PER_S, th)
    cause = np.where(prefill, PREFILL, UNEXPLAINED).astype(object)
    count = int(preemptions) if math.isfinite(preemptions) and preemptions > 0 else 0
    claimed = np.zeros(long_idx.size, dtype=bool)
    for _ in range(count):
        candidates = np.nonzero(~claimed)[0]
        if candidates.size == 0:
            break
        worst = candidates[np.argmax(gap_ms[candidates])]
        # The preempted stream's own stall, and the others' stalls during it that no new
        # request's prefill explains (they wait on its recompute).
        during = ~claimed & (start < end[worst]) & (end > start[worst]) & ~prefill
        during[worst] = True
        cause[during] = PREEMPTION
        claimed |= during
    excess = gap_ms - p50
    return GapAttribution(
        concurrency=concurrency,
        long_gaps=int(long_idx.size),
        gaps={c: int((cause == c).sum()) for c in ATTRIBUTED_CAUSES},
        excess_ms={c: float(excess[cause == c].sum()) for c in ATTRIBUTED_CAUSES},
        preemptions=count,
    )
