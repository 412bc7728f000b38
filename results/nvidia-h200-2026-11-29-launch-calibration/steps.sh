# On lent H200s (nvidia-h200), .whl/ carried (scripts/gpu_wheelhouse); $OUT came back.

# torch-contexts.*: a fresh timing process; a torch process makes a context on the GPU and
# ends, twice (the code as committed with this folder)
bash scripts/gpu_run python3 -m experiments.launch_calibration_probe --out $OUT/lcp/lcp.json --repeats 3

# driver-helper.*: the same, the first context made by benchmarks.launch_pin's driver-API helper
bash scripts/gpu_run python3 -m experiments.launch_calibration_probe --out $OUT/lcp/lcp-driver.json \
    --repeats 2 --first driver

# pin-alone.log: benchmarks.launch_pin.pin twice in a fresh process with no other graph, twice
for i in 1 2; do bash scripts/gpu_run python3 -c "
import time, torch, json
torch.ones(1, device='cuda').add_(1); torch.cuda.synchronize()
from benchmarks import launch_pin
a=launch_pin.pin(0); b=launch_pin.pin(0)
print(json.dumps({'first': a, 'second': b}))"; done

# bench-pin/: one cell, three processes, with the pin run BEFORE the graph capture (the code
# then, on by default at that moment), then without it; a torch process made a context
# 35 s in (holder.log) and fell outside every process's timing (gpu_processes.newer 0)
rm -rf ~/.cache/speedwatch /tmp/torchinductor_*
(sleep 35; python3 -c "import torch,time; torch.ones(1,device='cuda').add_(1); torch.cuda.synchronize(); print('holder: context made', flush=True); time.sleep(3)") > $OUT/pin/holder.log 2>&1 &
bash scripts/gpu_run python3 -m cli bench --device cuda --model resnet50 --backend inductor \
    --weights tensor --precision fp16 --batch 1 --processes 3 --max-processes 3 --json $OUT/pin/pinned.json
SPEEDWATCH_LAUNCH_PIN=off bash scripts/gpu_run python3 -m cli bench --device cuda --model resnet50 \
    --backend inductor --weights tensor --precision fp16 --batch 1 --processes 3 --max-processes 3 \
    --json $OUT/pin/unpinned.json
