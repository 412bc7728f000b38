"""K processes' results of one spec merged into one result (`merge_processes`): samples in
process order, the speedup's interval with the between-process variance
(`stats.combine_processes`), evidence per process, the worst accuracy, the host's load,
and the builds and software the processes ran."""

from __future__ import annotations

import time
from typing import Any, TypeVar

from pydantic import BaseModel

from benchmarks import build, identity, stats
from benchmarks.gpu_process_schema import GpuProcesses, LaunchPin
from benchmarks.result import Accuracy, BenchResult, ResultError
from benchmarks.result_schema import (
    BuildEvidence,
    PreparedAhead,
    ProcessEvidence,
    SidesEvidence,
)
from benchmarks.spec import (
    BenchSpec,
    SpecError,
    model_digest_of,
)
from benchmarks.stored_parts import written


def _worst_accuracy(results: list[BenchResult]) -> Accuracy | None:
    accs = [r.accuracy for r in results if r.accuracy is not None]
    return max(accs, key=lambda a: (not a.passed, a.rel_l2)) if accs else None


def merge_processes(
    spec: BenchSpec, results: list[BenchResult], *, started_monotonic: float,
) -> BenchResult:
    """One result from the ok results of K processes of `spec` (module docstring: how)."""
    policy = spec.timing
    first, last = results[0], results[-1]
    same_model(results)
    speedup = stats.combine_processes(
        [(r.baseline_samples_ms, r.candidate_samples_ms) for r in results],
        resamples=policy.bootstrap_resamples, seed=policy.seed,
    )
    base = [rd for r in results for rd in r.baseline_samples_ms]
    cand = [rd for r in results for rd in r.candidate_samples_ms]
    per_process = [process_record(r) for r in results]
    evidence = dict(first.evidence)
    if isinstance(evidence.get("timing"), dict):
        timing = dict(evidence["timing"])
        timing["rounds"] = len(base)
        timing["timing_seconds"] = sum(p["timing_seconds"] or 0.0 for p in per_process)
        evidence["timing"] = timing
    evidence["processes"] = per_process
    evidence["ci_method"] = speedup.method
    _merge_builds(evidence, per_process)
    fp = _merged_fingerprint(results, evidence.get("build_fingerprint"), policy.max_host_load)
    peak: dict[str, int] = {}
    for r in results:
        for key, value in r.peak_memory_bytes.items():
            peak[key] = max(peak.get(key, 0), value)
    reasons = [f"process {j + 1}: {r.reason}" for j, r in enumerate(results) if r.reason]
    merged = BenchResult(
        series_key=first.series_key,
        spec=spec.to_dict(),
        status="ok",
        reason="; ".join(reasons) or None,
        baseline_samples_ms=base,
        candidate_samples_ms=cand,
        baseline=stats.summary(base),
        candidate=stats.summary(cand),
        speedup=speedup,
        accuracy=_worst_accuracy(results),
        compile_seconds=first.compile_seconds,
        peak_memory_bytes=peak,
        evidence=evidence,
        fingerprint=fp,
        started_at=first.started_at,
        finished_at=last.finished_at,
        duration_seconds=time.monotonic() - started_monotonic,
    )
    merged.check()
    return merged


_Part = TypeVar("_Part", bound=BaseModel)


def process_record(r: BenchResult) -> dict[str, Any]:
    """One process's line in the merged result's `evidence.processes`, made as the schema's
    part (result_schema.ProcessEvidence): the process's own sides, build and phases records
    as it wrote them."""
    evidence = r.evidence if isinstance(r.evidence, dict) else {}
    timing = evidence.get("timing", {})
    load = r.fingerprint.get("host_load")

    def part(key: str, model: type[_Part]) -> _Part | None:
        value = evidence.get(key)
        return model.model_validate(value) if isinstance(value, dict) else None

    record = ProcessEvidence(
        speedup=r.speedup.value if r.speedup else None,
        ci_low=r.speedup.ci_low if r.speedup else None,
        ci_high=r.speedup.ci_high if r.speedup else None,
        rounds=len(r.baseline_samples_ms),
        timing_seconds=timing.get("timing_seconds"),
        compile_seconds=r.compile_seconds,
        baseline_median_ms=r.baseline.median_ms if r.baseline else None,
        candidate_median_ms=r.candidate.median_ms if r.candidate else None,
        started_at=r.started_at,
        finished_at=r.finished_at,
        host_other_cores=load.get("other_cores") if isinstance(load, dict) else None,
        build_fingerprint=evidence.get("build_fingerprint") or None,
        sides=part("sides", SidesEvidence),
        build=part("build", BuildEvidence),
        phases=evidence["phases"] if isinstance(evidence.get("phases"), dict) else None,
        # when it timed, on the host's monotonic clock: children prepared ahead time one at
        # a time, and this shows it
        timing_window=list(timing["window"]) if isinstance(timing.get("window"), list)
        else None,
        prepared_ahead=part("prepared_ahead", PreparedAhead),
        gpu_processes=part("gpu_processes", GpuProcesses),
        launch_pin=part("launch_pin", LaunchPin),
        process_start=evidence.get("process_start")
        if evidence.get("process_start") in ("forked", "fresh") else None,
    )
    return written(record, unless_none=(
        "host_other_cores", "build_fingerprint", "sides", "build", "phases", "timing_window",
        "prepared_ahead", "gpu_processes", "launch_pin", "process_start"))


def _merged_fingerprint(results: list[BenchResult], build_fingerprint: Any,
                        max_host_load: float) -> dict[str, Any]:
    """The first process's fingerprint, with the software all ran, the last one's NVML
    reading, and the host's load over all."""
    fp = dict(results[0].fingerprint)
    software = _merged_software(results, build_fingerprint)
    if software is not None:
        fp["software"] = software
    if "nvml_end" in results[-1].fingerprint:
        fp["nvml_end"] = results[-1].fingerprint["nvml_end"]
    throttled = [r.fingerprint["throttled"] for r in results if "throttled" in r.fingerprint]
    if throttled:
        fp["throttled"] = any(throttled)
    load = host_load_of(results, max_host_load)
    if load is not None:
        fp["host_load"] = load
    return fp


def _merge_builds(evidence: dict[str, Any], per_process: list[dict[str, Any]]) -> None:
    """Whether the processes ran one build: a single fingerprint stays the result's; several
    (builds as shipped, each timing its own choices) give the result a fingerprint of the
    set, and `evidence.build` counts them and gives the spread of the processes' speedups
    (max - min over the median): what a fresh build may cost or gain."""
    prints = [p.get("build_fingerprint") for p in per_process]
    known = [fp for fp in prints if fp]
    if not known:
        return
    distinct = sorted(set(known))
    build_record = dict(evidence.get("build") or {})
    build_record["distinct"] = len(distinct)
    if len(distinct) > 1:
        evidence["build_fingerprint"] = build.fingerprint(distinct)
        speedups = [p["speedup"] for p in per_process if isinstance(p.get("speedup"), float)]
        if len(speedups) > 1:
            middle = sorted(speedups)[len(speedups) // 2]
            build_record["spread"] = (max(speedups) - min(speedups)) / middle
    evidence["build"] = build_record


def _merged_software(results: list[BenchResult], build_fp: Any) -> dict[str, Any] | None:
    """The merged result's identity: the processes' environment with the merged build
    fingerprint. Processes of one cell run one interpreter, so their environments agree;
    one that does not (an environment changed under a running cell) refuses the merge."""
    found = [identity.of(r.fingerprint) for r in results]
    if any(s is None for s in found):
        return None
    environments = {str(s["environment"]) for s in found if s is not None}
    if len(environments) > 1:
        raise ResultError("the environment changed between the processes of one cell "
                          f"({', '.join(sorted(environments))}): its samples are of "
                          "different software")
    first = found[0]
    assert first is not None
    merged = identity.with_build(first, build_fp if isinstance(build_fp, str) else None)
    if first.get("sides"):
        merged["sides"] = first["sides"]
    return merged


def host_load_of(results: list[BenchResult], threshold: float) -> dict[str, Any] | None:
    """The host's load over the units of one result: the mean and peak of other processes'
    busy cores, and how many units were timed past the guard's threshold (`loaded`: any)."""
    loads = [r.fingerprint["host_load"] for r in results
             if isinstance(r.fingerprint.get("host_load"), dict)
             and isinstance(r.fingerprint["host_load"].get("other_cores"), (int, float))]
    if not loads:
        return None
    over = sum(1 for x in loads if x["other_cores"] > threshold)
    return {
        "other_cores": round(sum(x["other_cores"] for x in loads) / len(loads), 3),
        "peak_cores": round(max(float(x.get("peak_cores") or x["other_cores"])
                                for x in loads), 3),
        "cores": loads[0].get("cores"),
        "threshold": threshold,
        "units": len(loads),
        "units_loaded": over,
        "loaded": over > 0,
    }


def same_model(results: list[BenchResult]) -> None:
    """Refuse to merge processes that built different models (a factory that does not
    build the same model each time): their samples would not measure one thing. Raises
    ResultError naming the digests."""
    try:
        digests = [model_digest_of(r.fingerprint) for r in results]
    except SpecError as exc:
        raise ResultError(str(exc)) from None
    if len(set(digests)) > 1:
        raise ResultError("the model's fingerprint differs between processes ("
                          + ", ".join(str(d) for d in digests) + "): its factory does not "
                          "build the same architecture and input shapes each time")
