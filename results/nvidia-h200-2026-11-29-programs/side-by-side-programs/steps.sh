set -u
export SPEEDWATCH_INDUCTOR_PROGRAMS=1  # kept and loaded by default when this ran; opt-in since
rm -rf ~/.cache/speedwatch /tmp/torchinductor_*
mkdir -p $OUT/sbs
step() {  # name cache batch procs
  local t0=$(date +%s)
  SPEEDWATCH_BUILD_CACHE_DIR=$2 timeout 200 bash scripts/gpu_run python3 -m cli bench --device cuda --model resnet50 --backend inductor --weights constant --precision fp16 --batch $3 --processes $4 --max-processes $4 --json $OUT/sbs/$1.json > $OUT/sbs/$1.log 2>&1
  echo "== $1 cache=$2 bs=$3 rc=$? wall=$(( $(date +%s) - t0 ))s"
  python3 - $OUT/sbs/$1.json <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1])); rs = d if isinstance(d, list) else d.get("results", [d])
    for r in rs:
        s = r.get("speedup") or {}
        print("  cell %.4f [%.4f, %.4f]" % (s.get("value", 0), s.get("ci_low", 0), s.get("ci_high", 0)))
        for p in r.get("evidence", {}).get("processes", []):
            b = p.get("build") or {}
            print("   %-6s %-7s %6.2fs  %.4f  base %.5f cand %.5f  %s" % (b.get("source"), b.get("via"), b.get("seconds") or 0, p["speedup"], p["baseline_median_ms"], p["candidate_median_ms"], p.get("build_fingerprint")))
except Exception as e:
    print("summary failed", e)
PY
}
step a1-fresh off 1 3
step b1-loaded $HOME/.cache/speedwatch/builds 1 4
step a2-fresh off 1 3
step b2-loaded $HOME/.cache/speedwatch/builds 1 4
step c1-fresh off 32 3
step d1-loaded $HOME/.cache/speedwatch/builds 32 4
