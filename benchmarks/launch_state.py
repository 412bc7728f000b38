"""Which processes of a GPU cell timed in another kernel-launch state than the others.

A GPU process's CUDA-graph replays run in one of two states, for reasons outside the
software measured: in the faster one every kernel launch is about 0.35 us shorter, on both
sides alike. On two H200s of one host with one worker per GPU, 23 of one run's 86
processes were in the faster state, 11 for all their timing and 12 from part way through
(eager ResNet50 at batch 1: 0.91 ms against 1.03; batch 8: 7.6% faster); with one worker,
none of 49 were. The shift per kernel came out 0.33-0.38 us in every such process, on eager
and on the compiled side, at batch 1 to 64 (results/nvidia-h200x2-2026-11-29-fleet-16cells/).
A process moved into it when another process of the host ended after it had captured its
graphs (benchmarks.launch_gate), or, on one H200, when another made a CUDA context on its
GPU (benchmarks.fingerprint.newer_gpu_processes). Only graphs already captured move: the
state belongs to them, not to the process (benchmarks.launch_pin).

A speedup pools a cell's processes; pooled across states, a cell's interval grew to
+-0.5-2% and its value moved by up to 3.5% with the mix. So a cell pools the processes of
one state, the slower one (the state every process of the one-worker run had), and keeps
the others in its evidence (benchmarks.adaptive). The states are told apart by their
signature: both sides faster by the same time per kernel launched (each side's own count,
`evidence.kernels_per_inference`), a shift no change of the software or of the GPU's clocks
makes (those scale each side's time, not its number of kernels).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from benchmarks.result import BenchResult

# The window of per-kernel shifts read as another launch state, in microseconds: measured
# 0.33-0.38 us on H200s; the spread of a side's median between processes in one state was
# under 0.01 us a kernel at batch 1 and under 0.03 us at batch 64.
MIN_SHIFT_US = 0.1
MAX_SHIFT_US = 1.0
# how far the two sides' per-kernel shifts may differ, relative to the larger one
SIDES_AGREE = 0.3


@dataclass(frozen=True)
class UnitTimes:
    """One process's median time per call of each side, and each side's kernels per call."""

    baseline_ms: float
    candidate_ms: float
    baseline_kernels: float
    candidate_kernels: float


def kernel_counts(evidence: object) -> tuple[float, float] | None:
    """A result's kernels per call of each side (`evidence.kernels_per_inference`), where
    it counted them."""
    kernels = evidence.get("kernels_per_inference") if isinstance(evidence, Mapping) else None
    if not isinstance(kernels, Mapping):
        return None
    base, cand = kernels.get("baseline"), kernels.get("candidate")
    if not isinstance(base, (int, float)) or not isinstance(cand, (int, float)):
        return None
    return float(base), float(cand)


def unit_times(result: BenchResult, kernels: tuple[float, float] | None = None
               ) -> UnitTimes | None:
    """A result's sides' medians with its own kernel counts, else `kernels` (a cell's later
    processes do not count theirs); None where one is missing."""
    counts = kernel_counts(result.evidence) or kernels
    if counts is None or result.baseline is None or result.candidate is None:
        return None
    return UnitTimes(result.baseline.median_ms, result.candidate.median_ms, *counts)


@dataclass(frozen=True)
class LaunchSplit:
    """A cell whose processes timed in two launch states."""

    slower: tuple[int, ...]  # indices of the processes in the slower state (pooled)
    faster: tuple[int, ...]  # indices of the processes in the faster one (set aside)
    shift_us: float  # the faster ones' median shift per kernel, both sides together


def shift_us(unit: UnitTimes, reference: UnitTimes) -> tuple[float, float]:
    """How much shorter each kernel of `unit` ran than `reference`'s, per side, in us."""
    return ((reference.baseline_ms - unit.baseline_ms) * 1000 / unit.baseline_kernels,
            (reference.candidate_ms - unit.candidate_ms) * 1000 / unit.candidate_kernels)


def in_faster_state(unit: UnitTimes, reference: UnitTimes) -> bool:
    """Whether `unit` bears the faster state's signature against `reference`: both sides
    shorter by the same time per kernel, inside the window."""
    base, cand = shift_us(unit, reference)
    return (MIN_SHIFT_US <= base <= MAX_SHIFT_US and MIN_SHIFT_US <= cand <= MAX_SHIFT_US
            and abs(base - cand) <= SIDES_AGREE * max(base, cand))


def split(units: Sequence[UnitTimes]) -> LaunchSplit | None:
    """The cell's two launch states, or None where its processes do not show two (or a
    count is missing: nothing to tell them apart by).

    Against the process whose kernels ran slowest (both sides' time per kernel counted
    together), the processes bearing the faster state's signature are in the faster state;
    then once more against the middle one of the rest, so that one slow process cannot
    stand for its state. The slower state must hold two processes at least: a lone slow
    process may be one slowed by something else (a clock, a co-tenant), and pooling it
    alone would be precise and wrong; the cell then pools every process, as without
    states, and its interval shows the spread."""
    if len(units) < 3 or any(u.baseline_kernels <= 0 or u.candidate_kernels <= 0
                             for u in units):
        return None

    def per_kernel(j: int) -> float:
        u = units[j]
        return (u.baseline_ms + u.candidate_ms) / (u.baseline_kernels + u.candidate_kernels)

    reference = max(range(len(units)), key=per_kernel)
    for _ in range(2):
        faster = [j for j, u in enumerate(units) if in_faster_state(u, units[reference])]
        slower = sorted((j for j in range(len(units)) if j not in faster), key=per_kernel)
        if len(slower) < 2 or not faster:
            return None
        reference = slower[len(slower) // 2]
    median = _median([sum(shift_us(units[j], units[reference])) / 2 for j in faster])
    return LaunchSplit(slower=tuple(sorted(slower)), faster=tuple(faster), shift_us=median)


def between_runs(new: UnitTimes, old: UnitTimes) -> float | None:
    """How much shorter each of eager's kernels ran in `new` than in `old` (us; negative:
    longer), where that is a launch state's shift: eager launched as many kernels in both
    and moved by 0.1-1.0 us a kernel. The caller checks that eager ran the same software in
    both; a cell whose every process timed in one state shows its state only against
    another run."""
    if new.baseline_kernels <= 0 \
            or abs(new.baseline_kernels - old.baseline_kernels) > 0.01 * old.baseline_kernels:
        return None
    shift = (old.baseline_ms - new.baseline_ms) * 1000 / new.baseline_kernels
    return shift if MIN_SHIFT_US <= abs(shift) <= MAX_SHIFT_US else None


def in_other_state(unit: UnitTimes, shift_us: float) -> float:
    """The factor by which `unit`'s speedup moves when every kernel of both its sides runs
    `shift_us` longer (the other state's time)."""
    base = unit.baseline_ms + shift_us * unit.baseline_kernels / 1000
    cand = unit.candidate_ms + shift_us * unit.candidate_kernels / 1000
    return (base / cand) / (unit.baseline_ms / unit.candidate_ms)


def changed_while_timing(baseline_rounds: Sequence[Sequence[float]],
                         candidate_rounds: Sequence[Sequence[float]],
                         kernels: tuple[float, float]) -> bool:
    """Whether a process's rounds show both states: it changed state while it timed.

    On two H200s of one host, 20 processes of two runs' two-worker phases did, each once,
    from the slower state to the faster, every time about a second after another GPU's
    process ended; none of the one-worker phases' 98 processes showed it. Such a process's
    median lies between the states, and its rounds' spread floors its cell's interval (a
    cell took six processes for one), so it belongs to neither state."""
    rounds = [UnitTimes(_median(b), _median(c), *kernels)
              for b, c in zip(baseline_rounds, candidate_rounds, strict=False) if b and c]
    return split(rounds) is not None


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(frozen=True)
class CellStates:
    """Which of a cell's processes its speedup pools, and which it sets aside."""

    pooled: tuple[int, ...]
    faster: tuple[int, ...]  # timed wholly in the faster state
    changed: tuple[int, ...]  # changed state while they timed
    shift_us: float | None  # the faster ones' shift per kernel, where there are some


def cell_states(units: Sequence[UnitTimes],
                rounds: Sequence[tuple[Sequence[Sequence[float]], Sequence[Sequence[float]]]]
                ) -> CellStates | None:
    """The processes a cell pools: neither those that changed state while they timed nor,
    of the rest, those in the faster state (`split`); None where there is nothing to set
    aside, or where nothing would be left to pool."""
    changed = tuple(j for j, (u, (base, cand)) in enumerate(zip(units, rounds, strict=True))
                    if changed_while_timing(base, cand, (u.baseline_kernels,
                                                         u.candidate_kernels)))
    rest = [j for j in range(len(units)) if j not in changed]
    found = split([units[j] for j in rest])
    if found is None and not changed:
        return None
    pooled = tuple(rest) if found is None else tuple(rest[i] for i in found.slower)
    if not pooled:
        return None
    return CellStates(pooled=pooled,
                      faster=() if found is None else tuple(rest[i] for i in found.faster),
                      changed=changed, shift_us=None if found is None else found.shift_us)


def of_results(results: Sequence[BenchResult]) -> CellStates | None:
    """`cell_states` of a cell's unit results, in the order they ran. Only a cell's first
    process counts its kernels (benchmarks.runner); the others ran its build, loaded and
    checked against its fingerprint, or one built alike, so they take its counts."""
    if not results:
        return None
    first = kernel_counts(results[0].evidence)
    units = [unit_times(r, first) for r in results]
    if any(u is None for u in units):
        return None
    return cell_states([u for u in units if u is not None],
                       [(r.baseline_samples_ms, r.candidate_samples_ms) for r in results])
