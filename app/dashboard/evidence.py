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
                              # the build's whole description is told by its fingerprint
                              "build_choices", "build"})
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
