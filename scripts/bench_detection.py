"""Benchmark change-point detectors side by side on the seeded labelled corpus.

    .venv/bin/python scripts/bench_detection.py --seed 2 --size 1500

Detectors, each run on the very same series in one process:
- speedwatch: app.detection.changepoints.detect_change_points with its defaults.
- otava: Apache Otava's `compute_change_points` with its defaults (window 50, max p-value
  0.001, min magnitude 0), i.e. what `otava analyze` does with no options.
- zscore: Conbench's lookback z-score rule: each point against the mean and standard
  deviation of up to 100 previous points (Conbench's DISTRIBUTION_COMMITS default), flagged
  when |z| >= 5. A flag starts a new distribution (as a curator's "distribution change"
  would), so one step raises one alarm rather than one per point; at least 10 points of
  history are needed before a point is scored.

A detection is true when it lies within +-3 points (corpus.TOLERANCE) of a labelled change
with the same direction. Detection delay is measured online: the detector is re-run on each
prefix of the series ending after the change, and the delay is the number of points after
the first changed one it needed before reporting the change (0 = flagged on the first
changed point). It is averaged over the changes the detector finds in the full series.
The defaults of the speedwatch detector were tuned on seed 1; report on another seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.detection.changepoints import DetectorSettings, detect_change_points
from app.detection.corpus import (
    CV_BUCKETS,
    MAGNITUDE_BUCKETS,
    SHAPES,
    TOLERANCE,
    Detection,
    LabelledChange,
    LabelledSeries,
    generate_corpus,
    match,
)

Detector = Callable[[Sequence[float], bool], list[Detection]]


SETTINGS = DetectorSettings()


def speedwatch(values: Sequence[float], higher_is_better: bool) -> list[Detection]:
    return [
        Detection(c.index, c.direction)
        for c in detect_change_points(values, higher_is_better=higher_is_better,
                                      settings=SETTINGS)
    ]


def otava(values: Sequence[float], higher_is_better: bool) -> list[Detection]:
    from otava.analysis import compute_change_points

    cps, _ = compute_change_points(list(values))
    out = []
    for cp in cps:
        up = cp.stats.mean_2 > cp.stats.mean_1
        out.append(Detection(int(cp.index), "improvement" if up == higher_is_better
                             else "regression"))
    return out


def zscore(
    values: Sequence[float],
    higher_is_better: bool,
    threshold: float = 5.0,
    window: int = 100,
    min_history: int = 10,
) -> list[Detection]:
    x = np.asarray(values, dtype=np.float64)
    out = []
    start = 0
    for i in range(x.size):
        hist = x[max(start, i - window):i]
        if hist.size < min_history:
            continue
        sd = float(hist.std(ddof=1))
        if sd == 0.0:
            continue
        z = (x[i] - float(hist.mean())) / sd
        if abs(z) >= threshold:
            out.append(Detection(i, "improvement" if (z > 0) == higher_is_better
                                 else "regression"))
            start = i
    return out


DETECTORS: dict[str, Detector] = {"speedwatch": speedwatch, "otava": otava, "zscore": zscore}


def _bucket(value: float, buckets: Sequence[tuple[float, float]]) -> str:
    for lo, hi in buckets:
        if lo <= value <= hi:
            return f"{lo * 100:g}-{hi * 100:g}%"
    return "other"


@dataclass
class Tally:
    tp: int = 0
    fn: int = 0
    fp: int = 0
    delays: list[int] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else float("nan")

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else float("nan")

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


def _delay(det: Detector, s: LabelledSeries, label: LabelledChange) -> int | None:
    for k in range(label.index + 1, len(s.values) + 1):
        found = match([label], det(s.values[:k], s.higher_is_better))
        if found.matched:
            return k - label.index - 1
    return None


@dataclass
class Results:
    overall: Tally = field(default_factory=Tally)
    by_mag: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    by_cv: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    by_shape: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    target: Tally = field(default_factory=Tally)  # drops >= 5% at CV <= 2%
    unchanged: int = 0
    unchanged_flagged: int = 0
    drift_only: int = 0
    drift_only_flagged: int = 0
    seconds: float = 0.0


def evaluate(det: Detector, corpus: Sequence[LabelledSeries], delays: bool) -> Results:
    res = Results()
    t0 = time.perf_counter()
    for s in corpus:
        m = match(s.changes, det(s.values, s.higher_is_better), TOLERANCE)
        cv_key = _bucket(s.cv, CV_BUCKETS)
        for tally in (res.overall, res.by_cv[cv_key], res.by_shape[s.shape]):
            tally.tp += len(m.matched)
            tally.fn += len(m.missed)
            tally.fp += len(m.false)
        for lab, hit in [(lab, True) for lab, _ in m.matched] + [(lab, False) for lab in m.missed]:
            mag = res.by_mag[_bucket(abs(lab.magnitude), MAGNITUDE_BUCKETS)]
            in_target = lab.magnitude <= -0.05 and s.cv <= 0.02
            for tally in (mag, res.target) if in_target else (mag,):
                if hit:
                    tally.tp += 1
                else:
                    tally.fn += 1
        if not s.changes:
            res.unchanged += 1
            res.unchanged_flagged += bool(m.false)
            if s.shape == "drift":
                res.drift_only += 1
                res.drift_only_flagged += bool(m.false)
    res.seconds = time.perf_counter() - t0
    if delays:
        for s in corpus:
            m = match(s.changes, det(s.values, s.higher_is_better), TOLERANCE)
            for lab, _ in m.matched:
                d = _delay(det, s, lab)
                if d is not None:
                    res.overall.delays.append(d)
                    res.by_mag[_bucket(abs(lab.magnitude), MAGNITUDE_BUCKETS)].delays.append(d)
    return res


def _f(x: float, digits: int = 3) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def _delay_str(t: Tally) -> str:
    return f"{np.mean(t.delays):.1f}" if t.delays else "-"


def report(results: dict[str, Results], seed: int, size: int) -> str:
    names = list(results)
    lines = [
        f"Corpus seed {seed}, {size} series; tolerance +-{TOLERANCE} points, same direction.",
        "",
        "| detector | precision | recall | F1 | mean delay (points) | unchanged flagged | "
        "drift-only flagged | recall, drops >= 5% at CV <= 2% | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        r = results[name]
        o = r.overall
        lines.append(
            f"| {name} | {_f(o.precision)} | {_f(o.recall)} | {_f(o.f1)} | {_delay_str(o)} | "
            f"{r.unchanged_flagged}/{r.unchanged} ({100 * r.unchanged_flagged / r.unchanged:.1f}%)"
            f" | {r.drift_only_flagged}/{r.drift_only} | {_f(r.target.recall)} "
            f"({r.target.tp}/{r.target.tp + r.target.fn}) | {r.seconds:.1f} |"
        )
    mags = [_bucket((lo + hi) / 2, MAGNITUDE_BUCKETS) for lo, hi in MAGNITUDE_BUCKETS]
    lines += ["", "Recall (mean delay) by step magnitude:", "",
              "| detector | " + " | ".join(mags) + " |", "|---" * (len(mags) + 1) + "|"]
    for name in names:
        r = results[name]
        cells = [f"{_f(r.by_mag[k].recall)} ({_delay_str(r.by_mag[k])})" for k in mags]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    cvs = [_bucket((lo + hi) / 2, CV_BUCKETS) for lo, hi in CV_BUCKETS]
    lines += ["", "Precision / recall / F1 by noise CV:", "",
              "| detector | " + " | ".join(f"CV {k}" for k in cvs) + " |",
              "|---" * (len(cvs) + 1) + "|"]
    for name in names:
        r = results[name]
        cells = [f"{_f(r.by_cv[k].precision, 2)} / {_f(r.by_cv[k].recall, 2)} / "
                 f"{_f(r.by_cv[k].f1, 2)}" for k in cvs]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Precision / recall / F1 by noise shape:", "",
              "| detector | " + " | ".join(SHAPES) + " |", "|---" * (len(SHAPES) + 1) + "|"]
    for name in names:
        r = results[name]
        cells = [f"{_f(r.by_shape[k].precision, 2)} / {_f(r.by_shape[k].recall, 2)} / "
                 f"{_f(r.by_shape[k].f1, 2)}" for k in SHAPES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=2, help="corpus seed (defaults tuned on 1)")
    ap.add_argument("--size", type=int, default=1500, help="number of series")
    ap.add_argument("--detectors", default=",".join(DETECTORS),
                    help="comma-separated subset of " + ", ".join(DETECTORS))
    ap.add_argument("--no-delay", action="store_true", help="skip the online delay replay")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="override a speedwatch DetectorSettings field (for tuning runs)")
    args = ap.parse_args(argv)
    global SETTINGS
    overrides: dict[str, object] = {}
    for item in args.set:
        key, _, raw = item.partition("=")
        if key not in DetectorSettings.__dataclass_fields__:
            ap.error(f"--set: unknown setting {key!r}")
        current = getattr(SETTINGS, key)
        if isinstance(current, bool):
            overrides[key] = raw.lower() in ("1", "true", "yes")
        elif isinstance(current, int):
            overrides[key] = int(raw)
        else:
            overrides[key] = float(raw)
    SETTINGS = dataclasses.replace(SETTINGS, **overrides).check()  # type: ignore[arg-type]
    corpus = generate_corpus(args.seed, args.size)
    results = {}
    for name in args.detectors.split(","):
        if name not in DETECTORS:
            ap.error(f"unknown detector {name!r}")
        results[name] = evaluate(DETECTORS[name], corpus, delays=not args.no_delay)
    print(report(results, args.seed, args.size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
