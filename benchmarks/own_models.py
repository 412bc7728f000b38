"""Models that are not built in: a factory of the user's, a torchvision or timm model by
name, or a `torch.export` archive; and the fingerprint that names them in a series key.

Runs in the child process that measures (benchmarks.child), so it sees the cell's
environment: the interpreter's installed packages, plus the directories listed in
SPEEDWATCH_MODEL_PATH (os.pathsep-separated, like PYTHONPATH), which are appended to
sys.path before a factory's module is imported and searched, in order, for a relative
`file:` archive. An absolute `file:` path is used as written (the local `speedwatch bench`;
the API refuses them).

The factory contract: `factory(batch_size: int) -> (nn.Module, inputs)`, where inputs is
a tensor or a tuple of tensors whose dimension 0 is the batch. It is called after
`torch.manual_seed(spec.seed)`, so random weights are the same in every process. Today a
model is measured with ONE floating-point input tensor (cast to the spec's precision with
the model) and must return one tensor; anything else is skipped with a reason that says so.

Everything that keeps the model from being built here (not importable, no such attribute,
the factory raised or returned something else, no such file, not an archive this torch can
load, a batch the archive was not exported for) raises `ModelUnavailable`: the cell is
skipped with that reason, in the words of the model's reference, and the others go on.

The fingerprint (`fingerprinted_call`, `archive_digest`) is what a model IS for the
comparison: two results compare only when it agrees. For a module it is taken while the
reference output is computed, from what the forward pass actually does at the level of
the user's code: every torch function and tensor method it calls (name, argument shapes,
dtypes and non-tensor values, result shapes), with torch/torchvision/timm modules that
hold none of the user's modules recorded as one call each (class, `extra_repr`, input and
output shapes), plus every module's class and `extra_repr` and every parameter's and
buffer's name, shape and dtype. So a changed custom block, a helper function its forward
calls, a layer's width or the input shape all change it; comments, formatting, weights,
the file a class lives in and the versions of torch and the libraries do not (their
internals are not traced: that is what a series compares across). Classes are named
without their module. One thing of a library's does count: a layer whose `extra_repr`
(the text in a module's repr) changes between versions changes the fingerprint too, and
starts a new series. For an archive it is its graph: every node's op, target, inputs and
output shapes. `FINGERPRINT_VERSION` is part of the digest, so a change of the method
starts new series rather than silently matching old ones.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from benchmarks import model_ref
from benchmarks.backends.base import BackendUnavailable
from benchmarks.model_ref import DIGEST_CHARS, ModelRef

MODEL_PATH_ENV = "SPEEDWATCH_MODEL_PATH"
FINGERPRINT_VERSION = 1
# Modules from these packages are recorded as one call each (unless they hold a module of
# the user's): their insides belong to the library version, which a series compares.
LIBRARY_ROOTS = frozenset({"torch", "torchvision", "timm"})
_MAX_REASON = 400
_DESCRIBE_DEPTH = 6


class ModelUnavailable(BackendUnavailable):
    """This model cannot be built in this environment; the cell is skipped with the reason."""


@dataclass
class BuiltModel:
    """A model of the user's, ready for the runner: eval mode, fp32, on the CPU."""

    ref: ModelRef
    module: nn.Module
    input: torch.Tensor
    # recorded as the result's `fingerprint.model`; `digest` is set by `fingerprinted_call`
    # for a module, here already for an archive (its graph is fixed in the file)
    info: dict[str, Any] = field(default_factory=dict)


def _one_line(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."


def model_path() -> list[str]:
    """The directories SPEEDWATCH_MODEL_PATH lists, in order (empty parts left out)."""
    return [p for p in os.environ.get(MODEL_PATH_ENV, "").split(os.pathsep) if p]


def _where() -> str:
    """The model path as a cell's error may tell it: how many directories, never which (the
    error reaches every ci token of the project; the worker's layout is the operator's)."""
    dirs = model_path()
    if not dirs:
        return f"{MODEL_PATH_ENV} is not set"
    return f"the worker's {MODEL_PATH_ENV} lists {len(dirs)} director" + (
        "y" if len(dirs) == 1 else "ies")


def build(spec: Any, ref: ModelRef) -> BuiltModel:
    """The model `ref` names, for `spec` (its batch size and seed); raises ModelUnavailable."""
    torch.manual_seed(spec.seed)
    if ref.kind == "factory":
        built = _from_factory(ref, spec)
    elif ref.kind in ("torchvision", "timm"):
        built = _from_hub(ref, spec)
    elif ref.kind == "pt2":
        built = _from_archive(ref, spec)
    else:
        raise ValueError(f"{ref.text!r} is a built-in model: benchmarks.models builds it")
    for p in built.module.parameters():
        p.requires_grad_(False)
    x = built.input
    built.info.update({
        "reference": ref.text, "kind": ref.kind,
        "inputs": [{"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}],
        "parameters": int(sum(p.numel() for p in built.module.parameters())),
    })
    return built


# ---- factories ----------------------------------------------------------------------------

def _from_factory(ref: ModelRef, spec: Any) -> BuiltModel:
    assert ref.module is not None and ref.attr is not None
    for directory in model_path():
        if directory not in sys.path:
            sys.path.append(directory)  # after the environment's own packages: no shadowing
    try:
        module = importlib.import_module(ref.module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (ref.module == missing or ref.module.startswith(missing + ".")):
            raise ModelUnavailable(
                f"model {ref.text}: module {missing!r} is not importable where the cell "
                f"runs (install it there, or put the directory that holds it on "
                f"{MODEL_PATH_ENV}; {_where()})") from exc
        raise ModelUnavailable(f"model {ref.text}: importing {ref.module} failed: "
                               f"{_one_line(exc)}") from exc
    except Exception as exc:
        raise ModelUnavailable(f"model {ref.text}: importing {ref.module} raised "
                               f"{_one_line(exc)}") from exc
    try:
        factory: Any = getattr(module, ref.attr)
    except AttributeError:
        import difflib

        names = [n for n in dir(module) if not n.startswith("_")]
        close = difflib.get_close_matches(ref.attr, names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ModelUnavailable(f"model {ref.text}: {ref.module} has no attribute "
                               f"{ref.attr!r}{hint}") from None
    package = ref.module.split(".")[0]
    defined_in = str(getattr(factory, "__module__", None) or "")
    if not (inspect.isfunction(factory) or inspect.isclass(factory)) or not (
            defined_in == package or defined_in.startswith(package + ".")):
        # only code of the package the server allows is called: a name the module imported
        # (`from os import system`) is not a factory of that package
        raise ModelUnavailable(
            f"model {ref.text}: {ref.attr} is not a function or class defined in package "
            f"{package!r} ({type(factory).__name__}"
            f"{f' from {defined_in}' if defined_in else ''}); name a factory the package "
            "itself defines")
    call: Any = factory  # a function or a class: called with the batch size
    try:
        inspect.signature(call).bind(spec.batch_size)
    except TypeError:
        raise ModelUnavailable(
            f"model {ref.text}: the factory must accept the batch size, as "
            f"factory(batch_size: int) -> (nn.Module, inputs)") from None
    except ValueError:
        pass  # no signature to inspect (a builtin): let the call say
    try:
        made = call(spec.batch_size)
    except Exception as exc:
        raise ModelUnavailable(f"model {ref.text}: the factory raised {_one_line(exc)}") \
            from exc
    if not (isinstance(made, (tuple, list)) and len(made) == 2
            and isinstance(made[0], nn.Module)):
        raise ModelUnavailable(
            f"model {ref.text}: the factory returned {_kind_of(made)}; expected "
            "(nn.Module, inputs) where inputs is a tensor or a tuple of tensors")
    module_obj, inputs = made
    x = _one_input(ref, inputs, spec.batch_size)
    info: dict[str, Any] = {}
    source = getattr(module, "__file__", None)
    if source:
        info["source"] = str(source)
    return BuiltModel(ref, module_obj.eval(), x, info)


def _kind_of(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        inner = ", ".join(type(v).__name__ for v in value[:4])
        return f"a {type(value).__name__} of {len(value)} ({inner})"
    return f"a {type(value).__name__}"


def _one_input(ref: ModelRef, inputs: Any, batch_size: int) -> torch.Tensor:
    """The one input tensor of `inputs`, or ModelUnavailable saying what is not supported."""
    items = (inputs,) if isinstance(inputs, torch.Tensor) else inputs
    if not isinstance(items, (tuple, list)) or not all(isinstance(t, torch.Tensor)
                                                        for t in items):
        raise ModelUnavailable(f"model {ref.text}: inputs must be a tensor or a tuple of "
                               f"tensors, not {_kind_of(inputs)}")
    if len(items) != 1:
        raise ModelUnavailable(f"model {ref.text}: takes {len(items)} inputs; Speedwatch "
                               "measures models with one input tensor today")
    x = items[0]
    if not x.is_floating_point():
        raise ModelUnavailable(f"model {ref.text}: its input is {x.dtype}; Speedwatch "
                               "casts the input to the spec's precision, so it must be a "
                               "floating-point tensor")
    if x.dim() == 0 or x.shape[0] != batch_size:
        raise ModelUnavailable(f"model {ref.text}: asked for batch {batch_size}, its input "
                               f"has shape {list(x.shape)} (dimension 0 is the batch)")
    return x.detach()


# ---- torchvision and timm -----------------------------------------------------------------

def _from_hub(ref: ModelRef, spec: Any) -> BuiltModel:
    """A library model by name with random weights: nothing is downloaded."""
    assert ref.name is not None
    library = ref.kind
    try:
        lib = importlib.import_module(library)
    except ImportError as exc:
        raise ModelUnavailable(f"model {ref.text}: {library} is not installed in the cell's "
                               f"environment ({_one_line(exc)})") from exc
    version = getattr(lib, "__version__", "?")
    size: tuple[int, ...] = (3, spec.image_size, spec.image_size)
    try:
        if library == "torchvision":
            models = importlib.import_module("torchvision.models")
            try:
                builder = models.get_model_builder(ref.name)
            except ValueError:
                raise ModelUnavailable(
                    f"model {ref.text}: torchvision {version} has no model {ref.name!r} "
                    "(torchvision.models.list_models() lists them)") from None
            module = builder(weights=None)
        else:
            if not lib.is_model(ref.name):
                raise ModelUnavailable(f"model {ref.text}: timm {version} has no model "
                                       f"{ref.name!r} (timm.list_models() lists them)")
            module = lib.create_model(ref.name, pretrained=False)
            cfg = getattr(module, "pretrained_cfg", None) or {}
            if spec.image_size == 224 and isinstance(cfg.get("input_size"), (tuple, list)):
                size = tuple(int(v) for v in cfg["input_size"])
    except ModelUnavailable:
        raise
    except Exception as exc:
        raise ModelUnavailable(f"model {ref.text}: {library} {version} could not build it: "
                               f"{_one_line(exc)}") from exc
    generator = torch.Generator().manual_seed(spec.seed + 1)
    x = torch.randn(spec.batch_size, *size, generator=generator)
    return BuiltModel(ref, module.eval(), x, {"library_version": str(version)})


# ---- torch.export archives ----------------------------------------------------------------

def archive_path(ref: ModelRef) -> Path:
    """Where the archive `ref` names is: as written when absolute, else the first
    directory of the model path that holds it; raises ModelUnavailable."""
    assert ref.path is not None
    if ref.path.startswith("/"):
        path = Path(ref.path)
        if not path.is_file():
            raise ModelUnavailable(f"model {ref.text}: no such file")
        return path
    dirs = model_path()
    if not dirs:
        raise ModelUnavailable(f"model {ref.text}: a relative archive is looked up in the "
                               f"worker's model path, and {MODEL_PATH_ENV} is not set")
    for directory in dirs:
        # model_ref refused '..', '.', empty parts and backslashes: the join stays inside
        candidate = Path(directory) / ref.path
        if candidate.is_file():
            return candidate
    raise ModelUnavailable(f"model {ref.text}: {ref.path} is in none of the model path's "
                           f"directories ({_where()})")


def _from_archive(ref: ModelRef, spec: Any) -> BuiltModel:
    path = archive_path(ref)
    try:
        program = torch.export.load(str(path))
    except Exception as exc:
        raise ModelUnavailable(f"model {ref.text}: not a torch.export archive this torch "
                               f"{torch.__version__} can load: {_one_line(exc)}") from exc
    user_inputs = list(program.graph_signature.user_inputs)
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    if len(user_inputs) != 1 or not isinstance(user_inputs[0], str) \
            or user_inputs[0] not in placeholders:
        raise ModelUnavailable(f"model {ref.text}: the program takes {len(user_inputs)} "
                               "inputs; Speedwatch measures models with one input tensor "
                               "today")
    val = placeholders[user_inputs[0]].meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() == 0:
        raise ModelUnavailable(f"model {ref.text}: its input is not a batched tensor")
    if not val.dtype.is_floating_point:
        raise ModelUnavailable(f"model {ref.text}: its input is {val.dtype}; Speedwatch "
                               "casts the input to the spec's precision, so it must be a "
                               "floating-point tensor")
    shape = _archive_input_shape(ref, program, val, spec.batch_size)
    module = program.module()  # no .eval(): the graph holds the mode it was exported in
    generator = torch.Generator().manual_seed(spec.seed + 1)
    x = torch.randn(*shape, generator=generator).to(val.dtype)
    info = {"source": str(path), "digest": archive_digest(program),
            "fingerprint": f"graph-v{FINGERPRINT_VERSION}",
            "graph_nodes": len(program.graph.nodes)}
    return BuiltModel(ref, module, x, info)


def _archive_input_shape(ref: ModelRef, program: Any, val: torch.Tensor,
                         batch_size: int) -> list[int]:
    """The input shape at the spec's batch: a dynamic dimension 0 takes the batch (within
    the range it was exported for), a static one must already be it; other dimensions
    are the archive's (its example input's where they are dynamic)."""
    example = None
    inputs = getattr(program, "example_inputs", None)
    if inputs and inputs[0] and isinstance(inputs[0][0], torch.Tensor):
        example = inputs[0][0]
    shape: list[int] = []
    for i, dim in enumerate(val.shape):
        if isinstance(dim, int):
            shape.append(dim)
        elif i == 0:
            low, high = _range_of(program, dim)
            if not low <= batch_size <= high:
                raise ModelUnavailable(f"model {ref.text}: exported for batches {low} to "
                                       f"{high}, not {batch_size}")
            shape.append(batch_size)
        elif example is not None and example.dim() == val.dim():
            shape.append(int(example.shape[i]))
        else:
            raise ModelUnavailable(f"model {ref.text}: input dimension {i} is dynamic and "
                                   "the archive holds no example input to size it")
    if shape[0] != batch_size:
        raise ModelUnavailable(
            f"model {ref.text}: exported for batch {shape[0]} only (a static batch "
            f"dimension); ask for batch {shape[0]}, or export with a dynamic batch: "
            "dynamic_shapes=({0: torch.export.Dim('batch')},)")
    return shape


def _range_of(program: Any, dim: Any) -> tuple[int, float]:
    constraints = getattr(program, "range_constraints", {}) or {}
    expr = getattr(getattr(dim, "node", None), "expr", None)
    bounds = constraints.get(expr)
    if bounds is None:
        return 1, float("inf")
    low = int(bounds.lower) if str(bounds.lower).lstrip("-").isdigit() else 1
    upper = str(bounds.upper)
    return low, (int(upper) if upper.isdigit() else float("inf"))


def archive_digest(program: Any) -> str:
    """The digest of an exported program's graph: each node's op, target, inputs (by
    position in the graph, so the wiring counts) and output shape and dtype."""
    index = {node: i for i, node in enumerate(program.graph.nodes)}

    def arg(value: Any) -> Any:
        if isinstance(value, torch.fx.Node):
            return ["node", index.get(value, -1)]
        if isinstance(value, (tuple, list)):
            return [arg(v) for v in value]
        if isinstance(value, dict):
            return {str(k): arg(v) for k, v in value.items()}
        return describe(value)

    nodes = []
    for node in program.graph.nodes:
        target = node.target if isinstance(node.target, str) else \
            getattr(node.target, "__name__", None) or str(node.target)
        nodes.append([node.op, str(target) if node.op != "placeholder" else node.name,
                      arg(list(node.args)), arg(dict(node.kwargs)),
                      describe(node.meta.get("val"))])
    return _digest({"version": FINGERPRINT_VERSION, "kind": "graph", "nodes": nodes})


# ---- fingerprint of a module, from its forward pass ---------------------------------------

def describe(value: Any, depth: int = 0) -> Any:
    """A JSON-able description of an argument or result: tensors by shape and dtype (a
    dynamic size as "dyn"), plain values as themselves, anything else by its type."""
    if depth > _DESCRIBE_DEPTH:
        return "..."
    if isinstance(value, torch.Tensor):
        return ["T", [d if isinstance(d, int) else "dyn" for d in value.shape],
                str(value.dtype).removeprefix("torch.")]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)  # NaN and inf too, which JSON cannot hold
    if isinstance(value, torch.SymInt):
        return "dyn"
    if isinstance(value, (tuple, list)):
        return [describe(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): describe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, torch.device):
        return ["device", value.type]
    if isinstance(value, slice):
        return ["slice", describe(value.start), describe(value.stop), describe(value.step)]
    if value is Ellipsis:
        return "Ellipsis"
    if isinstance(value, nn.Module):
        return ["module", _class_name(type(value))]
    return ["object", _class_name(type(value))]


def _class_name(cls: type) -> str:
    """A class as the fingerprint names it: its qualified name without its module, so
    moving a block to another file (or torch moving one of its own) changes nothing."""
    return cls.__qualname__


def is_library_class(cls: type) -> bool:
    return cls.__module__.split(".", 1)[0] in LIBRARY_ROOTS


def _opaque(root: nn.Module) -> list[nn.Module]:
    """Library modules that hold no module of the user's: recorded as one call each."""
    memo: dict[int, bool] = {}

    def opaque(m: nn.Module) -> bool:
        key = id(m)
        if key not in memo:
            memo[key] = is_library_class(type(m)) and all(opaque(c) for c in m.children())
        return memo[key]

    return [m for m in root.modules() if opaque(m)]


class _Recorder(TorchFunctionMode):
    """Records the torch calls of the user's code; library modules' insides are skipped."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[Any]] = []
        self.depth = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.depth == 0:
            self.calls.append(["call", getattr(func, "__name__", None) or str(func),
                               describe(list(args)), describe(kwargs), describe(out)])
        return out

    def enter_module(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        if self.depth == 0:
            self.calls.append(["module", _class_name(type(module)), module.extra_repr(),
                               describe(list(args)), describe(kwargs)])
        self.depth += 1

    def leave_module(self, output: Any) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.calls[-1].append(describe(output))


def fingerprinted_call(built: BuiltModel, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
    """Call the model on `x` once (the caller's reference call) and return its output and
    the model's fingerprint info, `digest` included. Raises ModelUnavailable when the
    output is not one tensor; the model's own errors propagate."""
    module = built.module
    info = dict(built.info)
    if "digest" in info:  # an archive: its graph is the fingerprint
        out = module(x)
    else:
        recorder = _Recorder()
        handles = []
        for m in _opaque(module):
            handles.append(m.register_forward_pre_hook(
                lambda mod, args, kwargs: recorder.enter_module(mod, args, kwargs),
                with_kwargs=True))
            handles.append(m.register_forward_hook(
                lambda mod, args, kwargs, output: recorder.leave_module(output),
                with_kwargs=True))
        try:
            with recorder:
                out = module(x)
        finally:
            for handle in handles:
                handle.remove()
        structure = {
            "version": FINGERPRINT_VERSION, "kind": "trace",
            "modules": [[name, _class_name(type(m)), m.extra_repr()]
                        for name, m in module.named_modules()],
            "parameters": [[name, list(p.shape), str(p.dtype)]
                           for name, p in module.named_parameters()],
            "buffers": [[name, list(b.shape), str(b.dtype)]
                        for name, b in module.named_buffers()],
            "inputs": [describe(x)],
            "calls": recorder.calls,
        }
        info.update({"digest": _digest(structure), "fingerprint": f"trace-v{FINGERPRINT_VERSION}",
                     "traced_calls": len(recorder.calls)})
    if not isinstance(out, torch.Tensor):
        raise ModelUnavailable(f"model {built.ref.text}: returns {_kind_of(out)}; Speedwatch "
                               "compares one output tensor")
    model_ref.check_digest(info["digest"])
    return out, info


def _digest(document: Any) -> str:
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_CHARS]
