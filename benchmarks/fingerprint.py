"""What a result ran on, so mismatched or throttled runs can be told apart.

Everything here degrades to "absent" instead of failing: a fingerprint with a missing field
is worth more than a lost measurement. torch is imported lazily so the parent side of
`benchmarks.isolation` can name a device class without loading it.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from collections.abc import Iterable
from importlib import metadata
from typing import Any

PACKAGES = ("torch", "onnx", "onnxruntime", "onnxruntime-gpu", "tensorrt", "torch_tensorrt",
            "torch-tensorrt", "numpy", "onnxscript", "nvidia-ml-py")

# NVML clock-event (throttle) reason bits that mean the GPU ran slower than it could.
# Idle, application-clock settings and sync boost are not throttling.
_NVML_THROTTLE_BITS = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}

_NAME_NOISE = {"nvidia", "geforce", "tesla", "quadro"}


def device_class_from_gpu_name(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100'; 'NVIDIA GeForce RTX 4090' -> 'nvidia-rtx-4090'.

    One class per GPU model, so memory size or form factor variants of a model share a
    series; the full name stays in the fingerprint.
    """
    tokens = [t for t in re.split(r"[\s_\-]+", name.lower()) if t and t not in _NAME_NOISE]
    if not tokens:
        return "nvidia-unknown"
    if tokens[0] in ("rtx", "gtx") and len(tokens) > 1:
        model = f"{tokens[0]}-{tokens[1]}"
    else:
        model = tokens[0]
    return "nvidia-" + re.sub(r"[^a-z0-9.\-]+", "", model)


def _visible_gpu_index() -> int:
    """NVML ignores CUDA_VISIBLE_DEVICES; map torch's device 0 to the physical index."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def _nvml() -> Any | None:
    try:
        import pynvml  # provided by nvidia-ml-py

        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def collect_nvml(index: int | None = None) -> dict[str, Any] | None:
    """Clocks, temperature, power and throttle reasons now; None without NVML or a GPU."""
    nv = _nvml()
    if nv is None:
        return None
    out: dict[str, Any] = {}
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(_visible_gpu_index() if index is None else index)
    except Exception:
        return None

    def read(key: str, fn: Any, *args: Any, scale: float = 1.0) -> None:
        try:
            value = fn(handle, *args)
            out[key] = value * scale if scale != 1.0 else value
        except Exception:
            pass

    read("sm_clock_mhz", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM)
    read("mem_clock_mhz", nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_MEM)
    read("max_sm_clock_mhz", nv.nvmlDeviceGetMaxClockInfo, nv.NVML_CLOCK_SM)
    read("temperature_c", nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU)
    read("power_w", nv.nvmlDeviceGetPowerUsage, scale=1e-3)
    read("power_limit_w", nv.nvmlDeviceGetEnforcedPowerLimit, scale=1e-3)
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    if reasons_fn is not None:
        try:
            bits = int(reasons_fn(handle))
            out["clock_event_reasons"] = bits
            out["throttle_reasons"] = [k for k, b in _NVML_THROTTLE_BITS.items() if bits & b]
            out["throttled"] = bool(out["throttle_reasons"])
        except Exception:
            pass
    return out


def gpu_processes(index: int | None = None) -> set[int] | None:
    """The processes holding a CUDA context on this process's GPU now, by the PIDs NVML
    gives (the host's, inside a container), this one included; None where NVML cannot
    tell. What a timing needs of them is which appeared after its own context
    (`newer_gpu_processes`)."""
    nv = _nvml()
    if nv is None:
        return None
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(_visible_gpu_index() if index is None else index)
        return {int(p.pid) for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)}
    except Exception:
        return None


def newer_gpu_processes(first: set[int] | None, *later: set[int] | None) -> int | None:
    """How many processes made a CUDA context on the GPU after `first` was read (once the
    measuring process had its own), as seen by the `later` readings; None where no
    reading could tell.

    Measured on an H200: once another process makes a context on the same GPU, a process's
    CUDA-graph replays of eager ResNet50 run 0.12 ms faster (batch 1: 1.011 to 0.893 ms,
    batch 32: 3.613 to 3.495), about 0.35 us less per kernel, and stay so after that
    process ends; processes that held contexts before its own, and what the host's CPUs
    do, change nothing (experiments/host_activity_probe.py, context_order_probe.py)."""
    seen = [r for r in later if r is not None]
    if first is None or not seen:
        return None
    return len(set().union(*seen) - first)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _packages() -> dict[str, str]:
    out: dict[str, str] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def gpu_name() -> str | None:
    """The GPU's marketing name via NVML (no torch needed), or None."""
    nv = _nvml()
    if nv is None:
        return None
    try:
        name = nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(_visible_gpu_index()))
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return None


def visible_gpus(state: bool = False) -> list[dict[str, Any]]:
    """The GPUs this process may use (CUDA_VISIBLE_DEVICES honoured), as a worker announces
    them: index, name, device class, memory; with `state`, also how busy each is now
    (utilization, memory used, temperature, compute processes). [] without NVML or a GPU."""
    nv = _nvml()
    if nv is None:
        return []
    try:
        count = int(nv.nvmlDeviceGetCount())
    except Exception:
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        indices = [int(i) for i in visible.split(",") if i.strip().isdigit()]
    else:
        indices = list(range(count))
    gpus: list[dict[str, Any]] = []
    for index in indices:
        if index >= count:
            continue
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
            raw = nv.nvmlDeviceGetName(handle)
            name = raw.decode() if isinstance(raw, bytes) else str(raw)
            memory = int(nv.nvmlDeviceGetMemoryInfo(handle).total)
        except Exception:
            continue
        gpu: dict[str, Any] = {"index": index, "name": name,
                               "device_class": device_class_from_gpu_name(name),
                               "memory_total_bytes": memory}
        if state:
            gpu.update(_gpu_state(nv, handle))
        gpus.append(gpu)
    return gpus


def gpu_cpu_affinity(indices: Iterable[int]) -> dict[int, list[int]]:
    """The cores NVML names as near each GPU (nvmlDeviceGetCpuAffinity), by physical
    index; {} without NVML. `speedwatch worker --gpus` shares them out (workers.fleet)."""
    nv = _nvml()
    if nv is None:
        return {}
    words = max(1, -(-(os.cpu_count() or 64) // 64))
    out: dict[int, list[int]] = {}
    for index in indices:
        try:
            masks = nv.nvmlDeviceGetCpuAffinity(nv.nvmlDeviceGetHandleByIndex(index), words)
        except Exception:
            continue
        out[index] = [w * 64 + bit for w, mask in enumerate(masks) for bit in range(64)
                      if int(mask) >> bit & 1]
    return out


def _gpu_state(nv: Any, handle: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        out["utilization_pct"] = int(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
        out["memory_used_bytes"] = int(nv.nvmlDeviceGetMemoryInfo(handle).used)
        out["temperature_c"] = int(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
        out["processes"] = len(nv.nvmlDeviceGetComputeRunningProcesses(handle))
    except Exception:
        pass
    return out


def device_class(device: str) -> str:
    """'cpu', or the GPU's class; 'cuda' when the GPU cannot be named (no NVML)."""
    if device != "cuda":
        return "cpu"
    if "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            return device_class_from_gpu_name(torch.cuda.get_device_name(0))
    name = gpu_name()
    return device_class_from_gpu_name(name) if name else "cuda"


def collect(device: str) -> dict[str, Any]:
    """The fingerprint of this process's environment for a run on `device`."""
    fp: dict[str, Any] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "hostname": platform.node(),
        "packages": _packages(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "device": device,
    }
    try:
        import torch

        fp["torch_threads"] = torch.get_num_threads()
        fp["cuda"] = torch.version.cuda
        fp["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() \
            else None
        if device == "cuda" and torch.cuda.is_available():
            fp["gpu"] = torch.cuda.get_device_name(0)
            cap = torch.cuda.get_device_capability(0)
            fp["compute_capability"] = f"{cap[0]}.{cap[1]}"
            fp["gpu_memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
    except Exception as exc:  # a broken torch install is worth recording, not raising
        fp["torch_error"] = f"{type(exc).__name__}: {exc}"
    if device == "cuda":
        nv = _nvml()
        if nv is not None:
            try:
                driver = nv.nvmlSystemGetDriverVersion()
                fp["driver"] = driver.decode() if isinstance(driver, bytes) else str(driver)
            except Exception:
                pass
        # which of the host's GPUs (NVML's order): two devices of one class side by side
        fp["gpu_index"] = _visible_gpu_index()
        if "gpu" not in fp:
            name = gpu_name()
            if name:
                fp["gpu"] = name
        fp["device_class"] = device_class_from_gpu_name(fp["gpu"]) if fp.get("gpu") else "cuda"
    else:
        fp["device_class"] = "cpu"
    return fp


def finish(fp: dict[str, Any], nvml_start: dict[str, Any] | None,
           nvml_end: dict[str, Any] | None) -> dict[str, Any]:
    """Attach NVML readings taken around timing and derive the `throttled` flag."""
    if nvml_start is not None:
        fp["nvml_start"] = nvml_start
    if nvml_end is not None:
        fp["nvml_end"] = nvml_end
    readings = [r for r in (nvml_start, nvml_end) if r is not None]
    if readings:
        fp["throttled"] = any(r.get("throttled", False) for r in readings)
    return fp
