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
from benchmarks.stats import (
    log_half_width,
)


def in_session_comparison(result: BenchResult,
                          baseline: Baseline | None) -> Mapping[str, Any] | None:
    """The result's comparison with its baseline's environment measured in the same session
    (benchmarks.isolation: `evidence.comparison`), when it compared with this baseline's
    environment; None otherwise."""
    comparison = _mapping(_mapping(result.evidence).get("comparison"))
    if comparison.get("mode") != "interleaved" or baseline is None or baseline.result is None:
        return None
    old = identity.of(baseline.result.fingerprint)
    if old is None or comparison.get("baseline_environment") != old["environment"]:
        return None
    numbers = [comparison.get("ratio"), *(comparison.get("ratio_ci") or [None, None]),
               comparison.get("baseline_speedup")]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in numbers):
        return None
    return comparison


def measurement_notes(result: BenchResult) -> list[str]:
    """How the result was measured, where a reader of the verdict must know it: a timing
    fallback, and how long the adaptive measurement took to decide (or that it did not)."""
    notes: list[str] = []
    evidence = result.evidence if isinstance(result.evidence, Mapping) else {}
    fallback = evidence.get("cuda_graphs_fallback")
    if fallback:
        notes.append(f"timed without CUDA graphs (fallback): {fallback}")
    adaptive = evidence.get("adaptive")
    if isinstance(adaptive, Mapping) and adaptive.get("processes"):
        k, seconds = adaptive.get("processes"), adaptive.get("timing_seconds") or 0.0
        stopped = adaptive.get("stopped_by")
        limit = "timing budget" if stopped == "budget" else "process limit"
        decided_wide = (adaptive.get("outcome") not in (None, "undecided")
                        and isinstance(adaptive.get("target_half_width"), (int, float))
                        and isinstance(adaptive.get("log_half_width"), (int, float)))
        interleaved = adaptive.get("mode") == "interleaved"
        how = (f"the same software as the baseline: {k} processes ({seconds:.1f} s of timing), "
               "nothing to decide" if stopped == "same_software" else
               f"decided after {k} units of each environment in turns ({seconds:.1f} s of "
               "timing)" if stopped == "decided" and interleaved else
               f"decided after {k} processes ({seconds:.1f} s of timing)"
               if stopped == "decided" else
               f"decided, but the CI half-width {math.expm1(adaptive['log_half_width']):.2%} "
               f"is above the {adaptive['target_half_width']:.2%} target: stopped at {k} "
               f"processes ({seconds:.1f} s of timing) by the {limit}"
               if decided_wide and stopped in ("budget", "max_processes") else
               f"not decided: stopped at {k} processes ({seconds:.1f} s of timing) by the "
               f"{limit}"
               if stopped in ("budget", "max_processes") else
               f"measured in {k} processes ({seconds:.1f} s of timing)")
        resolvable = _mapping(adaptive.get("resolvable"))
        half, budget = resolvable.get("half_width"), resolvable.get("budget_seconds")
        if isinstance(half, (int, float)) and isinstance(budget, (int, float)):
            how += (f"; this runner resolves +-{half:.1%} in {budget:g} s of timing (a "
                    "comparison's half-width, from this cell's own units)")
        notes.append(f"measurement: {how}")
    load = host_load_note(result)
    if load:
        notes.append(load)
    return notes


def host_load_note(result: BenchResult) -> str | None:
    """The CPU load guard's mark, in words: a result timed beside busy co-tenants is stored
    as such, never as a quiet measurement (benchmarks.host)."""
    fingerprint = result.fingerprint if isinstance(result.fingerprint, Mapping) else {}
    load = fingerprint.get("host_load")
    if not isinstance(load, Mapping) or not load.get("loaded"):
        return None
    remeasured = load.get("remeasured") or []
    again = f", {len(remeasured)} re-measured" if remeasured else ""
    cores = f" of {load['cores']}" if load.get("cores") else ""
    why = ("a busy CPU can delay the work a GPU side launches from it"
           if _mapping(result.spec).get("device") == "cuda" else
           "a co-tenant sharing caches and memory bandwidth can bias a CPU speedup by "
           "several percent")
    return (f"host busy: other processes kept {float(load.get('other_cores') or 0):.1f}"
            f"{cores} cores busy while timing ({load.get('units_loaded')} of "
            f"{load.get('units')} units past the {float(load.get('threshold') or 0):g}-core "
            f"guard{again}); {why}")


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
    units = [u for u in _mapping(result.evidence).get("processes") or []
             if isinstance(u, Mapping)]
    if len(units) < 4:
        return None
    backend = _mapping(result.spec).get("backend")
    found: list[tuple[float, str]] = []
    for key, side in (("baseline_median_ms", "eager"),
                      ("candidate_median_ms", str(backend or "the candidate"))):
        levels = [u.get(key) for u in units]
        if not all(isinstance(v, (int, float)) and v > 0 for v in levels):
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
    evidence = result.evidence if isinstance(result.evidence, Mapping) else {}
    spec = result.spec if isinstance(result.spec, Mapping) else {}
    timing = _mapping(spec.get("timing"))
    build = _mapping(evidence.get("build"))
    if isinstance(build.get("distinct"), int) and build["distinct"] > 1:
        spread = build.get("spread")
        apart = f", their speedups {spread:.1%} apart" if isinstance(spread, float) else ""
        return (f"why inconclusive: its {build['distinct']} builds chose differently{apart} "
                "(builds as shipped): measure with timing.builds pinned, or allow more "
                "processes (timing.max_processes) to average over builds")
    fingerprint = result.fingerprint if isinstance(result.fingerprint, Mapping) else {}
    load = fingerprint.get("host_load")
    if isinstance(load, Mapping) and load.get("loaded"):
        return (f"why inconclusive: the host was busy ({float(load.get('other_cores') or 0):.1f} "
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
    adaptive = _mapping(evidence.get("adaptive"))
    stopped = adaptive.get("stopped_by")
    k = adaptive.get("processes")
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


def what_would_decide(adaptive: Mapping[str, Any], threshold: float) -> str:
    """What budget, or what threshold, would have decided an undecided comparison, from the
    measurement's own ratio and interval: its half-width shrinks as one over the square
    root of the units, so a budget (h / d)^2 times the spent one reaches the distance d
    from the ratio to the line it must clear (no change for a drop past the threshold, the
    threshold's line otherwise); the threshold that passes it now is where its interval
    ends."""
    ratio, ci = adaptive.get("ratio"), adaptive.get("ratio_ci") or [None, None]
    spent, half = adaptive.get("timing_seconds"), adaptive.get("log_half_width")
    values = [ratio, *ci, spent, half]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values):
        return ""
    assert isinstance(ratio, (int, float)) and isinstance(spent, (int, float))
    assert isinstance(half, (int, float))
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
