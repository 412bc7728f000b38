# Four calls on lent H200s (torch 2.11, CUDA 13); $OUT is the folder that came back.
# host-activity.* (the first two phases), then contexts.*, then context-order.*:
bash scripts/gpu_run python3 -m experiments.host_activity_probe --out $OUT/hap.json
bash scripts/gpu_run python3 -m experiments.host_activity_probe --out $OUT/hap2.json \
    --phases alone,idle-1,stopped-1,idle-4,exited --conditions idle,busy-8 --repeats 3
bash scripts/gpu_run python3 -m experiments.context_order_probe --out $OUT/cop.json
# child-profile/ (the same call as host-activity, after a first attempt of the probe):
rm -rf ~/.cache/speedwatch /tmp/torchinductor_*
bash scripts/gpu_run python3 -m experiments.child_profile --out $OUT/cp --runs 3
# guard/: a process makes a CUDA context 35 s into a two-process bench
(sleep 35; python3 -c "import torch,time; torch.ones(1,device='cuda').add_(1); torch.cuda.synchronize(); print('holder: context made', flush=True); time.sleep(3)") > $OUT/holder.log 2>&1 &
bash scripts/gpu_run python3 -m cli bench --device cuda --model resnet50 --backend inductor \
    --weights tensor --precision fp16 --batch 1 --processes 2 --max-processes 2 --json $OUT/guard.json
# product-path/: the demo and the same software again, caches wiped first
rm -rf ~/.cache/speedwatch /tmp/torchinductor_*
bash scripts/gpu_run python3 scripts/gpu_verdicts.py --out $OUT/gv --threshold 0.005 --skip-custom-op
# kernel-counts/: one process a cell, its profile pass counting the kernels too
rm -rf ~/.cache/speedwatch /tmp/torchinductor_*
bash scripts/gpu_run python3 -m cli bench --device cuda --model resnet50 --backend inductor \
    --weights constant,tensor --precision fp16 --batch 1 --processes 1 --max-processes 1 --json $OUT/kc.json
