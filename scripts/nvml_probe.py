"""Record what NVML answers on a GPU host, for the fleet's tests: devices, and the compute
processes it lists while a child of this script holds a CUDA context (are NVML's pids the
ones this process tree sees, or a PID namespace's outside view?).

Usage (on the GPU machine): python3 scripts/nvml_probe.py OUT.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pynvml

CHILD = ("import torch, time; x = torch.randn(4096, 4096, device='cuda'); "
         "[x @ x for _ in range(200)]; torch.cuda.synchronize(); print('ready', flush=True); "
         "time.sleep(6)")


def device(handle: object) -> dict[str, object]:
    name = pynvml.nvmlDeviceGetName(handle)
    util = pynvml.nvmlDeviceGetUtilizationRates(handle)
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return {"name": name.decode() if isinstance(name, bytes) else name,
            "memory_total": int(memory.total), "memory_used": int(memory.used),
            "utilization_gpu": int(util.gpu),
            "processes": [{"pid": int(p.pid), "used_gpu_memory": p.usedGpuMemory}
                          for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]}


def main() -> None:
    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    idle = [device(h) for h in handles]
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    child.stdout.readline()
    busy = [device(h) for h in handles]
    time.sleep(1.0)
    busy_later = [device(h) for h in handles]
    child.wait()
    out = {"driver": pynvml.nvmlSystemGetDriverVersion(), "count": count,
           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
           "probe_pid": os.getpid(), "child_pid": child.pid,
           "idle": idle, "child_running": busy, "child_running_1s_later": busy_later}
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=2, default=str)
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
