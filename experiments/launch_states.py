"""A stored fleet run's cells again, with their processes told apart by launch state.

`scripts/gpu_fleet.py` stores every process's rounds (the cell's samples, process after
process) and each side's kernels per call. This reads a phase's cells, finds the processes
in the faster kernel-launch state (benchmarks.launch_state.split, as the adaptive
measurement now does after every process), and pools each cell three ways: every process
(as the run did), the slower state's only (as a cell now does), and every process with the
faster ones moved by the split's shift per kernel (a correction, for comparison). Each is
set against the same cell of a reference phase.

`--replay` feeds each cell's stored processes, in the order they ran, to the product's
adaptive measurement (benchmarks.adaptive, on a GPU spec, the reference phase's result as
its baseline, the run's own timing policy), as if they came from its children: how many
processes the rule now in place would have taken, and what it pools. The children's
measurements are the stored ones, so a cell that would have measured on past what the run
stored says so ("ran out").

    python -m experiments.launch_states DIR/data/speedwatch.db --run 2 --against 1
    python -m experiments.launch_states DIR/data/speedwatch.db --run 2 --against 1 --replay

`--flips` sets each process's state (set aside as faster, changed while timing, or slower)
beside what the other GPU's processes did around its capture and timing. A process's phases
say when its timing ran (`timing_window`, the host's monotonic clock) and how long each
phase took, not when it exited: its end is taken as its last phase's end plus EXIT_LAG_S,
its window from CAPTURE_MARGIN_S before its timing window less its capture phase (NVML
readings sit between the capture and the timing) to the timing window's end.

    python -m experiments.launch_states DIR/data/speedwatch.db --run 2 --against 1 --flips
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import statistics
from typing import Any

from benchmarks import stats
from benchmarks.launch_state import UnitTimes, cell_states

Rounds = list[list[float]]
EXIT_LAG_S = 0.37  # the median gap from a process's last phase to the flips it caused
CAPTURE_MARGIN_S = 1.0


def cells(db: sqlite3.Connection, run: int) -> dict[str, dict[str, Any]]:
    """Each cell of `run`: its processes' rounds per side, kernel counts and GPU."""
    out: dict[str, dict[str, Any]] = {}
    rows = db.execute(
        "select s.key, r.baseline_samples_ms, r.candidate_samples_ms, r.evidence, "
        "r.fingerprint from results r join series s on s.id = r.series_id "
        "where r.run_id = ?", (run,))
    for key, base_json, cand_json, ev_json, fp_json in rows:
        base, cand, evidence = json.loads(base_json), json.loads(cand_json), json.loads(ev_json)
        kernels = evidence.get("kernels_per_inference") or {}
        processes, i = [], 0
        for record in evidence.get("processes") or []:
            n = record["rounds"]
            processes.append((base[i:i + n], cand[i:i + n], record))
            i += n
        name = "/".join(key.split("/")[2:5])
        out[name] = {"processes": processes, "kernels": kernels,
                     "gpu": json.loads(fp_json).get("gpu_index")}
    return out


def _median(rounds: Rounds) -> float:
    return statistics.median(x for r in rounds for x in r)


def _pool(processes: list[tuple[Rounds, Rounds]]) -> dict[str, float]:
    s = stats.combine_processes(processes, resamples=2000, seed=0)
    return {"speedup": s.value, "low": s.ci_low, "high": s.ci_high}


def analyse(cell: dict[str, Any]) -> dict[str, Any]:
    kernels = cell["kernels"]
    pairs = [(b, c) for b, c, _ in cell["processes"]]
    units = [UnitTimes(_median(b), _median(c), kernels.get("baseline", 0),
                       kernels.get("candidate", 0)) for b, c in pairs]
    states = cell_states(units, pairs)
    row: dict[str, Any] = {"gpu": cell["gpu"], "processes": len(pairs), "all": _pool(pairs)}
    if states is None:
        row.update(faster=[], changed=[], slower_state=row["all"], corrected=row["all"],
                   shift_us=None)
        return row
    row["faster"] = [j + 1 for j in states.faster]
    row["changed"] = [j + 1 for j in states.changed]
    row["shift_us"] = None if states.shift_us is None else round(states.shift_us, 4)
    row["slower_state"] = _pool([pairs[j] for j in states.pooled])
    moved = []
    shift = states.shift_us or 0.0
    for j, (b, c) in enumerate(pairs):
        if j in states.changed:
            continue  # neither state: no correction makes it one
        if j in states.faster:
            db_, dc = (shift * kernels["baseline"] / 1000, shift * kernels["candidate"] / 1000)
            b = [[x + db_ for x in r] for r in b]
            c = [[x + dc for x in r] for r in c]
        moved.append((b, c))
    row["corrected"] = _pool(moved)
    return row


def _stored_unit(spec_dict: dict[str, Any], key: str, base: Rounds, cand: Rounds,
                 record: dict[str, Any], kernels: dict[str, Any] | None) -> Any:
    from benchmarks.result import BenchResult, Speedup

    evidence: dict[str, Any] = {"timing": {"timing_seconds": record.get("timing_seconds")}}
    if kernels:
        evidence["kernels_per_inference"] = kernels  # only a cell's first process counts
    return BenchResult(
        series_key=key, spec=spec_dict, status="ok", reason=None,
        baseline_samples_ms=base, candidate_samples_ms=cand,
        baseline=stats.summary(base), candidate=stats.summary(cand),
        speedup=Speedup(record["speedup"], record["ci_low"], record["ci_high"]),
        evidence=evidence, fingerprint={})


def replay(db: sqlite3.Connection, run: int, against: int) -> dict[str, dict[str, Any]]:
    """Each cell of `run` through the adaptive measurement again, from its stored units."""
    from dataclasses import replace as dc_replace

    from benchmarks import adaptive
    from benchmarks.spec import BenchSpec

    rows = db.execute(
        "select s.key, c.spec, r.evidence, r.baseline_samples_ms, r.candidate_samples_ms "
        "from results r join series s on s.id = r.series_id join cells c on c.id = r.cell_id "
        "where r.run_id = ?", (run,))
    refs = {"/".join(key.split("/")[2:5]): (value, low, high) for key, value, low, high in
            db.execute("select s.key, r.speedup, r.ci_low, r.ci_high from results r join "
                       "series s on s.id = r.series_id where r.run_id = ?", (against,))}
    out: dict[str, dict[str, Any]] = {}
    real_run_unit = adaptive.run_unit
    try:
        for key, spec_json, ev_json, base_json, cand_json in rows:
            name = "/".join(key.split("/")[2:5])
            evidence = json.loads(ev_json)
            spec_dict = json.loads(spec_json)
            spec = BenchSpec.from_dict(spec_dict)
            base, cand, i, units = json.loads(base_json), json.loads(cand_json), 0, []
            for j, record in enumerate(evidence["processes"]):
                n = record["rounds"]
                units.append(_stored_unit(spec_dict, key, base[i:i + n], cand[i:i + n], record,
                                          evidence.get("kernels_per_inference") if j == 0
                                          else None))
                i += n
            feed = iter(units)
            ran_out: list[bool] = []

            def run_unit(*_a: Any, feed: Any = feed, ran_out: list[bool] = ran_out,
                         **_k: Any) -> Any:
                try:
                    return next(feed)
                except StopIteration:
                    ran_out.append(True)
                    raise RuntimeError("ran out of stored units") from None
            adaptive.run_unit = run_unit
            value, low, high = refs[name]
            reference = stats.Reference(
                threshold=(evidence["adaptive"].get("threshold") or 0.03), speedup=value,
                log_half=(math.log(high) - math.log(low)) / 2)
            def reference_for(_r: Any, ref: stats.Reference = reference) -> stats.Reference:
                return ref
            measurement = adaptive.AdaptiveMeasurement(
                dc_replace(spec, device="cuda"), reference_for=reference_for, timeout_s=1.0)
            try:
                while not measurement.done:
                    measurement.step()
                result = measurement.result()
                states = result.evidence.get("launch_states") or {}
                out[name] = {"stored": len(units), "processes": result.evidence["adaptive"]
                             ["processes"], "stopped_by": result.evidence["adaptive"]
                             ["stopped_by"], "set_aside": states.get("set_aside", []),
                             "speedup": result.speedup.value if result.speedup else None,
                             "ran_out": False}
            except RuntimeError:
                out[name] = {"stored": len(units), "processes": len(units), "ran_out": True}
    finally:
        adaptive.run_unit = real_run_unit
    return out


def flips(db: sqlite3.Connection, run: int) -> dict[str, int]:
    """Processes by state, and whether another GPU's process ended, or made its context,
    inside their window (the module docstring)."""
    procs = []
    for cell in cells(db, run).values():
        kernels = cell["kernels"]
        counts = (kernels.get("baseline", 0), kernels.get("candidate", 0))
        pairs = [(b, c) for b, c, _ in cell["processes"]]
        states = cell_states([UnitTimes(_median(b), _median(c), *counts) for b, c in pairs],
                             pairs)
        for j, (_b, _c, record) in enumerate(cell["processes"]):
            ph, window = record.get("phases") or {}, record["timing_window"]
            start = window[0] - sum(ph.get(k, 0.0) for k in
                                    ("start", "identity", "model", "compile", "capture"))
            state = ("changed while timing" if states and j in states.changed
                     else "faster" if states and j in states.faster else "slower")
            procs.append({
                "gpu": cell["gpu"], "state": state,
                "from": window[0] - ph.get("capture", 0.0) - CAPTURE_MARGIN_S, "to": window[1],
                "context": start + sum(ph.get(k, 0.0) for k in ("start", "identity", "model")),
                # an end that waited at the launch gate came that much later (exit_gate)
                "end": window[1] + sum(ph.get(k, 0.0) for k in ("profile", "kernels",
                                                                "evidence", "exit_gate"))
                + EXIT_LAG_S})
    table: dict[str, int] = {}
    for p in procs:
        others = [q for q in procs if q["gpu"] != p["gpu"]]
        ended = any(p["from"] <= q["end"] <= p["to"] for q in others)
        made = any(p["from"] <= q["context"] <= p["to"] for q in others)
        key = (f"{p['state']} | {'yes' if ended else 'no'} | {'yes' if made else 'no'}")
        table[key] = table.get(key, 0) + 1
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--run", type=int, required=True, help="the phase's run id")
    parser.add_argument("--against", type=int, required=True, help="the reference run id")
    parser.add_argument("--json", help="write the rows here too")
    parser.add_argument("--flips", action="store_true",
                        help="each process's state beside the other GPU's processes' ends")
    parser.add_argument("--replay", action="store_true",
                        help="each cell's stored processes through the adaptive rule now")
    args = parser.parse_args()
    db = sqlite3.connect(args.db)
    if args.flips:
        print("| state | another GPU's process ended in its window | made a context in it "
              "| processes |")
        print("| --- | --- | --- | ---: |")
        for key, count in sorted(flips(db, args.run).items()):
            print(f"| {key} | {count} |")
        return
    if args.replay:
        replayed = replay(db, args.run, args.against)
        print("| cell | processes stored | processes now | stopped by | set aside |")
        print("| --- | ---: | ---: | --- | --- |")
        for name in sorted(replayed):
            r = replayed[name]
            print(f"| {name} | {r['stored']} | "
                  f"{'more than stored' if r['ran_out'] else r['processes']} | "
                  f"{r.get('stopped_by', '-')} | "
                  f"{','.join(map(str, r.get('set_aside') or [])) or '-'} |")
        now = sum(r["stored"] + 1 if r["ran_out"] else r["processes"]
                  for r in replayed.values())
        print(f"\nprocesses: {sum(r['stored'] for r in replayed.values())} stored; now at "
              f"least {now} (a cell that ran out of stored processes counted at one more "
              f"than it stored; {sum(r['ran_out'] for r in replayed.values())} did)")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump(replayed, f, indent=1)
        return
    mine, reference = cells(db, args.run), cells(db, args.against)
    report = {}
    print("| cell | GPU (ref) | faster; changed while timing / processes | shift us | reference "
          "| every process | as a cell now pools (slower state) | faster ones corrected |")
    print("| --- | --- | --- | ---: | --- | --- | --- | --- |")
    for name in sorted(mine):
        row = analyse(mine[name])
        ref = _pool([(b, c) for b, c, _ in reference[name]["processes"]])
        row["reference"] = ref
        report[name] = row

        def show(v: dict[str, float], ref: dict[str, float] = ref) -> str:
            overlap = v["low"] <= ref["high"] and ref["low"] <= v["high"]
            return (f"{v['speedup']:.4f} [{v['low']:.4f}, {v['high']:.4f}] "
                    f"{100 * (v['speedup'] / ref['speedup'] - 1):+.2f}%{'' if overlap else ' *'}")
        print(f"| {name} | {row['gpu']} ({reference[name]['gpu']}) | "
              f"{','.join(map(str, row['faster'])) or '-'}; "
              f"{','.join(map(str, row['changed'])) or '-'} / {row['processes']} | "
              f"{row['shift_us'] or '-'} | {ref['speedup']:.4f} [{ref['low']:.4f}, "
              f"{ref['high']:.4f}] | {show(row['all'])} | {show(row['slower_state'])} | "
              f"{show(row['corrected'])} |")
    print("\n(* : the interval does not overlap the reference's)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
