"""Where a step may be: seeded intervals searched for their best split by weighted
sums, candidates kept by a penalised gain."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from app.detection.series_noise import FloatArray


def _seeded_intervals(n: int, min_segment: int) -> tuple[npt.NDArray[np.intp],
                                                         npt.NDArray[np.intp]]:
    """Starts and ends of the seeded intervals: lengths n, n/2, n/4, ..., each level's
    intervals overlapping by half, down to the shortest that holds two segments."""
    starts, ends = [0], [n]
    k = 1
    while True:
        length = math.ceil(n / 2**k)
        if length < 2 * min_segment:
            break
        count = 2 * 2**k - 1
        s = np.unique(np.round(np.linspace(0, n - length, count)).astype(np.intp))
        starts.extend(s.tolist())
        ends.extend((s + length).tolist())
        k += 1
    return np.asarray(starts, dtype=np.intp), np.asarray(ends, dtype=np.intp)


def _best_split(sw: FloatArray, swx: FloatArray, lo: int, hi: int,
                m: int) -> tuple[int, float]:
    """The split of [lo, hi) with the largest weighted |z|, and that |z|."""
    split = np.arange(lo + m, hi - m + 1)
    wa = sw[split] - sw[lo]
    wb = sw[hi] - sw[split]
    diff = (swx[hi] - swx[split]) / wb - (swx[split] - swx[lo]) / wa
    az = np.abs(diff) / np.sqrt(1 / wa + 1 / wb)
    j = int(np.argmax(az))
    return int(split[j]), float(az[j])


def _split_positions(x: FloatArray, w: FloatArray, min_segment: int,
                     least_z: float) -> npt.NDArray[np.intp]:
    """Where a change could be: the best split (weighted |z|) of every seeded interval
    where that |z| is at least `least_z`."""
    n = x.size
    m = min_segment
    sw = np.concatenate([[0.0], np.cumsum(w)])
    swx = np.concatenate([[0.0], np.cumsum(w * x)])
    lo, hi = _seeded_intervals(n, m)
    counts = hi - lo - 2 * m + 1
    keep = counts > 0
    lo, hi, counts = lo[keep], hi[keep], counts[keep]
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
    which = np.repeat(np.arange(lo.size), counts)
    split = lo[which] + m + (np.arange(int(counts.sum())) - offsets[which])
    l_, r_ = lo[which], hi[which]
    wa = sw[split] - sw[l_]
    wb = sw[r_] - sw[split]
    diff = (swx[r_] - swx[split]) / wb - (swx[split] - swx[l_]) / wa
    az = np.abs(diff) / np.sqrt(1 / wa + 1 / wb)
    best = np.maximum.reduceat(az, offsets)
    at_max = np.flatnonzero(az == np.repeat(best, counts))
    _, first = np.unique(which[at_max], return_index=True)
    return np.unique(split[at_max[first]][best >= least_z])


def _candidates(x: FloatArray, w: FloatArray, min_segment: int, penalty: float) -> list[int]:
    """The segmentation minimising the weighted squared error plus `penalty` per change,
    among the split positions of the seeded intervals (exact dynamic programming over them:
    O(p^2) for p positions, a few per point at most, instead of O(n^2) over every point)."""
    n = x.size
    m = min_segment
    # Adding a change lowers the cost by its z^2 against its final neighbours; a split that
    # no interval shows with half the z the penalty asks for does not pay for itself.
    pos = _split_positions(x, w, m, math.sqrt(penalty) / 2)
    ends = np.concatenate([[0], pos, [n]])
    sw = np.concatenate([[0.0], np.cumsum(w)])
    swx = np.concatenate([[0.0], np.cumsum(w * x)])
    swxx = np.concatenate([[0.0], np.cumsum(w * x * x)])
    cw, cwx, cwxx = sw[ends], swx[ends], swxx[ends]
    best = np.full(ends.size, np.inf)
    best[0] = -penalty
    last = np.zeros(ends.size, dtype=np.intp)
    alive = np.zeros(0, dtype=np.intp)  # PELT: starts that can still begin the last segment
    waiting = 0  # ends[waiting:] are not yet m points behind the current end
    # the first start at least m points behind each end
    ready = np.searchsorted(ends, ends - m, side="right")
    for j in range(1, ends.size):
        if ready[j] > waiting:
            new = np.arange(waiting, ready[j])
            alive = np.concatenate([alive, new[np.isfinite(best[new])]])
            waiting = int(ready[j])
        if alive.size == 0:
            continue
        segw = cw[j] - cw[alive]
        segx = cwx[j] - cwx[alive]
        cost = (cwxx[j] - cwxx[alive]) - segx * segx / segw
        total = best[alive] + cost
        k = int(np.argmin(total))
        best[j], last[j] = total[k] + penalty, alive[k]
        # A start whose cost alone already exceeds the best with a change can never win
        # later (the squared-error cost of a segment only grows as it is extended).
        alive = alive[total <= best[j]]
    chosen: list[int] = []
    j = ends.size - 1
    while j > 0:
        j = int(last[j])
        if j > 0:
            chosen.append(int(ends[j]))
    return sorted(chosen)
