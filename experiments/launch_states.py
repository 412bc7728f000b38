"""A stored fleet run's cells again, with their processes told apart by launch state.

`scripts/gpu_fleet.py` stores every process's rounds (the cell's samples, process after
process) and each side's kernels per call. This reads a phase's cells, finds the processes
in the faster kernel-launch state (benchmarks.launch_state.split, as the adaptive
measurement now does after every process), and pools each cell three ways: every process
(as the run did), the slower state's only (as a cell now does), and every process with the
faster ones moved by the split's shift per kernel (a correction, for comparison). Each is
set against the same cell of a reference phase.

    python -m experiments.launch_states DIR/data/speedwatch.db --run 2 --against 1
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
from typing import Any

from benchmarks import stats
from benchmarks.launch_state import UnitTimes, split

Rounds = list[list[float]]


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
    found = split(units)
    row: dict[str, Any] = {"gpu": cell["gpu"], "processes": len(pairs), "all": _pool(pairs)}
    if found is None:
        row.update(faster=[], slower_state=row["all"], corrected=row["all"], shift_us=None)
        return row
    row["faster"] = [j + 1 for j in found.faster]
    row["shift_us"] = round(found.shift_us, 4)
    row["slower_state"] = _pool([pairs[j] for j in found.slower])
    moved = []
    for j, (b, c) in enumerate(pairs):
        if j in found.faster:
            db_, dc = (found.shift_us * kernels["baseline"] / 1000,
                       found.shift_us * kernels["candidate"] / 1000)
            b = [[x + db_ for x in r] for r in b]
            c = [[x + dc for x in r] for r in c]
        moved.append((b, c))
    row["corrected"] = _pool(moved)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db")
    parser.add_argument("--run", type=int, required=True, help="the phase's run id")
    parser.add_argument("--against", type=int, required=True, help="the reference run id")
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args()
    db = sqlite3.connect(args.db)
    mine, reference = cells(db, args.run), cells(db, args.against)
    report = {}
    print("| cell | GPU (ref) | faster / processes | shift us | reference | every process "
          "| slower state | corrected |")
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
              f"{','.join(map(str, row['faster'])) or '-'} / {row['processes']} | "
              f"{row['shift_us'] or '-'} | {ref['speedup']:.4f} [{ref['low']:.4f}, "
              f"{ref['high']:.4f}] | {show(row['all'])} | {show(row['slower_state'])} | "
              f"{show(row['corrected'])} |")
    print("\n(* : the interval does not overlap the reference's)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
