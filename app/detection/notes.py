"""What a verdict says about the measurement behind it, read from the result's evidence:
how it was decided or why not, what budget or threshold would decide it, a busy host,
uneven processes, an in-session comparison."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from app.detection.verdict_types import Baseline, percent
from benchmarks import identity
from benchmarks.result import BenchResult
from benchmarks.result_schema import AdaptiveEvidence, ComparisonEvidence, HostLoadRecord
from benchmarks.stats import (
    log_half_width,
)
from benchmarks.stored_parts import stored_evidence, stored_part


def in_session_comparison(result: BenchResult,
                          baseline: Baseline | None) -> ComparisonEvidence | None:
    """The result's comparison with its baseline's environment measured in the same session
    (benchmarks.adaptive: `evidence.comparison`), when it compared with this baseline's
    environment and holds a ratio, its interval and the baseline's speedup; None otherwise."""
    comparison = stored_evidence(result.evidence).comparison
    if comparison is None or comparison.mode != "interleaved" or baseline is None \
            or baseline.result is None:
        return None
    old = identity.of(baseline.result.fingerprint)
    if old is None or comparison.baseline_environment != old["environment"]:
        return None
    if comparison.ratio is None or comparison.ratio_ci is None \
            or comparison.baseline_speedup is None:
        return None
    return comparison


def measurement_notes(result: BenchResult) -> list[str]:
    """How the result was measured, where a reader of the verdict must know it: a timing
    fallback, and how long the adaptive measurement took to decide (or that it did not)."""
    notes: list[str] = []
    evidence = stored_evidence(result.evidence)
    if evidence.cuda_graphs_fallback:
        notes.append(f"timed without CUDA graphs (fallback): {evidence.cuda_graphs_fallback}")
    adaptive = evidence.adaptive
    if adaptive is not None and adaptive.processes:
        notes.append(f"measurement: {_how_measured(adaptive)}")
    load = host_load_note(result)
    if load:
        notes.append(load)
    shared = gpu_shared_note(result)
    if shared:
        notes.append(shared)
    states = launch_state_note(result)
    if states:
        notes.append(states)
    pinned = launch_pin_note(result)
    if pinned:
        notes.append(pinned)
    return notes


def _how_measured(adaptive: AdaptiveEvidence) -> str:
    k, seconds, stopped = adaptive.processes, adaptive.timing_seconds or 0.0, adaptive.stopped_by
    limit = "timing budget" if stopped == "budget" else "process limit"
    wide = (adaptive.outcome not in (None, "undecided")
            and adaptive.target_half_width is not None and adaptive.log_half_width is not None)
    how = (f"the same software as the baseline: {k} processes ({seconds:.1f} s of timing), "
           "nothing to decide" if stopped == "same_software" else
           f"decided after {k} units of each environment in turns ({seconds:.1f} s of "
           "timing)" if stopped == "decided" and adaptive.mode == "interleaved" else
           f"decided after {k} processes ({seconds:.1f} s of timing)"
           if stopped == "decided" else
           f"decided, but the CI half-width {math.expm1(adaptive.log_half_width or 0):.2%} "
           f"is above the {adaptive.target_half_width or 0:.2%} target: stopped at {k} "
           f"processes ({seconds:.1f} s of timing) by the {limit}"
           if wide and stopped in ("budget", "max_processes") else
           f"not decided: stopped at {k} processes ({seconds:.1f} s of timing) by the "
           f"{limit}"
           if stopped in ("budget", "max_processes") else
           f"measured in {k} processes ({seconds:.1f} s of timing)")
    resolvable = adaptive.resolvable
    if resolvable is not None and resolvable.half_width is not None \
            and resolvable.budget_seconds is not None:
        how += (f"; this runner resolves +-{resolvable.half_width:.1%} in "
                f"{resolvable.budget_seconds:g} s of timing (a comparison's half-width, from "
                "this cell's own units)")
    return how


def host_load_note(result: BenchResult) -> str | None:
    """The CPU load guard's mark, in words: a result timed beside busy co-tenants is stored
    as such, never as a quiet measurement (benchmarks.host)."""
    load = _host_load(result)
    if load is None or not load.loaded:
        return None
    again = f", {len(load.remeasured)} re-measured" if load.remeasured else ""
    cores = f" of {load.cores}" if load.cores else ""
    why = ("a busy CPU can delay the work a GPU side launches from it"
           if _mapping(result.spec).get("device") == "cuda" else
           "a co-tenant sharing caches and memory bandwidth can bias a CPU speedup by "
           "several percent")
    return (f"host busy: other processes kept {load.other_cores or 0:.1f}"
            f"{cores} cores busy while timing ({load.units_loaded} of "
            f"{load.units} units past the {load.threshold or 0:g}-core "
            f"guard{again}); {why}")


def gpu_shared_note(result: BenchResult) -> str | None:
    """The GPU guard's mark, in words: processes during which another process made a CUDA
    context on their GPU, kept once the cell's re-measures ran out (benchmarks.adaptive)."""
    evidence = stored_evidence(result.evidence)
    records = [p.gpu_processes for p in evidence.processes] if evidence.processes \
        else [evidence.gpu_processes]
    shared = sum(1 for r in records if r is not None and (r.newer or 0) > 0)
    if not shared:
        return None
    again = evidence.adaptive.gpu_remeasured if evidence.adaptive is not None else None
    return (f"GPU shared: in {shared} of {len(records)} processes another process made a "
            "CUDA context on the GPU while they measured"
            f"{f' ({len(again)} re-measured)' if again else ''}; a newer context shortens "
            "every kernel launch of a CUDA graph (eager ResNet50 at batch 1 ran 12% faster "
            "on an H200), so these are not the timings of a process alone on its GPU")


def launch_state_note(result: BenchResult) -> str | None:
    """The processes a GPU cell set aside by kernel-launch state (benchmarks.launch_state),
    in words."""
    states = stored_evidence(result.evidence).launch_states
    if states is None or not states.set_aside:
        return None
    changed = set(states.changed_while_timing or ())
    faster = [u for u in states.set_aside if u not in changed]
    total = len(states.set_aside) + len(states.pooled)
    parts = []
    if faster:
        shift = (f" {states.shift_us_per_kernel:.2f} us"
                 if states.shift_us_per_kernel is not None else "")
        parts.append(f"{_processes(faster)} of {total} launched every kernel{shift} faster on "
                     "both sides")
    if changed:
        parts.append(f"{_processes(sorted(changed))} of {total} changed to the faster state "
                     "while timing")
    return (f"launch state: {'; '.join(parts)}: a state of the GPU's launch path rather than "
            f"of the software; the speedup pools the other {len(states.pooled)} "
            "(evidence.launch_states keeps the set-aside ones)")


def launch_pin_note(result: BenchResult) -> str | None:
    """Where GPU processes pinned their graphs' launch state (benchmarks.launch_pin), in
    words: its speedups are the faster state's, not comparable with unpinned runs'."""
    evidence = stored_evidence(result.evidence)
    records = [p.launch_pin for p in evidence.processes] if evidence.processes \
        else [evidence.launch_pin]
    pins = [r for r in records if r is not None]
    if not pins:
        return None
    failed = [r for r in pins if r.error]
    done = [r for r in pins if not r.error]
    parts = []
    if done:
        moved = [r for r in done if r.moved]
        there = len(done) - len(moved)
        reads = sorted((r.before_us, r.after_us) for r in moved
                       if r.before_us is not None and r.after_us is not None)
        read = (f"; a 500-kernel graph went from {reads[0][0]:.3f} to {reads[0][1]:.3f} us a "
                "kernel" if reads else "")
        parts.append(f"{len(done)} of {len(records)} processes timed their graphs in the "
                     f"faster launch state ({len(moved)} moved into it, {there} "
                     f"{'was' if there == 1 else 'were'} in it already{read})")
    if failed:
        parts.append(f"the pin failed in {len(failed)} of {len(records)} ({failed[0].error}): "
                     "those timed in whichever state they were in")
    return f"launch pin: {'; '.join(parts)}"


def _processes(units: list[int]) -> str:
    return f"process{'es' if len(units) > 1 else ''} {', '.join(str(u) for u in units)}"


def _host_load(result: BenchResult) -> HostLoadRecord | None:
    fingerprint = result.fingerprint if isinstance(result.fingerprint, Mapping) else {}
    return stored_part(HostLoadRecord, fingerprint.get("host_load"))


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _relative(log_half: float) -> str:
    return f"+-{math.expm1(log_half):.1%}"


# A process whose side ran this far from the processes' median (and past 4 robust standard
# deviations of them) is named in an undecided verdict. On a shared 2-core virtual machine a
# demo re-run stayed undecided because in 1-3 of 6-11 processes eager ran 10-30% slow for
# the whole process while the candidate held still; one such process of eleven took an
# interval from about +-1% to +-4%.
UNEVEN_PROCESS_SHARE = 0.05


def uneven_processes_note(result: BenchResult) -> str | None:
    """The processes whose own level of one side moved, in words (None if none did or too
    few processes ran to tell): what widened an interval that stayed undecided."""
    units = stored_evidence(result.evidence).processes or []
    if len(units) < 4:
        return None
    backend = _mapping(result.spec).get("backend")
    found: list[tuple[float, str]] = []
    for key, side in (("baseline_median_ms", "eager"),
                      ("candidate_median_ms", str(backend or "the candidate"))):
        levels = [getattr(u, key) for u in units]
        if any(v is None for v in levels):
            continue
        values = np.asarray(levels, dtype=float)
        median = float(np.median(values))
        spread = 1.4826 * float(np.median(np.abs(values - median)))
        for j, value in enumerate(values):
            off = value / median - 1
            if abs(off) > UNEVEN_PROCESS_SHARE and abs(value - median) > 4 * spread:
                found.append((abs(off), f"{side} {abs(off):.0%} {'slow' if off > 0 else 'fast'}"
                                        f" in process {j + 1} ({value:.1f} ms a call against "
                                        f"a median of {median:.1f})"))
    if not found:
        return None
    found.sort(key=lambda item: -item[0])
    named = "; ".join(text for _, text in found[:3])
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (f"uneven processes: {named}{more}, of {len(units)} processes; a process whose own "
            "level moved widens the interval: a quieter runner decides it")


def inconclusive_cause(result: BenchResult, baseline: Baseline | None,
                       threshold: float) -> str | None:
    """Why a comparison is inconclusive (its interval stayed undecided against the
    threshold), and what would settle it, in one line: builds
    that chose differently, a busy host, a wide baseline, or the budget or process limit
    that ran out first."""
    evidence = stored_evidence(result.evidence)
    timing = _mapping(_mapping(result.spec).get("timing"))
    build = evidence.build
    if build is not None and build.distinct is not None and build.distinct > 1:
        apart = f", their speedups {build.spread:.1%} apart" if build.spread is not None else ""
        return (f"why inconclusive: its {build.distinct} builds chose differently{apart} "
                "(builds as shipped): measure with timing.builds pinned, or allow more "
                "processes (timing.max_processes) to average over builds")
    load = _host_load(result)
    if load is not None and load.loaded:
        return (f"why inconclusive: the host was busy ({load.other_cores or 0:.1f} "
                "other cores): re-run on a quiet runner, or give benchmarks cores of their "
                "own (the worker host's benchmark cores: see the configuration)")
    if result.speedup is None:
        return None
    own = log_half_width(result.speedup)
    base = baseline.result.speedup if baseline and baseline.result else None
    if base is not None and log_half_width(base) > own \
            and in_session_comparison(result, baseline) is None:
        return (f"why inconclusive: the baseline's own interval ({_relative(log_half_width(base))}"
                f") is the wider one: pin a more precise run as the baseline, or let this "
                "run become the baseline")
    adaptive = evidence.adaptive or AdaptiveEvidence()
    stopped, k = adaptive.stopped_by, adaptive.processes
    width = f"the interval ({_relative(own)}) is too wide for a {percent(threshold)} threshold"
    would = what_would_decide(adaptive, threshold)
    if stopped == "budget":
        budget = timing.get("budget_seconds")
        return (f"why inconclusive: {width} when the timing budget ({budget:g} s) ran out at "
                f"{k} processes: raise timing.budget_seconds (or timing.max_seconds), or the "
                f"threshold{would}"
                if isinstance(budget, (int, float)) else
                f"why inconclusive: {width}: raise timing.budget_seconds{would}")
    if stopped == "max_processes":
        return (f"why inconclusive: {width} at the process limit ({k}): raise "
                f"timing.max_processes (or timing.budget_seconds), or the threshold{would}")
    return (f"why inconclusive: {width}: measure more processes (timing.processes), or raise "
            "the threshold")


def what_would_decide(adaptive: AdaptiveEvidence, threshold: float) -> str:
    """What budget, or what threshold, would have decided an undecided comparison, from the
    measurement's own ratio and interval: its half-width shrinks as one over the square
    root of the units, so a budget (h / d)^2 times the spent one reaches the distance d
    from the ratio to the line it must clear (no change for a drop past the threshold, the
    threshold's line otherwise); the threshold that passes it now is where its interval
    ends."""
    ratio, ci = adaptive.ratio, adaptive.ratio_ci or [None, None]
    spent, half = adaptive.timing_seconds, adaptive.log_half_width
    if ratio is None or ci[0] is None or ci[1] is None or not spent or not half:
        return ""
    low = float(ci[0])
    past = ratio < 1 - threshold
    # a drop past the threshold decides once its interval excludes no change; one short of
    # it, once the interval clears the threshold's line (benchmarks.stats.classify_ratio)
    distance = abs(math.log(ratio)) if past else abs(math.log(ratio) - math.log1p(-threshold))
    out = ""
    if distance > 0:
        needed = spent * (half / distance) ** 2
        if needed < 100 * spent:
            out = f" (about {needed:.0f} s of timing would decide it"
    decides = 1 - low
    if not past and 0 < decides < 1:
        out += f"{'; ' if out else ' ('}a threshold of {decides:.1%} would pass it now)"
    elif out:
        out += ")"
    return out
