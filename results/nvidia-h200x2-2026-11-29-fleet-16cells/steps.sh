# On the lent two-H200 host (nvidia-h200-x2), from a copy of the checkout outside it, with
# .whl/ (scripts/gpu_wheelhouse) and .fleet/ (scripts/fleet_redis) carried; $OUT is the
# folder that came back.

# 1. which other processes move a timing process into the faster launch state
bash scripts/gpu_run python3 -m experiments.context_trigger_probe --out $OUT/ctp/ctp.json \
    --seconds 0.7 --blocks 2

# 2. the 16-cell fleet, one worker then two (caches wiped first)
rm -rf ~/.cache/speedwatch /tmp/torchinductor_*
bash scripts/gpu_run --background /tmp/fleet python3 scripts/gpu_fleet.py --out /tmp/fleet \
    --batches 1,8,32,64 --precisions fp16,bf16 --processes 0 --phases one-gpu,two-gpus

# Here, afterwards (no GPU needed):
gunzip -c speedwatch.db.gz > /tmp/fleet/data/speedwatch.db
python3 scripts/gpu_fleet.py --out /tmp/fleet --report                  # summary.md
python -m experiments.launch_states /tmp/fleet/data/speedwatch.db --run 2 --against 1 \
    --json launch-states.json > launch-states.md
gunzip -c ../nvidia-h200x2-2026-11-28-fleet-16cells/speedwatch.db.gz > /tmp/fleet28.db
python -m experiments.launch_states /tmp/fleet28.db --run 2 --against 1 \
    --json launch-states-2026-11-28.json > launch-states-2026-11-28.md
python -m experiments.launch_states /tmp/fleet/data/speedwatch.db --run 2 --against 1 \
    --replay --json replay.json > replay.md
python -m experiments.launch_states /tmp/fleet28.db --run 2 --against 1 \
    --replay --json replay-2026-11-28.json > replay-2026-11-28.md
python -m experiments.launch_states /tmp/fleet/data/speedwatch.db --run 2 --against 1 --flips > flips.md
python -m experiments.launch_states /tmp/fleet28.db --run 2 --against 1 --flips > flips-2026-11-28.md
