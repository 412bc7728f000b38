set -u
rm -rf ~/.cache/speedwatch /tmp/torchinductor_*
timeout 540 bash scripts/gpu_run python3 -m experiments.program_level_probe --out $OUT/plp --device cuda > $OUT/plp.log 2>&1
echo "rc=$?"
python3 - $OUT/plp/probe.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    if "error" in r:
        print(r["phase"], r["batch"], "ERROR", r["error"][-1500:]); continue
    print(r["phase"], r["batch"], r.get("prepare_s"), r.get("equal_outputs"))
    for k, v in r["timed"].items():
        print("    %-9s %.5f  %+.3f%%" % (k, v["median_ms"], v["vs_first_pct"]))
PY
