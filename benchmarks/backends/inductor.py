"""The inductor backend: torch.compile, with weights frozen into the program or not.

`weights="constant"` turns on inductor's freezing: parameters become constants of the
compiled graph, so inductor can fold Conv+BN, pre-pack weights and propagate constants.
`weights="tensor"` leaves freezing off: parameters stay graph inputs read at every call.

Builds (`spec.timing.builds`, benchmarks.build): inductor makes some choices by timing
candidates on the device (Triton configs of pointwise kernels and of reductions, whether
to pad a matmul), so a fresh compile picks by noise: on an H100, six fresh compiles of a
frozen ResNet50 fp16 at batch 32 chose six different sets of Triton configs and ran 1.437-
1.482 ms (3.1% apart); with pointwise autotuning off, 1.4085-1.4097 ms (0.09%). "pinned"
(the default) turns that timing off for the modes that do not ask for autotuning:
`triton.autotune_pointwise = False` and inductor's own `deterministic` mode (reduction
configs and padding by heuristics, no on-device benchmarking). The max-autotune modes exist
to time candidates; pinned, they keep doing so, but once per host: the parent points
their compile cache at the host's tuning directory (benchmarks.isolation), so later builds
reuse the first one's choices. "as-shipped" leaves inductor's defaults alone.
`build_choices` records the generated kernels' names and the launch config each Triton
kernel's autotuner settled on, so a changed choice changes the build fingerprint.

Dynamo keeps one compile cache per code object, shared by every torch.compile wrapper of
the same module class, so compiling two variants in one process can let the second reuse
(or be confused by) the first. compile() resets dynamo first, and trustworthy comparisons
between variants compile each one in its own process (the runner's isolation mode).
"""

from __future__ import annotations

import contextlib
import gc
import os
import re
import shutil
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import model_ref
from benchmarks.backends import inductor_program
from benchmarks.backends.base import BackendUnavailable, Compiled

if TYPE_CHECKING:
    import torch

    from benchmarks.spec import BenchSpec

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# The modes whose purpose is to time candidates: pinned by a host cache, not switched off.
AUTOTUNE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")


def pin_choices(spec: BenchSpec, mode: str) -> dict[str, Any]:
    """Set inductor's process-wide knobs for the spec's build mode; the knobs set (for the
    evidence). Process-wide on purpose: one spec is measured per process."""
    import torch

    config = torch._inductor.config
    pinned = spec.timing.builds == "pinned" and mode not in AUTOTUNE_MODES
    knobs: dict[str, Any] = {}
    # True is inductor's own default: as shipped, pointwise kernels are autotuned
    config.triton.autotune_pointwise = not pinned
    knobs["triton.autotune_pointwise"] = not pinned
    if pinned and hasattr(config, "deterministic"):
        config.deterministic = True
        knobs["deterministic"] = True
    return knobs


_KERNEL_NAMES = re.compile(r"\b(?:cpp_fused|triton_[a-z]+_fused)\w*")
_EXTERN_CALLS = re.compile(r"\bextern_kernels\.(\w+)\(")


def build_choices() -> dict[str, Any]:
    """What this process's compile chose: the generated kernels by name, the extern calls
    (convolutions, matmuls) by count, and each Triton kernel's launch config as its
    autotuner left it (after the first call, which is when it autotunes)."""
    from torch._inductor.codecache import PyCodeCache

    kernels: set[str] = set()
    externs: Counter[str] = Counter()
    modules = PyCodeCache.modules
    for module in list(modules.values() if isinstance(modules, dict) else modules):
        try:
            source = Path(str(module.__file__)).read_text(encoding="utf-8")
        except (AttributeError, OSError, TypeError):
            continue
        kernels.update(_KERNEL_NAMES.findall(source))
        externs.update(_EXTERN_CALLS.findall(source))
    return {"kernels": sorted(kernels), "extern_calls": dict(sorted(externs.items())),
            "triton_configs": _triton_configs()}


def _triton_configs() -> dict[str, Any]:
    """Each Triton kernel's launch config as its autotuner settled it. Inductor keeps two
    autotuner objects per kernel (one from compiling, one the compiled module launches);
    only one with a single launcher has chosen. Kernels none of whose objects has launched
    are left out (their names are in `kernels`)."""
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:  # no Triton here (a CPU build): nothing was autotuned
        return {}
    chosen: dict[str, list[dict[str, Any]]] = {}
    for obj in gc.get_objects():
        try:
            if not isinstance(obj, CachingAutotuner):
                continue
        except ReferenceError:  # a weak proxy whose object is gone
            continue
        launchers = getattr(obj, "launchers", None) or []
        if len(launchers) != 1 or getattr(launchers[0], "config", None) is None:
            continue
        name = getattr(getattr(obj, "fn", None), "__name__", None) or \
            (getattr(obj, "inductor_meta", None) or {}).get("kernel_name") or "?"
        config = _config(launchers[0].config)
        if config not in chosen.setdefault(name, []):
            chosen[name].append(config)
    return {name: configs[0] if len(configs) == 1 else configs
            for name, configs in sorted(chosen.items())}


def _described(evidence: dict[str, Any]) -> dict[str, Any] | None:
    """build_choices(), or None with the reason in the evidence: the description is a
    record of the build, never a reason to lose the measurement."""
    try:
        return build_choices()
    except Exception as exc:
        evidence["build_choices_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return None


def _config(config: Any) -> dict[str, Any]:
    return {"kwargs": dict(sorted((str(k), v) for k, v in (config.kwargs or {}).items())),
            "num_warps": getattr(config, "num_warps", None),
            "num_stages": getattr(config, "num_stages", None)}


def _cxx_compiler() -> str | None:
    """Inductor's CPU code is C++ compiled at run time; without a compiler it cannot run."""
    for name in (os.environ.get("CXX"), "g++", "c++", "clang++"):
        if name and shutil.which(name):
            return name
    return None


def compile_mode(spec: BenchSpec) -> str:
    """torch.compile's mode: the spec's opt_level axis, else option `mode` (older series)."""
    if spec.opt_level != "default":
        return spec.opt_level
    return str(spec.options.get("mode", "default"))


def _torch_major() -> int:
    import torch

    return int(torch.__version__.split(".", 1)[0])


# The one file of an inductor build in the host's build cache (benchmarks.build_cache).
INDUCTOR_ARTIFACTS = "inductor-cache-artifacts.bin"
# Whether this process has loaded another process's build into its caches.
_LOADED_ARTIFACTS = False


def _cache_counters() -> dict[str, int]:
    """Inductor's and AOTAutograd's cache hits, misses and bypasses in this process."""
    from torch._dynamo.utils import counters

    out = {f"fxgraph_{k.removeprefix('fxgraph_cache_')}": int(v)
           for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache_")}
    out.update({f"autograd_{k.removeprefix('autograd_cache_')}": int(v)
                for k, v in counters["aot_autograd"].items()
                if k.startswith("autograd_cache_")})
    return out


class InductorBackend:
    name = "inductor"

    def unavailable_reason(self, spec: BenchSpec) -> str | None:
        import torch

        if _torch_major() < 2:
            return f"torch {torch.__version__} has no torch.compile (needs torch >= 2)"
        if spec.opt_level != "default" and "mode" in spec.options:
            return "opt_level and option mode both given: use opt_level"
        mode = compile_mode(spec)
        if mode not in MODES:
            return f"option mode: {mode!r} is not one of {', '.join(MODES)}"
        if not torch._dynamo.is_dynamo_supported():
            return "torch.compile is not supported on this Python version"
        if spec.device == "cuda":
            if not torch.cuda.is_available():
                return "CUDA is not available here"
            from torch.utils._triton import has_triton

            if not has_triton():
                return "inductor on CUDA needs Triton, which is not installed or finds no GPU"
        elif _cxx_compiler() is None:
            return "inductor on CPU needs a C++ compiler (g++/clang++) and none is on PATH"
        return None

    def compile_cached(self, model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec,
                       artifacts: dict[str, bytes] | None) -> Compiled:
        """A build through inductor's own caches: loading puts a stored build's cache
        artifacts (FX graph, AOTAutograd, Triton, autotuning: torch.compiler's
        `save_cache_artifacts`) into this process's caches before compiling, so the
        compile reads them; a fresh build saves them. Measured on an H100 (ResNet50
        fp16, experiments/build_reuse_probe.py): the loaded build had the built one's
        fingerprint; a compile took 15.2 s instead of 20.7 s with constant weights
        (AOTAutograd's cache is bypassed for a frozen graph) and 6.4 s instead of 18.7 s
        with tensor weights."""
        import torch

        global _LOADED_ARTIFACTS
        config = torch._inductor.config
        if artifacts is not None:
            blob = artifacts.get(INDUCTOR_ARTIFACTS)
            program = artifacts.get(inductor_program.PROGRAM_FILE)
            if blob is None and program is None:
                raise RuntimeError(f"the stored build has no {INDUCTOR_ARTIFACTS}")
            if blob is not None:  # the kernels' compiled binaries, and the FX graph's entry
                torch.compiler.load_cache_artifacts(blob)
                _LOADED_ARTIFACTS = True
            config.fx_graph_cache = True
            # a load compiles nothing: without workers none start beside the timing
            # (stop_compile_workers), and none have to be waited for to stop
            config.compile_threads = 1
            refused = None
            if program is not None and inductor_program.enabled():
                try:
                    return self._load_program(program, example, spec)
                except inductor_program.ProgramRefused as exc:
                    refused = f"its kept program was refused ({exc}): loaded through " \
                        "inductor's caches"
            compiled = self.compile(model, example, spec)
            compiled.evidence["inductor_cache"] = _cache_counters()
            if inductor_program.enabled():  # say which way, where there were two
                compiled.loaded_via = "caches"
            if refused is not None:
                compiled.evidence["inductor_program"] = compiled.load_note = refused
            return compiled
        if _LOADED_ARTIFACTS:
            # a refused load put another build in this process's caches: build without them
            config.fx_graph_cache = False
            if hasattr(torch._functorch.config, "enable_autograd_cache"):
                torch._functorch.config.enable_autograd_cache = False
        compiled = self.compile(model, example, spec)
        counts = compiled.evidence["inductor_cache"] = _cache_counters()
        saved = torch.compiler.save_cache_artifacts()
        kept: dict[str, bytes] = {}
        missing = []
        if saved is not None and saved[0] and not _LOADED_ARTIFACTS:
            kept[INDUCTOR_ARTIFACTS] = bytes(saved[0])
        else:
            # e.g. a frozen graph on a CPU: inductor bypasses its caches (weights packed
            # for oneDNN are no cache entry)
            missing.append("inductor kept no cache artifacts for this build "
                           f"({', '.join(f'{k}={v}' for k, v in counts.items()) or 'none'})")
        if inductor_program.enabled():
            # after save_cache_artifacts: loading the program back to check it compiles
            # its kernels again, which must not enter the artifacts
            program, why_not = (None, "this process loaded another build first") \
                if _LOADED_ARTIFACTS else self._kept_program(compiled, example, spec)
            if program is not None:
                kept[inductor_program.PROGRAM_FILE] = program
                compiled.evidence["inductor_program"] = "kept"
            else:
                compiled.evidence["inductor_program"] = f"not kept: {why_not}"
                if compiled.evidence["freezing"]:
                    missing.append(f"its program was not kept ({why_not})")
        if kept:
            compiled.artifacts = kept
        else:
            compiled.artifacts_missing = "; ".join(missing)
        return compiled

    def _kept_program(self, compiled: Compiled, example: torch.Tensor, spec: BenchSpec,
                      ) -> tuple[bytes | None, str | None]:
        """A frozen build's generated program, kept for later processes to load without
        tracing (benchmarks.backends.inductor_program); None with why not."""
        evidence = compiled.evidence
        why_not = inductor_program.why_not_kept(
            freezing=bool(evidence["freezing"]), dynamic=bool(evidence["dynamic"]),
            uses_cudagraphs=not compiled.cuda_graph_safe,
            graph_breaks=int(evidence["graph_breaks"]), graphs=int(evidence["dynamo_graphs"]))
        if why_not is not None:
            return None, why_not
        return inductor_program.capture(compiled.run, example, evidence)

    def _load_program(self, program: bytes, example: torch.Tensor, spec: BenchSpec,
                      ) -> Compiled:
        """A kept program, loaded: nothing traced or compiled but its kernels (from the
        Triton cache the artifacts filled); the build's own record in the evidence."""
        reason = self.unavailable_reason(spec)
        if reason is not None:
            raise BackendUnavailable(reason)
        knobs = pin_choices(spec, compile_mode(spec))
        run, evidence = inductor_program.load(program, example)
        # as after a compile: a Triton kernel settles its launch config on its first call,
        # and build_choices reads it
        try:
            run(example)
        except Exception as exc:
            raise inductor_program.ProgramRefused(
                f"its first call failed: {type(exc).__name__}: {exc}".splitlines()[0][:300],
            ) from exc
        stop_compile_workers()
        evidence.update({"inductor_build_knobs": knobs, "inductor_program": "loaded"})
        return Compiled(run=run, evidence=evidence, cuda_graph_safe=True, versions={},
                        build_choices=_described(evidence), loaded_via="program")

    def compile(self, model: torch.nn.Module, example: torch.Tensor, spec: BenchSpec) -> Compiled:
        import torch
        from torch._dynamo.utils import counters
        from torch._inductor import list_mode_options, metrics

        reason = self.unavailable_reason(spec)
        if reason is not None:
            raise BackendUnavailable(reason)
        mode = compile_mode(spec)
        freezing = spec.weights == "constant"
        dynamic = spec.shape_mode == "dynamic"

        # `mode` and `options` cannot both be passed to torch.compile, so the mode's own
        # options are expanded here.
        options: dict[str, Any] = dict(list_mode_options(mode, dynamic))
        uses_cudagraphs = bool(options.get("triton.cudagraphs", False))
        # Freezing is set in the process-wide inductor config, NOT in `options`: measured
        # on torch 2.13, torch.compile(options={"freezing": True}) still passes every
        # parameter to the compiled graph as an input (nothing is frozen), while the global
        # flag bakes them in as constants. Leaving it set is deliberate: one spec is
        # measured per process, and a later recompile must be frozen like the first.
        torch._inductor.config.freezing = freezing
        knobs = pin_choices(spec, mode)

        torch._dynamo.reset()
        metrics.reset()
        counters.clear()
        # dynamic=True: a symbolic batch, one graph for every size. Dynamo still specialises
        # a size of 1 (its 0/1 rule), so a batch-1 dynamic spec times a batch-1 graph; the
        # evidence says so rather than pretending otherwise.
        compiled = torch.compile(model, backend="inductor", dynamic=True if dynamic else None,
                                 options=options)
        # Freezing needs inference mode (no autograd state to keep the parameters alive as
        # tensors), and dynamo guards on grad mode: the first call here and every timed call
        # both run under inference_mode so the timed calls hit the graph compiled here.
        try:
            with torch.inference_mode(), short_tensor_reprs():
                compiled(example)
        except Exception as exc:
            op = untraceable_op(exc)
            if op is None or model_ref.parse(spec.model, allow_absolute=True).builtin:
                raise
            # A model of the user's with an op dynamo cannot trace: a property of the model.
            raise BackendUnavailable(
                f"torch.compile cannot trace op {op} of model {spec.model}: it has no fake "
                "(meta) implementation; register one with register_fake") from exc

        stop_compile_workers()
        graph_breaks = sum(counters["graph_break"].values())
        evidence: dict[str, Any] = {
            "inductor_kernels": int(metrics.generated_kernel_count),
            "graph_breaks": int(graph_breaks),
            "graph_break_reasons": sorted(counters["graph_break"])[:10],
            "dynamo_graphs": int(counters["stats"].get("unique_graphs", 0)),
            "freezing": freezing,
            "mode": mode,
            "dynamic": dynamic,
            "batch1_specialized": dynamic and example.shape[0] == 1,
            "inductor_build_knobs": knobs,
        }
        return Compiled(
            run=_inference_mode_call(compiled),
            evidence=evidence,
            # inductor's own CUDA graphs (reduce-overhead, max-autotune) cannot be captured
            # again inside the runner's graph
            cuda_graph_safe=not uses_cudagraphs,
            versions={},
            build_choices=_described(evidence),
        )


@contextlib.contextmanager
def short_tensor_reprs() -> Iterator[None]:
    """Tensors print at most two values a dimension while the compile runs, then as before.

    While dynamo (torch 2.11) builds a frozen graph's guards it formats the parameters'
    reprs: in a loaded frozen ResNet50 fp16 on an H200, 267 tensor reprs reading 53,228
    values off the GPU one at a time, and guard building took 1.8-2.5 s of a 12.8-16.5 s
    load; with short reprs 0.6 s (experiments/frozen_load_probe.py, two processes each).
    The text only describes guards: what is compiled, and what is guarded, is unchanged."""
    import torch

    opts = torch._tensor_str.PRINT_OPTS
    saved = {name: getattr(opts, name) for name in _PRINT_OPTION_NAMES}
    torch.set_printoptions(threshold=4, edgeitems=1)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(opts, name, value)


_PRINT_OPTION_NAMES = ("precision", "threshold", "edgeitems", "linewidth", "sci_mode")


def stop_compile_workers() -> None:
    """Stop inductor's compile workers once the build is made: they outlive the compile,
    and nothing is compiled after it (a recompile would start them again). A load from
    the build cache starts none (`compile_threads` 1: they were still starting, importing
    torch, while the process timed, about one core busy beside the timing on an H200:
    `host_other_cores` 1.05, against 0.01 without them; stopping them instead had to wait
    for that start, 11-13 s a load against 3)."""
    from torch._inductor.async_compile import shutdown_compile_workers

    shutdown_compile_workers()


def untraceable_op(exc: BaseException) -> str | None:
    """The custom op an error of torch.compile says it could not trace for want of a fake
    (meta) implementation, or None when the error is another one. Dynamo says so in prose
    only ("There was no fake impl registered for <CustomOpDef(ns::op)>")."""
    text = "\n".join(str(e) for e in (exc, exc.__cause__, exc.__context__) if e is not None)
    match = re.search(r"no fake impl registered for <CustomOpDef\((\S+?)\)>", text)
    if match:
        return match.group(1)
    match = re.search(r"call_function (\w+)\.(\w+)\.\w+\(.*no fake impl", text, re.DOTALL)
    return f"{match.group(1)}::{match.group(2)}" if match else None


def _inference_mode_call(
    compiled: Callable[[torch.Tensor], torch.Tensor],
) -> Callable[[torch.Tensor], torch.Tensor]:
    import torch

    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return compiled(x)

    return run


BACKEND = InductorBackend()
