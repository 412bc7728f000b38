"""What a result's evidence says differently from its baseline's, for the run page.

The evidence of a result is long (node counts per op type, kernels, exporter, every
process's timings); what a person looks for is what changed since the baseline. Entries that
describe the measurement itself (timings, processes, compile seconds, the adaptive stop)
differ on every run and are left out of the comparison; the full evidence stays one click
away.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Top-level evidence entries that describe the measurement, not the optimized model.
MEASUREMENT_KEYS = frozenset({"adaptive", "compile", "processes", "timing", "ci_method",
                              "baseline_accuracy", "split_sides",
                              # each side's own timing window, medians and timestamps
                              "sides",
                              # the build's whole description is told by its fingerprint
                              "build_choices", "build", "model_build",
                              # told as "what got slower" (regression and compare pages)
                              "profile", "profile_error"})
# The entry that says whether two results ran the same code, in the words the evidence
# sentence uses (app.detection.evidence.BUILD_CHANGED).
BUILD_ENTRY = "build_fingerprint"
BUILD_CHANGED_NAME = "build choices changed (fingerprint)"


def flat(mapping: dict[str, Any] | None) -> list[tuple[str, str]]:
    """A nested JSON object as (dotted name, text) pairs, for fingerprints and evidence."""
    out: list[tuple[str, str]] = []
    for name, value in sorted((mapping or {}).items()):
        if isinstance(value, dict):
            out.extend((f"{name}.{k}", v) for k, v in flat(value))
        elif isinstance(value, float):
            out.append((name, f"{value:.4g}"))
        else:
            out.append((name, str(value)))
    return out


@dataclass(frozen=True)
class EvidenceChange:
    name: str
    before: str | None  # None: the baseline had no such entry
    after: str | None  # None: this result has no such entry


def evidence_changes(before: dict[str, Any] | None,
                     after: dict[str, Any] | None) -> list[EvidenceChange]:
    """The entries whose value differs between the baseline's evidence and this one's."""
    def structural(evidence: dict[str, Any] | None) -> dict[str, str]:
        return dict(flat({k: v for k, v in (evidence or {}).items()
                          if k not in MEASUREMENT_KEYS}))

    old, new = structural(before), structural(after)
    changed = [EvidenceChange(BUILD_CHANGED_NAME if name == BUILD_ENTRY else name,
                              old.get(name), new.get(name))
               for name in sorted(old.keys() | new.keys()) if old.get(name) != new.get(name)]
    # a changed build first: it explains whatever else moved
    return sorted(changed, key=lambda c: c.name != BUILD_CHANGED_NAME)


def fingerprint_summary(fingerprint: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The few entries of a machine's fingerprint a person compares two runs by: the device,
    the versions that decide the build, the threads and what else ran beside the timing.
    Entries the machine did not report (a CPU host's `cuda None`) are left out."""
    fp = fingerprint or {}
    rows: list[tuple[str, str]] = []

    def add(name: str, value: Any) -> None:
        if value not in (None, "", [], {}):
            rows.append((name, str(value)))

    add("gpu", fp.get("gpu"))
    add("driver", fp.get("driver"))
    add("cuda", fp.get("cuda"))
    add("cudnn", fp.get("cudnn"))
    if not fp.get("gpu"):
        add("cpu", fp.get("cpu"))
        add("cores", fp.get("cpu_count"))
    add("device class", fp.get("device_class"))
    versions = fp.get("backend_versions") or {}
    if isinstance(versions, dict):
        add("versions", ", ".join(f"{name} {v}" for name, v in sorted(versions.items()) if v))
    add("python", fp.get("python"))
    add("threads", fp.get("torch_threads"))
    load = fp.get("host_load")
    if isinstance(load, dict) and isinstance(load.get("other_cores"), (int, float)):
        peak = load.get("peak_cores")
        text = f"{load['other_cores']:.2f} cores used by other processes"
        if isinstance(peak, (int, float)):
            text += f" (peak {peak:.2f})"
        if load.get("loaded"):
            units = (f"{load['units_loaded']} of {load['units']} units"
                     if isinstance(load.get("units"), int) else "timed")
            text += f"; {units} past the {load.get('threshold')}-core threshold: marked busy"
        add("host load", text)
    add("host", fp.get("hostname"))
    return rows


def outcome(verdict: str | None, status: str | None) -> str:
    """A cell's outcome as the colour it is shown in: bad (a regression, an error or a
    failure), warn (undecided, suspect, skipped) or ok."""
    if verdict in ("regression", "error") or status in ("failed", "lost"):
        return "bad"
    if verdict in ("inconclusive", "suspect", "unconfirmed") or status == "skipped":
        return "warn"
    return "ok"


def build_summary(evidence: dict[str, Any] | None) -> str | None:
    """How a cell's processes came by their candidate: "built 18.7 s, then loaded 2x
    (13.1-13.4 s)", or "loaded 3x (6.2-6.5 s)" when an earlier run had built it; None for
    a result that does not say (older results, no candidate)."""
    if not isinstance(evidence, dict):
        return None
    processes = evidence.get("processes")
    records = [p.get("build") for p in processes if isinstance(p, dict)] \
        if isinstance(processes, list) else [evidence.get("build")]
    seen = [(str(r.get("source")), float(r["seconds"])) for r in records
            if isinstance(r, dict) and r.get("source") in ("built", "loaded")
            and isinstance(r.get("seconds"), (int, float))]
    if not seen:
        return None
    parts = []
    for source in ("built", "loaded"):
        times = [s for kind, s in seen if kind == source]
        if not times:
            continue
        span = f"{min(times):.1f} s" if len(times) == 1 or max(times) - min(times) < 0.05 \
            else f"{min(times):.1f}-{max(times):.1f} s"
        part = f"{source} {span}" if len(times) == 1 else f"{source} {len(times)}x ({span})"
        vias = sorted({str(r["via"]) for r in records if isinstance(r, dict)
                       and r.get("source") == source and r.get("via")})
        if vias:
            part += " " + " and ".join(_LOADED_VIA.get(v, f"via {v}") for v in vias)
        parts.append(part)
    refused = [r["refused"] for r in records if isinstance(r, dict) and r.get("refused")]
    notes = [r["note"] for r in records if isinstance(r, dict) and r.get("note")]
    text = ", then ".join(parts)
    if refused:
        text += f"; refused a stored build: {refused[0]}"
    return f"{text}; {notes[0]}" if notes else text


# how a process loaded its build, where a backend loads in more than one way
_LOADED_VIA = {"program": "from its kept program", "caches": "through inductor's caches"}
