"""Benchmark change-point detectors side by side on the seeded labelled corpora.

    PYTHONPATH=. /tmp/dv/bin/python scripts/bench_detection.py --seed 2 --size 1500
    .venv/bin/python scripts/bench_detection.py --timing      # 10k-point series only
    .venv/bin/python scripts/bench_detection.py --autocorrelated --seed 5   # AR(1) null

(Otava lives in its own virtual environment, /tmp/dv: it pins an older numpy than the
project; see docs/detection.md.)

Detectors, each run on the very same series in one process:
- speedwatch: app.detection.changepoints.detect_change_points with its defaults, given each
  point's 95% interval (ci_low/ci_high), as the service calls it for stored results.
- speedwatch-values: the same function on the values alone, as for ingested series without
  samples (and `speedwatch detect` without ci_low/ci_high).
- today: the detector before issue 16 (app/detection/changepoints.py at --today, by default
  24f2479, the commit before its first round; loaded from git), values alone.
- otava: Apache Otava's `compute_change_points` with its defaults (window 50, max p-value
  0.001, min magnitude 0), i.e. what `otava analyze` does with no options.
- zscore: Conbench's lookback z-score rule: each point against the mean and standard
  deviation of up to 100 previous points (Conbench's DISTRIBUTION_COMMITS default), flagged
  when |z| >= 5. A flag starts a new distribution (as a curator's "distribution change"
  would), so one step raises one alarm rather than one per point; at least 10 points of
  history are needed before a point is scored.
Only speedwatch reads the intervals; the others see the values, as they would in use.

Corpora (app/detection/corpus.py): the widened corpus (per-point intervals, tight "gpu" and
wide "cpu" ones, six noise shapes, several steps, short series) and the legacy corpus of the
first benchmark (no intervals), so its table can be compared with the one published then.

A detection is true when it lies within +-3 points (corpus.TOLERANCE) of a labelled change
with the same direction. Detection delay is measured online on the first --delay-series
series: the detector is re-run on each prefix of the series ending after the change, and the
delay is the number of points after the first changed one it needed before reporting the
change (0 = flagged on the first changed point), averaged over the changes it finds in the
full series. The defaults of the speedwatch detector were tuned on seed 1; report another.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.detection.changepoints import detect_change_points  # noqa: E402
from app.detection.corpus import (  # noqa: E402
    LEGACY_SHAPES,
    MAGNITUDE_BUCKETS,
    SHAPES,
    STEP_SIZES,
    TOLERANCE,
    Detection,
    LabelledChange,
    LabelledSeries,
    generate_corpus,
    generate_legacy_corpus,
    match,
)
from app.detection.detector_settings import DetectorSettings  # noqa: E402

Detector = Callable[[LabelledSeries], list[Detection]]

SETTINGS = DetectorSettings()
# The detector before issue 16 (the commit before its first round, 744d1a1).
TODAY = "24f247960ff97834b324d5d038d94fc879d88006"


def _as_detections(found: Sequence[object]) -> list[Detection]:
    return [Detection(int(c.index), str(c.direction)) for c in found]  # type: ignore[attr-defined]


def speedwatch(s: LabelledSeries) -> list[Detection]:
    return _as_detections(detect_change_points(
        s.values, higher_is_better=s.higher_is_better, ci_low=s.ci_low, ci_high=s.ci_high,
        settings=SETTINGS))


def speedwatch_values(s: LabelledSeries) -> list[Detection]:
    return _as_detections(detect_change_points(
        s.values, higher_is_better=s.higher_is_better, settings=SETTINGS))


def load_today(ref: str) -> Detector | None:
    """The detector of `ref` (a git revision), from its own source file."""
    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{ref}:app/detection/changepoints.py"],
            check=True, capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"today: cannot read {ref}:app/detection/changepoints.py ({exc})",
              file=sys.stderr)
        return None
    path = Path(tempfile.mkdtemp()) / "changepoints_today.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("changepoints_today", path)
    assert spec is not None and spec.loader is not None
    module: ModuleType = importlib.util.module_from_spec(spec)
    sys.modules["changepoints_today"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)

    def today(s: LabelledSeries) -> list[Detection]:
        return _as_detections(module.detect_change_points(
            s.values, higher_is_better=s.higher_is_better))

    return today


def otava(s: LabelledSeries) -> list[Detection]:
    from otava.analysis import compute_change_points

    cps, _ = compute_change_points(list(s.values))
    out = []
    for cp in cps:
        up = cp.stats.mean_2 > cp.stats.mean_1
        out.append(Detection(int(cp.index), "improvement" if up == s.higher_is_better
                             else "regression"))
    return out


def zscore(
    s: LabelledSeries,
    threshold: float = 5.0,
    window: int = 100,
    min_history: int = 10,
) -> list[Detection]:
    x = np.asarray(s.values, dtype=np.float64)
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
            out.append(Detection(i, "improvement" if (z > 0) == s.higher_is_better
                                 else "regression"))
            start = i
    return out


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
        if p != p or r != r:
            return float("nan")
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass
class Results:
    overall: Tally = field(default_factory=Tally)
    groups: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    unchanged: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    seconds: float = 0.0


def _size_key(magnitude: float) -> str:
    """A widened-corpus step size ("3%"), or a legacy bucket ("2-5%")."""
    size = abs(magnitude)
    for s in STEP_SIZES:
        if abs(size - s) < 1e-9:
            return f"{s * 100:g}%"
    for lo, hi in MAGNITUDE_BUCKETS:
        if lo <= size <= hi:
            return f"{lo * 100:g}-{hi * 100:g}%"
    return "other"


def _structure(s: LabelledSeries) -> str:
    if len(s.values) < 10:
        return "short (<10 points)"
    return {0: "no step", 1: "one step"}.get(len(s.changes), "several steps")


def _truncated(s: LabelledSeries, k: int) -> LabelledSeries:
    return dataclasses.replace(
        s, values=s.values[:k],
        ci_low=s.ci_low[:k] if s.ci_low is not None else None,
        ci_high=s.ci_high[:k] if s.ci_high is not None else None)


def _delay(det: Detector, s: LabelledSeries, label: LabelledChange) -> int | None:
    for k in range(label.index + 1, len(s.values) + 1):
        if match([label], det(_truncated(s, k))).matched:
            return k - label.index - 1
    return None


def evaluate(det: Detector, corpus: Sequence[LabelledSeries], delay_series: int) -> Results:
    res = Results()
    t0 = time.perf_counter()
    found = [det(s) for s in corpus]
    res.seconds = time.perf_counter() - t0
    for i, (s, dets) in enumerate(zip(corpus, found, strict=True)):
        m = match(s.changes, dets, TOLERANCE)
        series_groups = ["all", f"kind:{s.kind}", f"shape:{s.shape}",
                         f"kind-shape:{s.kind}:{s.shape}", f"structure:{_structure(s)}",
                         f"kind-structure:{s.kind}:{_structure(s)}"]
        for key in series_groups:
            t = res.groups[key]
            t.tp += len(m.matched)
            t.fn += len(m.missed)
            t.fp += len(m.false)
        for lab, hit in [(lab, True) for lab, _ in m.matched] + [(lab, False) for lab in m.missed]:
            way = "drop" if lab.magnitude < 0 else "rise"
            for key in (f"{way}:{_size_key(lab.magnitude)}",
                        f"kind-{way}:{s.kind}:{_size_key(lab.magnitude)}"):
                t = res.groups[key]
                t.tp += hit
                t.fn += not hit
        if not s.changes:
            for key in ("all", f"kind:{s.kind}", f"shape:{s.shape}"):
                res.unchanged[key][0] += 1
                res.unchanged[key][1] += bool(m.false)
        if i < delay_series:
            for lab, _ in m.matched:
                d = _delay(det, s, lab)
                if d is not None:
                    res.overall.delays.append(d)
    res.overall.tp, res.overall.fn, res.overall.fp = (
        res.groups["all"].tp, res.groups["all"].fn, res.groups["all"].fp)
    return res


def _f(x: float, digits: int = 3) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def _flagged(r: Results, key: str = "all") -> str:
    total, flagged = r.unchanged[key]
    return f"{flagged}/{total} ({100 * flagged / total:.1f}%)" if total else "-"


def _delay_str(t: Tally) -> str:
    return f"{np.mean(t.delays):.1f}" if t.delays else "-"


def _recall_cell(t: Tally) -> str:
    return f"{_f(t.recall, 2)} ({t.tp}/{t.tp + t.fn})" if t.tp + t.fn else "-"


def _prf(t: Tally) -> str:
    return f"{_f(t.precision, 2)} / {_f(t.recall, 2)} / {_f(t.f1, 2)}"


def overall_table(results: dict[str, Results], drift_key: str) -> list[str]:
    lines = [
        "| detector | precision | recall | F1 | unchanged series flagged | drift-only flagged "
        "| mean delay (points) | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        o = r.overall
        lines.append(f"| {name} | {_f(o.precision)} | {_f(o.recall)} | {_f(o.f1)} | "
                     f"{_flagged(r)} | {_flagged(r, drift_key)} | {_delay_str(o)} | "
                     f"{r.seconds:.1f} |")
    return lines


def widened_report(results: dict[str, Results]) -> list[str]:
    sizes = [f"{s * 100:g}%" for s in STEP_SIZES]
    lines = overall_table(results, "shape:drift")
    for kind, label in (("gpu", "tight intervals (gpu, half-width 0.05-0.5%)"),
                        ("cpu", "wide intervals (cpu, half-width 2-5%)")):
        lines += ["", f"Series with {label}: precision / recall / F1, unchanged series "
                  "flagged, and recall of drops by size (found/labelled):", "",
                  "| detector | P / R / F1 | unchanged flagged | "
                  + " | ".join(f"drops {s}" for s in sizes) + " |",
                  "|---" * (len(sizes) + 3) + "|"]
        for name, r in results.items():
            cells = [_recall_cell(r.groups[f"kind-drop:{kind}:{s}"]) for s in sizes]
            lines.append(f"| {name} | {_prf(r.groups[f'kind:{kind}'])} | "
                         f"{_flagged(r, f'kind:{kind}')} | " + " | ".join(cells) + " |")
    lines += ["", "Recall of rises by size, all series:", "",
              "| detector | " + " | ".join(f"rises {s}" for s in sizes) + " |",
              "|---" * (len(sizes) + 1) + "|"]
    for name, r in results.items():
        lines.append(f"| {name} | "
                     + " | ".join(_recall_cell(r.groups[f"rise:{s}"]) for s in sizes) + " |")
    lines += ["", "Precision / recall / F1 by noise shape (unchanged series flagged):", "",
              "| detector | " + " | ".join(SHAPES) + " |", "|---" * (len(SHAPES) + 1) + "|"]
    for name, r in results.items():
        cells = [f"{_prf(r.groups[f'shape:{k}'])} ({_flagged(r, f'shape:{k}')})"
                 for k in SHAPES]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    structures = ["short (<10 points)", "one step", "several steps"]
    lines += ["", "Precision / recall / F1 by structure:", "",
              "| detector | " + " | ".join(structures) + " |",
              "|---" * (len(structures) + 1) + "|"]
    for name, r in results.items():
        cells = [_prf(r.groups[f"structure:{k}"]) for k in structures]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def targets(results: dict[str, Results]) -> list[str]:
    lines = ["| detector | F1 | F1, tight intervals | recall 3% drops, tight | "
             "recall 2% drops, tight | unchanged flagged |", "|---|---|---|---|---|---|"]
    for name in ("speedwatch", "speedwatch-values", "today"):
        if name not in results:
            continue
        r = results[name]
        lines.append(f"| {name} | {_f(r.overall.f1)} | {_f(r.groups['kind:gpu'].f1)} | "
                     f"{_recall_cell(r.groups['kind-drop:gpu:3%'])} | "
                     f"{_recall_cell(r.groups['kind-drop:gpu:2%'])} | {_flagged(r)} |")
    lines += ["", "Targets (issue 16): F1 >= 0.92; for tight intervals (half-width <= 0.5%) "
              "recall >= 0.85 for 3% drops and >= 0.6 for 2% drops; unchanged series flagged "
              "<= 2%; without intervals no worse than today."]
    return lines


def legacy_report(results: dict[str, Results]) -> list[str]:
    buckets = [f"{lo * 100:g}-{hi * 100:g}%" for lo, hi in MAGNITUDE_BUCKETS]
    lines = overall_table(results, "shape:drift")
    lines += ["", "Recall by step magnitude (drops and rises):", "",
              "| detector | " + " | ".join(buckets) + " |", "|---" * (len(buckets) + 1) + "|"]
    for name, r in results.items():
        cells = []
        for b in buckets:
            t = Tally(tp=r.groups[f"drop:{b}"].tp + r.groups[f"rise:{b}"].tp,
                      fn=r.groups[f"drop:{b}"].fn + r.groups[f"rise:{b}"].fn)
            cells.append(_recall_cell(t))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", "Precision / recall / F1 by noise shape:", "",
              "| detector | " + " | ".join(LEGACY_SHAPES) + " |",
              "|---" * (len(LEGACY_SHAPES) + 1) + "|"]
    for name, r in results.items():
        lines.append(f"| {name} | "
                     + " | ".join(_prf(r.groups[f"shape:{k}"]) for k in LEGACY_SHAPES) + " |")
    return lines


def timing(repeats: int, seed: int) -> list[str]:
    """detect_change_points on 10k-point series: median and worst of `repeats` calls."""
    rng = np.random.default_rng(seed)
    n = 10_000
    lines = ["| 10k-point series | intervals | median ms | worst ms | change points |",
             "|---|---|---|---|---|"]
    for shape in ("steady", "10 steps", "10 steps + drift", "autocorrelated + 10 steps"):
        level = np.full(n, 2.0)
        if shape != "steady":
            for idx in rng.choice(np.arange(100, n - 100), 10, replace=False):
                level[idx:] *= 1 + float(rng.choice([-1, 1]) * rng.choice([0.02, 0.05, 0.1]))
        if "drift" in shape:
            level *= 1 + 0.05 * np.arange(n) / n
        noise = rng.standard_normal(n)
        if "autocorrelated" in shape:
            for i in range(1, n):
                noise[i] = 0.6 * noise[i - 1] + 0.8 * noise[i]
        half = 0.002 * np.exp(0.3 * rng.standard_normal(n))
        values = level * np.exp(0.004 * noise + half / 2.5 * rng.standard_normal(n))
        for with_ci in (True, False):
            kw = ({"ci_low": values * np.exp(-half), "ci_high": values * np.exp(half)}
                  if with_ci else {})
            found = detect_change_points(values, **kw)  # type: ignore[arg-type]
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                detect_change_points(values, **kw)  # type: ignore[arg-type]
                times.append(time.perf_counter() - t0)
            lines.append(f"| {shape} | {'yes' if with_ci else 'no'} | "
                         f"{1000 * float(np.median(times)):.1f} | {1000 * max(times):.1f} | "
                         f"{len(found)} |")
    return lines


def autocorrelated_null(seed: int, count: int = 400, n: int = 60) -> list[str]:
    """False alarms on AR(1) noise without any step: consecutive runs that share a machine's
    state (1% scatter of coefficient 0.6 or 0.8, 0.2% white noise beside), each point saying
    +-0.4% (its interval sees none of the shared state) or nothing. The corpus's
    autocorrelated shape mixes coefficients 0.3-0.8 with steps; this isolates the null."""
    lines = ["| AR(1) coefficient | series | flagged, with intervals | flagged, values only |",
             "|---|---|---|---|"]
    for coef in (0.6, 0.8):
        rng = np.random.default_rng(seed)
        with_ci = values_only = 0
        for _ in range(count):
            z = rng.standard_normal(n)
            e = np.zeros(n)
            for i in range(1, n):
                e[i] = coef * e[i - 1] + math.sqrt(1 - coef * coef) * z[i]
            v = 2.0 * np.exp(0.01 * e + 0.002 * rng.standard_normal(n))
            with_ci += bool(detect_change_points(v, ci_low=v * 0.996, ci_high=v * 1.004,
                                                 settings=SETTINGS))
            values_only += bool(detect_change_points(v, settings=SETTINGS))
        lines.append(f"| {coef} | {count} | {with_ci} | {values_only} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=2, help="corpus seed (defaults tuned on 1)")
    ap.add_argument("--size", type=int, default=1500, help="number of series per corpus")
    ap.add_argument("--detectors", default="speedwatch,speedwatch-values,today,otava,zscore",
                    help="comma-separated subset")
    ap.add_argument("--today", default=None,
                    help="git revision of 'today' (default: 24f2479, before issue 16)")
    ap.add_argument("--delay-series", type=int, default=200,
                    help="measure the online delay on the first N series of each corpus")
    ap.add_argument("--no-legacy", action="store_true", help="skip the legacy corpus")
    ap.add_argument("--timing", action="store_true",
                    help="only time detect_change_points on 10k-point series")
    ap.add_argument("--autocorrelated", action="store_true",
                    help="only count false alarms on AR(1) noise without steps")
    ap.add_argument("--repeats", type=int, default=20, help="timing repeats per series")
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
    if args.timing:
        print("\n".join(timing(args.repeats, args.seed)))
        return 0
    if args.autocorrelated:
        print("\n".join(autocorrelated_null(args.seed)))
        return 0

    ref = args.today or TODAY
    detectors: dict[str, Detector] = {}
    for name in args.detectors.split(","):
        if name == "speedwatch":
            detectors[name] = speedwatch
        elif name == "speedwatch-values":
            detectors[name] = speedwatch_values
        elif name == "today":
            found = load_today(ref)
            if found is not None:
                detectors[name] = found
        elif name == "otava":
            detectors[name] = otava
        elif name == "zscore":
            detectors[name] = zscore
        else:
            ap.error(f"unknown detector {name!r}")
    changed = {k: v for k, v in dataclasses.asdict(SETTINGS).items()
               if v != getattr(DetectorSettings(), k)}
    print(f"Seed {args.seed}, {args.size} series per corpus; tolerance +-{TOLERANCE} points, "
          f"same direction; today = {ref[:12]}; delay over the first {args.delay_series} "
          f"series; settings overridden: {changed or 'none'}.")
    corpus = generate_corpus(args.seed, args.size)
    results = {name: evaluate(det, corpus, args.delay_series)
               for name, det in detectors.items()}
    print("\n## Widened corpus (speedwatch reads each point's interval)\n")
    print("\n".join(widened_report(results)))
    print("\n## Targets\n")
    print("\n".join(targets(results)))
    if not args.no_legacy:
        legacy = generate_legacy_corpus(args.seed, args.size)
        legacy_results = {name: evaluate(det, legacy, args.delay_series)
                          for name, det in detectors.items() if name != "speedwatch"}
        print("\n## Legacy corpus (values only, the first benchmark's)\n")
        print("\n".join(legacy_report(legacy_results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
