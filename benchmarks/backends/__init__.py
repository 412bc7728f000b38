"""Backend registry; modules import lazily so a missing library only skips its backend."""

from __future__ import annotations

import importlib

from benchmarks.backends.base import Backend, BackendUnavailable, Compiled

_MODULES = {
    "eager": "benchmarks.backends.eager",
    "inductor": "benchmarks.backends.inductor",
    "onnxruntime": "benchmarks.backends.onnxruntime",
    "tensorrt": "benchmarks.backends.tensorrt",
    "torch_tensorrt": "benchmarks.backends.torch_tensorrt",
}


def get_backend(name: str) -> Backend:
    """Each backend module exposes `BACKEND`, an object satisfying `Backend`."""
    if name not in _MODULES:
        raise KeyError(f"unknown backend {name!r}")
    module = importlib.import_module(_MODULES[name])
    backend: Backend = module.BACKEND
    return backend


__all__ = ["Backend", "BackendUnavailable", "Compiled", "get_backend"]
