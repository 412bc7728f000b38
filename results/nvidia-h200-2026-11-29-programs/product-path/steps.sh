set -u
export SPEEDWATCH_INDUCTOR_PROGRAMS=1  # kept and loaded by default when this ran; opt-in since
rm -rf ~/.cache/speedwatch /tmp/torchinductor_*
mkdir -p $OUT/bench
t0=$(date +%s)
timeout 170 bash scripts/gpu_run python3 -m cli bench --device cuda --model resnet50 --backend inductor --weights constant --precision fp16 --batch 1 --processes 3 --max-processes 3 --json $OUT/bench/bench.json > $OUT/bench/bench.log 2>&1
echo "bench rc=$? wall=$(( $(date +%s) - t0 ))s"
python3 - <<'PY'
import json, os
try:
    d = json.load(open(os.environ["OUT"] + "/bench/bench.json"))
    rs = d if isinstance(d, list) else d.get("results", [d])
    for r in rs:
        ev = r.get("evidence", {})
        print(r.get("status"), r.get("reason"), r.get("speedup"), ev.get("inductor_program"))
        for p in ev.get("processes", []):
            print("  ", p.get("build"), p.get("build_fingerprint"), (p.get("phases") or {}).get("compile"), (p.get("phases") or {}).get("start"))
except Exception as e:
    print("summary failed", e)
PY
tail -5 $OUT/bench/bench.log
rm -rf ~/.cache/speedwatch /tmp/torchinductor_*
t0=$(date +%s)
timeout 410 bash scripts/gpu_run python3 scripts/gpu_verdicts.py --out $OUT/gv --threshold 0.005 --skip-custom-op > $OUT/gv.log 2>&1
echo "gv rc=$? wall=$(( $(date +%s) - t0 ))s"
tail -30 $OUT/gv.log
