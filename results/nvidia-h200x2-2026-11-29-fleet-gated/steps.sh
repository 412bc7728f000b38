# On the lent two-H200 host (nvidia-h200-x2), from a copy of the checkout outside it, with
# .whl/ (scripts/gpu_wheelhouse) and .fleet/ (scripts/fleet_redis) carried; the folder came
# back as one tarball.
cp -r . /tmp/sw && cd /tmp/sw
rm -rf ~/.cache/speedwatch /tmp/torchinductor_*
bash scripts/gpu_run --background /tmp/fleet python3 scripts/gpu_fleet.py --out /tmp/fleet \
    --batches 1,8,32,64 --precisions fp16,bf16 --processes 0 --phases one-gpu,two-gpus
tar czf $OUT/fleet.tgz --exclude='cache-*' --exclude='pipeline-*' -C /tmp fleet

# Here, afterwards (no GPU needed), with the store unpacked to /tmp/fleet/data/speedwatch.db:
python -m experiments.launch_states /tmp/fleet/data/speedwatch.db --run 2 --against 1 --flips > flips.md
python -m experiments.launch_states /tmp/fleet/data/speedwatch.db --run 1 --against 2 --flips > flips-one-worker.md
python -m experiments.launch_states /tmp/fleet/data/speedwatch.db --run 2 --against 1 \
    --json launch-states.json > launch-states.md
# per-process builds: evidence.processes[].build.{source,seconds} of one-gpu.json / two-gpus.json
