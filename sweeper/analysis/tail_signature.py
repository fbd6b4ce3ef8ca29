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


def stall_signature(
    concurrency: int,
    requests: pd.DataFrame,
    gaps: pd.DataFrame,
    th: Thresholds = DEFAULT_THRESHOLDS,
) -> StallSignature | None:
    """The signature of one level, or None when the level has no per-chunk gaps."""
    g = gaps[gaps["concurrency"] == concurrency]
    r = requests[(requests["concurrency"] == concurrency) & (requests["status"] == "ok")]
    if g.empty or r.empty:
        return None
    itl = g["itl_ms"].to_numpy(dtype=float)
    p50 = float(np.nanmedian(itl))
    limit = th.long_gap_factor * p50
    end_s = g["at_s"].to_numpy(dtype=float)
    start_s = end_s - itl / MS_PER_S
    owner = g["request_id"].to_numpy(dtype=object)
    is_stall = itl > limit
    stall_idx = _evenly(np.nonzero(is_stall)[0], th.signature_max_gaps)
    normal_idx = _evenly(np.nonzero(~is_stall)[0], th.signature_max_gaps)

    rid = r["request_id"].to_numpy(dtype=object)
    send = r["send_s"].to_numpy(dtype=float)
    first = send + r["ttft_ms"].to_numpy(dtype=float) / MS_PER_S
    last = send + r["e2el_ms"].to_numpy(dtype=float) / MS_PER_S

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
