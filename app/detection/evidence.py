"""What changed between two result documents, in one sentence a person reads in five seconds.

A regression alert is only useful if it says why: "kernels per inference 58 -> 161; onnx
nodes 122 -> 175; torch-tensorrt 2.6.0 -> 2.7.0" points at lost fusion and names the
package that moved. The order is fixed (fusion evidence first, since it explains a speedup;
then compile time and accuracy; then the environment) and only things that changed appear.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks.result import BenchResult, timing_mode_of

Document = BenchResult | Mapping[str, Any]

# Evidence keys with a reader's name, in the order they are told; other numeric or scalar
# keys follow with underscores turned into spaces.
_EVIDENCE_NAMES = {
    "kernels_per_inference": "kernels per inference",
    "trt_engine_layers": "engine layers",
    "trt_layer_count": "engine layers",  # results stored before issue 17
    "onnx_node_counts": "onnx nodes",
    "inductor_kernels": "inductor kernels",
    "graph_breaks": "graph breaks",
    "dynamo_graphs": "dynamo graphs",
}
# Evidence that restates another entry (totals and breakdowns of the same graph): telling it
# twice costs the reader's five seconds and says nothing new.
_REDUNDANT = {"onnx_nodes_total", "onnx_node_domains", "onnx_exported_nodes_total",
              "onnx_graph_inputs",
              # how it was measured, told by _condition_changes or not news at all
              "cuda_graphs_fallback", "adaptive", "processes", "ci_method", "cudnn_benchmark",
              # told first, as "build choices changed" (_build_change)
              "build", "build_fingerprint", "build_choices", "build_choices_error",
              "inductor_build_knobs",
              # told as "what got slower" (profile_clause)
              "profile", "profile_error"}
# Fingerprint entries worth naming when they differ (packages are handled on their own).
_ENVIRONMENT_KEYS = ("python", "cuda", "cudnn", "driver", "gpu", "device_class")
# Compile time is noisy; only a change this large (and at least half a second) is news.
_COMPILE_RELATIVE = 0.2


@dataclass(frozen=True)
class EvidenceChange:
    what: str
    before: str
    after: str
    detail: str = ""

    def __str__(self) -> str:
        tail = f" ({self.detail})" if self.detail else ""
        return f"{self.what} {self.before} -> {self.after}{tail}"


def _get(doc: Document, name: str) -> Any:
    if isinstance(doc, BenchResult):
        value = getattr(doc, name)
        if name == "accuracy" and value is not None:
            return {"rel_l2": value.rel_l2, "passed": value.passed}
        return value
    return doc.get(name)


def _fmt(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _evidence_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[EvidenceChange]:
    keys = [k for k in _EVIDENCE_NAMES if k in before or k in after]
    keys += sorted((set(before) | set(after)) - set(keys) - _REDUNDANT)
    out = []
    for key in keys:
        b, a = before.get(key), after.get(key)
        name = _EVIDENCE_NAMES.get(key, key.replace("_", " "))
        if key == "kernels_per_inference" and (isinstance(b, Mapping) or isinstance(a, Mapping)):
            out += _kernel_changes(b, a)
            continue
        if isinstance(b, Mapping) or isinstance(a, Mapping):
            before_counts, after_counts = _counts(b), _counts(a)
            if before_counts is None or after_counts is None:
                continue  # a record of settings or timings (evidence.timing), not counts
            out += _count_change(name, before_counts, after_counts)
        elif isinstance(b, (list, tuple)) or isinstance(a, (list, tuple)):
            continue  # lists (e.g. graph break reasons) do not fit in five seconds
        elif b != a:
            out.append(EvidenceChange(name, _fmt(b), _fmt(a)))
    return out


def _kernel_changes(before: Any, after: Any) -> list[EvidenceChange]:
    """Kernels per inference of each side ({"baseline": 342.0, "candidate": 105.0}, counted
    by the profiler, so averages): a change of at least half a kernel is told, candidate
    first (a fusion break shows there), the eager side after."""
    out = []
    for side, name in (("candidate", "candidate kernels per inference"),
                       ("baseline", "eager kernels per inference")):
        b = before.get(side) if isinstance(before, Mapping) else None
        a = after.get(side) if isinstance(after, Mapping) else None
        if isinstance(b, (int, float)) and isinstance(a, (int, float)) and abs(a - b) >= 0.5:
            out.append(EvidenceChange(name, f"{b:g}", f"{a:g}", f"{a - b:+g}"))
    return out


def _counts(value: Any) -> Mapping[str, int] | None:
    """A per-kind count map ({"Conv": 53, ...}; absent = empty), or None for any other map:
    real evidence also holds maps of settings and timings (strings, floats, nested maps)."""
    if not isinstance(value, Mapping):
        return {}
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value.values()):
        return value
    return None


def _count_change(name: str, before: Mapping[str, int], after: Mapping[str, int]) -> list[
        EvidenceChange]:
    """Totals of a per-kind count map, with the kind that moved most."""
    tb, ta = sum(before.values()), sum(after.values())
    deltas = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
    moved = {k: d for k, d in deltas.items() if d}
    if not moved:
        return []
    top = max(sorted(moved), key=lambda k: abs(moved[k]))
    return [EvidenceChange(name, str(tb) if before else "none", str(ta) if after else "none",
                           f"{moved[top]:+d} {top}")]


def _compile_change(before: Any, after: Any) -> EvidenceChange | None:
    if not isinstance(before, (int, float)) or not isinstance(after, (int, float)):
        return None
    if abs(after - before) < 0.5 or abs(after - before) < _COMPILE_RELATIVE * max(before, 1e-9):
        return None
    return EvidenceChange("compile time", f"{before:.1f} s", f"{after:.1f} s")


def _accuracy_change(before: Any, after: Any) -> EvidenceChange | None:
    if not isinstance(before, Mapping) or not isinstance(after, Mapping):
        return None
    if before.get("passed") == after.get("passed"):
        return None
    return EvidenceChange(
        "accuracy",
        "passed" if before.get("passed") else "failed",
        "passed" if after.get("passed") else "failed",
        f"rel_l2 {_fmt(before.get('rel_l2'))} -> {_fmt(after.get('rel_l2'))}",
    )


def _environment_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[
        EvidenceChange]:
    out = []
    pb = before.get("packages") or {}
    pa = after.get("packages") or {}
    for name in sorted(set(pb) | set(pa)):
        if pb.get(name) != pa.get(name):
            out.append(EvidenceChange(name, _fmt(pb.get(name)), _fmt(pa.get(name))))
    for key in _ENVIRONMENT_KEYS:
        if key in before or key in after:
            b, a = before.get(key), after.get(key)
            if b != a:
                out.append(EvidenceChange(key, _fmt(b), _fmt(a)))
    return out


# An SM clock that moved by more than this between two results is news (boost vs base).
_CLOCK_RELATIVE = 0.05
# Other processes' busy cores (benchmarks.host) that moved by more than this are news.
_LOAD_CHANGE_CORES = 0.5


def _threads(doc: Document) -> Any:
    spec = _get(doc, "spec") or {}
    options = spec.get("options") if isinstance(spec, Mapping) else None
    return options.get("threads") if isinstance(options, Mapping) else None


def _sm_clock(fingerprint: Mapping[str, Any]) -> float | None:
    """The lower of the SM clocks read before and after timing (a drop shows either way)."""
    values = []
    for key in ("nvml_start", "nvml_end"):
        reading = fingerprint.get(key)
        if isinstance(reading, Mapping) and isinstance(reading.get("sm_clock_mhz"), (int, float)):
            values.append(float(reading["sm_clock_mhz"]))
    return min(values) if values else None


def _throttle(fingerprint: Mapping[str, Any]) -> str | None:
    if "throttled" not in fingerprint:
        return None
    if not fingerprint.get("throttled"):
        return "no"
    reasons: list[str] = []
    for key in ("nvml_start", "nvml_end"):
        reading = fingerprint.get(key)
        if isinstance(reading, Mapping):
            reasons += [str(r) for r in reading.get("throttle_reasons") or [] if r not in reasons]
    return f"yes ({', '.join(reasons)})" if reasons else "yes"


def _condition_changes(before: Document, after: Document) -> list[EvidenceChange]:
    """The conditions of the measurement: timing mode and its fallback, CPU threads, GPU
    clocks and throttling. Within one series the mode and threads cannot differ (they are
    axes of its key), but a comparison of two runs, or of a re-measure, may cross them."""
    out: list[EvidenceChange] = []
    eb, ea = _get(before, "evidence") or {}, _get(after, "evidence") or {}
    mb, ma = timing_mode_of(eb), timing_mode_of(ea)
    if mb != ma and (mb or ma):
        fallback = ea.get("cuda_graphs_fallback") if isinstance(ea, Mapping) else None
        out.append(EvidenceChange("timing mode", _fmt(mb), _fmt(ma),
                                  f"fallback: {fallback}" if fallback else ""))
    tb, ta = _threads(before), _threads(after)
    if tb != ta:
        out.append(EvidenceChange("cpu threads", "library default" if tb is None else str(tb),
                                  "library default" if ta is None else str(ta)))
    fb, fa = _get(before, "fingerprint") or {}, _get(after, "fingerprint") or {}
    cb, ca = _sm_clock(fb), _sm_clock(fa)
    if cb and ca and abs(ca - cb) > _CLOCK_RELATIVE * cb:
        out.append(EvidenceChange("gpu sm clock", f"{cb:.0f} MHz", f"{ca:.0f} MHz"))
    thb, tha = _throttle(fb), _throttle(fa)
    if thb != tha and (thb is not None or tha is not None):
        out.append(EvidenceChange("throttled", _fmt(thb), _fmt(tha)))
    lb, la = _host_load(fb), _host_load(fa)
    if lb is not None and la is not None and abs(la - lb) > _LOAD_CHANGE_CORES:
        out.append(EvidenceChange("host load", f"{lb:.1f}", f"{la:.1f}",
                                  "other processes' busy cores while timing"))
    kb, ka = _clock(eb) if isinstance(eb, Mapping) else None, \
        _clock(ea) if isinstance(ea, Mapping) else None
    if kb and ka and kb != ka:
        out.append(EvidenceChange("timing clock", kb, ka))
    db, da = device_label(fb), device_label(fa)
    if db and da and db != da:
        # on four H100s of one host the same cells differed by up to 0.3% between GPUs and
        # by up to 0.1% on one GPU: a comparison across GPUs carries that much on its own
        out.append(EvidenceChange("measured on", db, da,
                                  "another GPU of the class: up to a few tenths of a "
                                  "percent apart on their own; a regression is confirmed "
                                  "on the GPU that measured it"))
    return out


def device_label(fingerprint: Mapping[str, Any]) -> str | None:
    """'GPU 3 of host-a', where the fingerprint names the GPU's index (None otherwise)."""
    index = fingerprint.get("gpu_index")
    if index is None:
        return None
    host = fingerprint.get("hostname")
    return f"GPU {index}" + (f" of {host}" if host else "")


BUILD_CHANGED = "build choices changed"


def _build_change(before: Mapping[str, Any], after: Mapping[str, Any]) -> EvidenceChange | None:
    """The builds' fingerprints (benchmarks.build) differ: the two results did not run the
    same code, whatever else held still. What differs is counted where both descriptions
    are at hand (inductor's kernels and configs, ONNX Runtime's nodes, TensorRT's layers)."""
    fb, fa = before.get("build_fingerprint"), after.get("build_fingerprint")
    if fb == fa or (fb is None and fa is None):
        return None
    return EvidenceChange(f"{BUILD_CHANGED}: fingerprint", str(fb or "unrecorded"),
                          str(fa or "unrecorded"),
                          _choices_diff(before.get("build_choices"), after.get("build_choices")))


def _choices_diff(before: Any, after: Any) -> str:
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        parts = []
        kb, ka = set(before.get("kernels") or []), set(after.get("kernels") or [])
        if kb != ka:
            parts.append(f"kernels {len(kb)} -> {len(ka)}, {len(kb ^ ka)} renamed or new")
        cb, ca = before.get("triton_configs") or {}, after.get("triton_configs") or {}
        if isinstance(cb, Mapping) and isinstance(ca, Mapping):
            moved = sum(1 for k in set(cb) & set(ca) if cb[k] != ca[k])
            if moved:
                parts.append(f"{moved} kernel launch configs differ")
        return "; ".join(parts)
    if isinstance(before, list) and isinstance(after, list):
        differ = sum(1 for b, a in zip(before, after, strict=False) if b != a)
        differ += abs(len(before) - len(after))
        return f"{differ} of {max(len(before), len(after))} layers or nodes differ"
    return ""


def _host_load(fingerprint: Mapping[str, Any]) -> float | None:
    load = fingerprint.get("host_load")
    value = load.get("other_cores") if isinstance(load, Mapping) else None
    return float(value) if isinstance(value, (int, float)) else None


def _clock(evidence: Mapping[str, Any]) -> str | None:
    timing = evidence.get("timing")
    clock = timing.get("clock") if isinstance(timing, Mapping) else None
    return str(clock) if clock else None


def evidence_changes(before: Document, after: Document) -> list[EvidenceChange]:
    """Every difference worth telling between two results of one series, in reading order."""
    eb, ea = _get(before, "evidence") or {}, _get(after, "evidence") or {}
    build = _build_change(eb, ea)
    out = [build] if build else []
    out += _evidence_changes(eb, ea)
    for change in (
        _compile_change(_get(before, "compile_seconds"), _get(after, "compile_seconds")),
        _accuracy_change(_get(before, "accuracy"), _get(after, "accuracy")),
    ):
        if change:
            out.append(change)
    out += _environment_changes(_get(before, "fingerprint") or {}, _get(after, "fingerprint") or {})
    out += _condition_changes(before, after)
    return out


def profile_clause(before: Document, after: Document) -> str | None:
    """'what got slower: candidate triton_poi_fused_... new (+12.3 us per inference, 81% of
    the change; ...)' from the two documents' profiles (benchmarks.profile_diff); None when
    they hold no comparable profiles."""
    from benchmarks.profile_diff import diff_sides, largest_change

    b = (_get(before, "evidence") or {}).get("profile")
    a = (_get(after, "evidence") or {}).get("profile")
    if not isinstance(b, dict) or not isinstance(a, dict):
        return None
    found = largest_change(diff_sides(b, a)[0])
    if found is None:
        return None
    side, clause = found
    return f"what got slower: {'eager' if side == 'baseline' else 'candidate'} {clause}"


def evidence_sentence(before: Document, after: Document) -> str:
    """'kernels per inference 58 -> 161; torch-tensorrt 2.6.0 -> 2.7.0', or a plain 'no ...';
    the profiles' largest contributor last, where both documents hold a profile."""
    changes = [str(c) for c in evidence_changes(before, after)]
    if not changes:
        changes = ["no change in build choices, fusion evidence, compile time, accuracy, "
                   "environment versions or measurement conditions (timing mode and clock, "
                   "threads, GPU, clocks, throttling, host load)"]
    clause = profile_clause(before, after)
    return "; ".join([*changes, *([clause] if clause else [])])
