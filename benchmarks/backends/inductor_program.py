"""A frozen inductor build kept as the program inductor generated, and loaded as it is.

With constant weights (inductor's freezing) a process that loads a build from inductor's
own caches still traces the model, runs AOTAutograd and freezes the weights again, because
inductor does not cache a frozen graph's AOTAutograd stage: on an H200 a loaded frozen
ResNet50 took 8-14 s, against 2-3 s with tensor weights (experiments/frozen_load_probe.py).
What a frozen build ends in is one generated Python module (its `call` runs the kernels)
and the folded constants it reads. Kept, they are all a later process needs: it imports the
module with the constants set, its kernels compiled from the build's Triton cache (loaded
beside it), and calls it, with no tracing at all.

Only the parts of a build that the module alone describes are kept: one graph (no graph
breaks), static shapes, no CUDA graphs of inductor's own, one tensor out, constants that
are plain tensors (not weights packed for oneDNN on a CPU). The building process loads its
kept program back as a later process would and keeps it only when it gives the build's
output bit for bit; the loading process checks the device, and the build cache checks the
fingerprint (the program's kernels and launch configs) as for every other load.

It reads the generated module's conventions (`call(args)`, constants declared as
`name = None  # ...` and set as module attributes by `PyCodeCache.load_by_key_path`),
which are inductor's, not a public API: anything unexpected on load is a refusal with the
reason, and the process then loads the build through inductor's caches as before.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import ModuleType

    import torch

PROGRAM_FILE = "inductor-frozen-program.pt"
# Off by default: see enabled().
SETTING_ENV = "SPEEDWATCH_INDUCTOR_PROGRAMS"
FORMAT = 1
# A constant of the generated module: declared in its header, set when it is loaded.
_CONSTANT = re.compile(r"^(\w+) = None  # ", re.MULTILINE)


def enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether frozen builds are kept and loaded as their programs: "1" yes, "0" (the
    default) no. Off by default because a loaded program times a little differently from
    a fresh compile, though it runs the same kernels: on an H200 (ResNet50 fp16, constant
    weights, 2026-11-29) processes that loaded it timed the candidate 0.4% slower at
    batch 1 and 0.2-0.3% faster at batch 32 than processes that compiled afresh, each kind
    tight among its own (memory placement: in one process, the same module with its
    constants copied elsewhere timed up to 0.3% apart; experiments/program_level_probe.py).
    A loaded build that re-runs freezing, the default, lands where a fresh compile does.
    A bad value is an error naming the variable."""
    value = (environ if environ is not None else os.environ).get(SETTING_ENV, "0").strip()
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise ValueError(f"{SETTING_ENV}={value!r}: expected 0 or 1")


class ProgramRefused(RuntimeError):
    """A kept program this process cannot use (another device, another format, a module
    that no longer imports, a first call that fails): the reason, for the evidence."""


def why_not_kept(*, freezing: bool, dynamic: bool, uses_cudagraphs: bool,
                 graph_breaks: int, graphs: int) -> str | None:
    """Why a build's program alone cannot stand for it, or None when it can."""
    if not freezing:
        return "the weights are graph inputs (tensor weights): inductor's caches load it"
    if dynamic:
        return "dynamic shapes: dynamo's guards pick the graph"
    if uses_cudagraphs:
        return "inductor's own CUDA graphs wrap the program"
    if graph_breaks or graphs != 1:
        return f"{graphs} graphs and {graph_breaks} graph breaks: dynamo's code joins them"
    return None


def capture(run: Callable[[torch.Tensor], torch.Tensor], example: torch.Tensor,
            evidence: dict[str, Any]) -> tuple[bytes | None, str | None]:
    """The kept program of this process's one compiled graph (as bytes), or None with why
    not. `run` is the compiled model: its output is what the program must give back."""
    import torch

    try:
        module = _graph_module()
        source = _source(module)
        constants = _constants(module, source)
        with torch.inference_mode():
            want = run(example)
        buffer = io.BytesIO()
        torch.save({"format": FORMAT, "torch": str(torch.__version__),
                    "device": str(example.device), "source": source, "constants": constants,
                    "evidence": {k: evidence[k] for k in _CARRIED if k in evidence}}, buffer)
        blob = buffer.getvalue()
        # its kernels are compiled already: compiled again here in this process, never by
        # compile workers started again beside the timing
        with torch._inductor.config.patch(compile_threads=1):
            got = _loaded(blob, example, register=False)[0](example)
    except ProgramRefused as exc:
        return None, str(exc)
    except Exception as exc:  # a record of the build, never a reason to lose it
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if not (isinstance(want, torch.Tensor) and got.shape == want.shape
            and torch.equal(got, want)):
        return None, "loaded back, the program's output is not the build's bit for bit"
    return blob, None


def load(blob: bytes, example: torch.Tensor) -> tuple[Callable[[torch.Tensor], torch.Tensor],
                                                      dict[str, Any]]:
    """The kept program as a callable, with the build's evidence; ProgramRefused when it
    cannot be used here."""
    return _loaded(blob, example, register=True)


# the build's own record, carried so a loaded program reports the build it is
_CARRIED = ("inductor_kernels", "graph_breaks", "graph_break_reasons", "dynamo_graphs",
            "freezing", "mode", "dynamic", "batch1_specialized")


def _loaded(blob: bytes, example: torch.Tensor, *, register: bool,
            ) -> tuple[Callable[[torch.Tensor], torch.Tensor], dict[str, Any]]:
    import torch
    from torch._inductor.codecache import PyCodeCache

    try:
        kept = torch.load(io.BytesIO(blob), map_location=example.device, weights_only=True)
    except Exception as exc:
        raise ProgramRefused(f"the kept program does not load: {type(exc).__name__}") from exc
    if not isinstance(kept, dict) or kept.get("format") != FORMAT:
        raise ProgramRefused("the kept program is of another format")
    if kept.get("device") != str(example.device):
        raise ProgramRefused(f"the program was built for {kept.get('device')}, "
                             f"this process runs on {example.device}")
    key, path = PyCodeCache.write(kept["source"])
    try:
        module = PyCodeCache.load_by_key_path(key, path, attrs=kept["constants"])
    except Exception as exc:
        raise ProgramRefused(f"the kept program does not import: {type(exc).__name__}: "
                             f"{exc}".splitlines()[0][:300]) from exc
    if not register:  # only the build's own module describes the build (benchmarks.build)
        for i, loaded in enumerate(PyCodeCache.modules):
            if loaded is module:
                del PyCodeCache.modules[i]
                break
    call = module.call

    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            out = call([x])
        if len(out) != 1:
            raise ProgramRefused(f"the program gives {len(out)} outputs, not one")
        return out[0]

    return run, dict(kept.get("evidence") or {})


def _graph_module() -> ModuleType:
    """The one generated module with a `call`: the graph's program (the others are its
    kernels)."""
    from torch._inductor.codecache import PyCodeCache

    modules = PyCodeCache.modules
    found = {id(m): m for m in (modules.values() if isinstance(modules, dict) else modules)
             if callable(getattr(m, "call", None))}
    if len(found) != 1:
        raise ProgramRefused(f"{len(found)} generated programs in this process, not one")
    return next(iter(found.values()))


def _source(module: ModuleType) -> str:
    with open(str(module.__file__), encoding="utf-8") as f:
        return f.read()


def _constants(module: ModuleType, source: str) -> dict[str, torch.Tensor]:
    """The constants the module's header declares, as the build set them: plain tensors
    only (a oneDNN-packed weight has no storage to keep)."""
    import torch

    names = _CONSTANT.findall(source)
    out: dict[str, torch.Tensor] = {}
    for name in names:
        value = getattr(module, name, None)
        if not isinstance(value, torch.Tensor):
            raise ProgramRefused(f"constant {name} is a {type(value).__name__}, not a tensor")
        if value.layout != torch.strided or value.is_mkldnn or _opaque(value):
            raise ProgramRefused(f"constant {name} is a packed weight with no storage to keep")
        out[name] = value
    return out


def _opaque(value: torch.Tensor) -> bool:
    try:
        value.untyped_storage()
    except (NotImplementedError, RuntimeError):
        return True
    return False
