"""Not TensorRT: a recording stand-in of the `tensorrt` Python module, for unit tests only.

TensorRT cannot be installed on our development machines, so the converter in
benchmarks/trt_converter.py is tested against this module instead. It implements only what
the converter calls, mirroring the TensorRT 10 Python API (parameter names, defaults,
argument types, return values, the documented rules such as "a named weight must already be
used by a layer") and it is strict: an unknown keyword, a missing argument, a wrong type, an
attribute a layer does not have, or a network TensorRT would refuse raises or fails the
build, so a converter that drifts from the documented API fails its tests.

It records everything (layers with their kind, inputs, weights and `set_input` calls;
builder flags; optimization profiles; weight names) and can EVALUATE a recorded network
with torch on the CPU, so tests can compare what the converter built with the eager model.
It does no optimisation: an "engine" here has exactly the network's layers, each with a
tactic taken from the config's timing cache where it has the layer's configuration, else
"timed" by `fastest_tactic`, which tests replace to model timing noise.

Nothing in the product imports this file; `import tensorrt` is the only product path.
"""

from __future__ import annotations

import ctypes
import enum
import hashlib
import itertools
import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F


class StandInError(RuntimeError):
    """The stand-in caught a use TensorRT would reject."""


# ---------------------------------------------------------------------------- enums


class _Enum(enum.Enum):
    """pybind11 enums convert with int() and print as 'Type.NAME'."""

    def __int__(self) -> int:
        return int(self.value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value}>"


class DataType(_Enum):
    FLOAT = 0
    HALF = 1
    INT8 = 2
    INT32 = 3
    BOOL = 4
    UINT8 = 5
    FP8 = 6
    BF16 = 7
    INT64 = 8


class NetworkDefinitionCreationFlag(_Enum):
    EXPLICIT_BATCH = 0
    STRONGLY_TYPED = 1


class BuilderFlag(_Enum):
    FP16 = 0
    INT8 = 1
    DEBUG = 2
    GPU_FALLBACK = 3
    REFIT = 4
    DISABLE_TIMING_CACHE = 5
    TF32 = 6
    SPARSE_WEIGHTS = 7
    BF16 = 17
    REFIT_IDENTICAL = 20
    WEIGHT_STREAMING = 21


class MemoryPoolType(_Enum):
    WORKSPACE = 0
    DLA_MANAGED_SRAM = 1


class ProfilingVerbosity(_Enum):
    LAYER_NAMES_ONLY = 0
    NONE = 1
    DETAILED = 2


class LayerInformationFormat(_Enum):
    ONELINE = 0
    JSON = 1


class TensorIOMode(_Enum):
    NONE = 0
    INPUT = 1
    OUTPUT = 2


class LayerType(_Enum):
    CONVOLUTION = 0
    CAST = 1
    ACTIVATION = 2
    POOLING = 3
    SCALE = 5
    ELEMENTWISE = 9
    UNARY = 11
    SHUFFLE = 13
    REDUCE = 14
    MATRIX_MULTIPLY = 17
    CONSTANT = 19
    IDENTITY = 20
    SLICE = 22


class ActivationType(_Enum):
    RELU = 0
    SIGMOID = 1
    TANH = 2


class PoolingType(_Enum):
    MAX = 0
    AVERAGE = 1


class ScaleMode(_Enum):
    UNIFORM = 0
    CHANNEL = 1
    ELEMENTWISE = 2


class ElementWiseOperation(_Enum):
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    SUB = 4
    DIV = 5
    POW = 6


class UnaryOperation(_Enum):
    EXP = 0
    LOG = 1
    SQRT = 2
    RECIP = 3
    ABS = 4
    NEG = 5


class ReduceOperation(_Enum):
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


class MatrixOperation(_Enum):
    NONE = 0
    TRANSPOSE = 1
    VECTOR = 2


class Severity(_Enum):
    INTERNAL_ERROR = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    VERBOSE = 4


_FLOAT_TYPES = (DataType.FLOAT, DataType.HALF, DataType.BF16)
_NUMPY_TYPES = {
    np.dtype(np.float32): DataType.FLOAT,
    np.dtype(np.float16): DataType.HALF,
    np.dtype(np.int32): DataType.INT32,
    np.dtype(np.int64): DataType.INT64,
    np.dtype(np.int8): DataType.INT8,
    np.dtype(np.bool_): DataType.BOOL,
}
_ITEMSIZE = {DataType.FLOAT: 4, DataType.HALF: 2, DataType.BF16: 2, DataType.INT32: 4,
             DataType.INT64: 8, DataType.INT8: 1, DataType.BOOL: 1}
_TORCH_TYPES = {DataType.FLOAT: torch.float32, DataType.HALF: torch.float16,
                DataType.BF16: torch.bfloat16}


# ---------------------------------------------------------------------------- argument checks


def _check(value: Any, types: type | tuple[type, ...], what: str) -> Any:
    """pybind11 raises TypeError 'incompatible function arguments' on a wrong type."""
    if not isinstance(value, types):
        names = types.__name__ if isinstance(types, type) else "/".join(t.__name__ for t in types)
        raise TypeError(f"{what}: incompatible argument: expected {names}, "
                        f"got {type(value).__name__} ({value!r:.60})")
    return value


def _dims(value: Any, what: str, *, allow_wildcard: bool = False) -> tuple[int, ...]:
    """trt.Dims converts from a list or tuple of ints."""
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value
    ):
        raise TypeError(f"{what}: expected Dims (a tuple/list of ints), got {value!r:.60}")
    dims = tuple(int(v) for v in value)
    low = -1 if allow_wildcard else 0
    if any(d < low for d in dims):
        raise ValueError(f"{what}: invalid dimensions {dims}")
    return dims


# ---------------------------------------------------------------------------- logger, weights


_Severity = Severity


class ILogger:
    Severity = Severity
    INTERNAL_ERROR = Severity.INTERNAL_ERROR
    ERROR = Severity.ERROR
    WARNING = Severity.WARNING
    INFO = Severity.INFO
    VERBOSE = Severity.VERBOSE

    def __init__(self) -> None:
        pass

    def log(self, severity: _Severity, msg: str) -> None:
        raise NotImplementedError("ILogger.log is pure virtual: subclasses implement it")


class Logger(ILogger):
    def __init__(self, min_severity: Severity = Severity.WARNING) -> None:
        super().__init__()
        self.min_severity = _check(min_severity, Severity, "Logger(min_severity)")
        self.messages: list[tuple[Severity, str]] = []

    def log(self, severity: Severity, msg: str) -> None:
        self.messages.append((severity, msg))


class Weights:
    """Weights(type=DataType.FLOAT) | Weights(a: numpy array) | Weights(type, ptr, count).

    Like TensorRT, an array is not copied: the Weights points into it. A pointer is read
    at construction (the stand-in cannot defer a raw read safely).
    """

    __slots__ = ("_array", "_values", "dtype", "pointer", "size")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        unknown = set(kwargs) - {"type", "a", "ptr", "count"}
        if unknown:
            raise TypeError(f"Weights(): unexpected keyword(s) {sorted(unknown)}")
        self._array: np.ndarray | None = None
        self._values: np.ndarray | None = None  # float32 values (pointer form)
        self.pointer = 0
        if "a" in kwargs or (len(args) == 1 and not kwargs and isinstance(args[0], np.ndarray)):
            if len(args) + len(kwargs) != 1:
                raise TypeError("Weights(a): takes exactly one numpy array")
            array = kwargs.get("a", args[0] if args else None)
            _check(array, np.ndarray, "Weights(a)")
            assert isinstance(array, np.ndarray)
            if not array.flags["C_CONTIGUOUS"]:
                raise ValueError("Weights(a): the array must be contiguous")
            if array.dtype not in _NUMPY_TYPES:
                raise TypeError(f"Weights(a): unsupported numpy dtype {array.dtype}")
            self.dtype = _NUMPY_TYPES[array.dtype]
            self._array = array
            self.size = int(array.size)
            self.pointer = int(array.__array_interface__["data"][0])
        elif len(args) + len(kwargs) == 3:
            names = ("type", "ptr", "count")
            values = dict(zip(names, args, strict=False)) | kwargs
            if set(values) != set(names):
                raise TypeError("Weights(type, ptr, count): missing arguments")
            dtype = _check(values["type"], DataType, "Weights(type)")
            ptr = _check(values["ptr"], int, "Weights(ptr)")
            count = _check(values["count"], int, "Weights(count)")
            self.dtype, self.size, self.pointer = dtype, count, ptr
            raw = ctypes.string_at(ptr, count * _ITEMSIZE[dtype]) if count else b""
            if dtype in _TORCH_TYPES:
                tensor = torch.frombuffer(bytearray(raw), dtype=_TORCH_TYPES[dtype])
                self._values = tensor.float().numpy()
            else:
                raise TypeError(f"Weights(type, ptr, count): stand-in reads float types only, "
                                f"not {dtype}")
        elif len(args) + len(kwargs) <= 1:
            dtype = kwargs.get("type", args[0] if args else DataType.FLOAT)
            self.dtype = _check(dtype, DataType, "Weights(type)")
            self.size = 0
        else:
            raise TypeError(f"Weights(): no overload takes {len(args)} positional and "
                            f"{sorted(kwargs)} keyword arguments")

    @property
    def nbytes(self) -> int:
        return self.size * _ITEMSIZE[self.dtype]

    def __len__(self) -> int:
        return self.size

    @property
    def is_empty(self) -> bool:
        """Stand-in only: TensorRT treats count 0 as 'no weights'."""
        return self.size == 0

    def numpy(self) -> np.ndarray:
        if self._array is not None:
            return self._array
        if self._values is not None:
            return self._values
        return np.zeros((0,), np.float32)

    def key(self) -> tuple[DataType, int, int]:
        """TensorRT identifies weights by (type, value pointer, count)."""
        return (self.dtype, self.pointer, self.size)

    def values(self) -> torch.Tensor:
        """Stand-in only: the weights as float32 torch values (flat)."""
        return torch.from_numpy(np.asarray(self.numpy(), dtype=np.float32).reshape(-1).copy())


def _as_weights(value: Any, what: str, *, optional: bool = False) -> Weights:
    """Parameters typed Weights also take a numpy array (py::implicitly_convertible)."""
    if value is None and optional:
        return Weights()
    if isinstance(value, np.ndarray):
        return Weights(value)
    return _check(value, Weights, what)


# ---------------------------------------------------------------------------- tensors, layers


class ITensor:
    __slots__ = ("_declared_dtype", "_declared_shape", "_id", "_name", "_network", "_producer")
    _ids = itertools.count()
    _network: INetworkDefinition
    _producer: ILayer | None
    _name: str
    _declared_dtype: DataType
    _declared_shape: tuple[int, ...]
    _id: int

    def __init__(self, network: INetworkDefinition, producer: ILayer | None,
                 name: str, dtype: DataType | None = None,
                 shape: tuple[int, ...] | None = None) -> None:
        object.__setattr__(self, "_network", network)
        object.__setattr__(self, "_producer", producer)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_declared_dtype", dtype)
        object.__setattr__(self, "_declared_shape", shape)
        object.__setattr__(self, "_id", next(ITensor._ids))

    @property
    def name(self) -> str:
        return str(self._name)

    @name.setter
    def name(self, value: str) -> None:
        object.__setattr__(self, "_name", _check(value, str, "ITensor.name"))

    @property
    def is_network_input(self) -> bool:
        return self._producer is None

    @property
    def shape(self) -> tuple[int, ...]:
        """What TensorRT knows while the network is built: -1 for a dynamic dimension."""
        return tuple(-1 if d == _DYNAMIC else int(d) for d in _meta(self).shape)

    @property
    def dtype(self) -> DataType:
        return _types(self._network)[self._id]

    @property
    def is_network_output(self) -> bool:
        return self in self._network._outputs

    @property
    def declared_shape(self) -> tuple[int, ...]:
        """Stand-in only: the shape given to add_input (-1: dynamic)."""
        return self._declared_shape

    @property
    def declared_dtype(self) -> DataType:
        """Stand-in only: the type given to add_input."""
        return self._declared_dtype

    @property
    def producer(self) -> ILayer | None:
        """Stand-in only: the layer whose output this is (None for network inputs)."""
        return self._producer

    def __setattr__(self, key: str, value: Any) -> None:
        if key == "name":
            object.__setattr__(self, "_name", _check(value, str, "ITensor.name"))
            return
        raise AttributeError(f"ITensor has no settable attribute {key!r} in the stand-in")


def _tuple_of(n: int | None) -> Any:
    def check(value: Any, what: str) -> tuple[int, ...]:
        dims = _dims(value, what)
        if n is not None and len(dims) != n:
            raise ValueError(f"{what}: expected {n} dimensions, got {dims}")
        return dims
    return check


def _int(value: Any, what: str) -> int:
    return int(_check(value, int, what))


def _bool(value: Any, what: str) -> bool:
    return bool(_check(value, bool, what))


def _enum_of(kind: type[_Enum]) -> Any:
    def check(value: Any, what: str) -> _Enum:
        return _check(value, kind, what)
    return check


def _weights_attr(value: Any, what: str) -> Weights:
    return _as_weights(value, what)


# settable attributes per layer kind, with their validators and defaults
_ATTRIBUTES: dict[LayerType, dict[str, tuple[Any, Any]]] = {
    LayerType.CONVOLUTION: {
        "stride_nd": (_tuple_of(None), None), "padding_nd": (_tuple_of(None), None),
        "dilation_nd": (_tuple_of(None), None), "num_groups": (_int, 1),
        "num_output_maps": (_int, None), "kernel_size_nd": (_tuple_of(None), None),
        "kernel": (_weights_attr, None), "bias": (_weights_attr, None),
    },
    LayerType.POOLING: {
        "type": (_enum_of(PoolingType), None), "window_size_nd": (_tuple_of(None), None),
        "stride_nd": (_tuple_of(None), None), "padding_nd": (_tuple_of(None), None),
        "average_count_excludes_padding": (_bool, True),
    },
    LayerType.ACTIVATION: {"type": (_enum_of(ActivationType), None)},
    LayerType.SCALE: {
        "mode": (_enum_of(ScaleMode), None), "shift": (_weights_attr, None),
        "scale": (_weights_attr, None), "power": (_weights_attr, None),
        "channel_axis": (_int, 1),
    },
    LayerType.ELEMENTWISE: {"op": (_enum_of(ElementWiseOperation), None)},
    LayerType.UNARY: {"op": (_enum_of(UnaryOperation), None)},
    LayerType.SHUFFLE: {
        "reshape_dims": (lambda v, w: _dims(v, w, allow_wildcard=True), None),
        "first_transpose": (_tuple_of(None), None), "second_transpose": (_tuple_of(None), None),
        "zero_is_placeholder": (_bool, True),
    },
    LayerType.REDUCE: {"op": (_enum_of(ReduceOperation), None), "axes": (_int, None),
                       "keep_dims": (_bool, None)},
    LayerType.MATRIX_MULTIPLY: {"op0": (_enum_of(MatrixOperation), None),
                                "op1": (_enum_of(MatrixOperation), None)},
    LayerType.CONSTANT: {"weights": (_weights_attr, None), "shape": (_tuple_of(None), None)},
    LayerType.CAST: {"to_type": (_enum_of(DataType), None)},
    LayerType.IDENTITY: {},
    LayerType.SLICE: {"start": (_tuple_of(None), None), "shape": (_tuple_of(None), None),
                      "stride": (lambda v, w: _dims(v, w, allow_wildcard=False), None)},
}

# how many inputs set_input may address, per kind (conv: data, kernel, bias)
_MAX_INPUTS = {LayerType.CONVOLUTION: 3, LayerType.SHUFFLE: 2}


class ILayer:
    """One recorded layer. `kind`, `inputs`, `set_input_calls` are stand-in records."""

    __slots__ = ("_attrs", "_meta", "_name", "_network", "_outputs", "inputs", "kind",
                 "set_input_calls")

    def __init__(self, network: INetworkDefinition, kind: LayerType,
                 inputs: Sequence[ITensor | None], **attrs: Any) -> None:
        object.__setattr__(self, "_meta", None)
        object.__setattr__(self, "_network", network)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "inputs", list(inputs))
        object.__setattr__(self, "set_input_calls", [])
        object.__setattr__(self, "_attrs", {})
        object.__setattr__(self, "_name", f"({kind.name} #{len(network._layers)})")
        index = len(network._layers)
        output = ITensor(network, self, f"({kind.name} #{index} output)")
        object.__setattr__(self, "_outputs", [output])
        for key, value in attrs.items():
            setattr(self, key, value)

    # ILayer API
    @property
    def name(self) -> str:
        return str(self._name)

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def get_input(self, index: int) -> ITensor | None:
        _int(index, "get_input(index)")
        return self.inputs[index] if 0 <= index < len(self.inputs) else None

    def get_output(self, index: int) -> ITensor | None:
        _int(index, "get_output(index)")
        return self._outputs[index] if 0 <= index < len(self._outputs) else None

    def set_input(self, index: int, tensor: ITensor) -> None:
        _int(index, "set_input(index)")
        _check(tensor, ITensor, "set_input(tensor)")
        limit = _MAX_INPUTS.get(self.kind, len(self.inputs))
        if not 0 <= index < limit:
            raise IndexError(f"{self.kind.name} layer: set_input index {index} out of range")
        while len(self.inputs) <= index:
            self.inputs.append(None)
        self.inputs[index] = tensor
        self.set_input_calls.append((index, tensor))
        self._network._forget_shapes(self)

    def __getattr__(self, key: str) -> Any:
        spec = _ATTRIBUTES[object.__getattribute__(self, "kind")]
        if key in spec:
            return self._attrs.get(key, spec[key][1])
        if key == "type":
            return self.kind
        raise AttributeError(f"{self.kind.name} layer has no attribute {key!r}")

    def __setattr__(self, key: str, value: Any) -> None:
        if key == "name":
            object.__setattr__(self, "_name", _check(value, str, "ILayer.name"))
            return
        spec = _ATTRIBUTES[self.kind]
        if key not in spec:
            raise AttributeError(f"{self.kind.name} layer has no settable attribute {key!r}")
        self._attrs[key] = spec[key][0](value, f"{self.kind.name}.{key}")
        self._network._forget_shapes(self)

    def weights(self) -> dict[str, Weights]:
        """Stand-in only: the layer's Weights by role (kernel, bias, shift, ...)."""
        return {k: v for k, v in self._attrs.items() if isinstance(v, Weights)}


class INetworkDefinition:
    __slots__ = ("_inputs", "_keep", "_layers", "_outputs", "_weight_names", "flags")

    def __init__(self, flags: int) -> None:
        self.flags = flags
        self._keep: list[Any] = []  # stand-in: arrays the ONNX importer's Weights point into
        self._layers: list[ILayer] = []
        self._inputs: list[ITensor] = []
        self._outputs: list[ITensor] = []
        self._weight_names: dict[tuple[DataType, int, int], str] = {}

    # stand-in records
    @property
    def strongly_typed(self) -> bool:
        return bool(self.flags & (1 << int(NetworkDefinitionCreationFlag.STRONGLY_TYPED)))

    @property
    def layers(self) -> list[ILayer]:
        return list(self._layers)

    @property
    def weight_names(self) -> dict[str, Weights]:
        """Stand-in only: name -> the (first) Weights of that key in use."""
        out: dict[str, Weights] = {}
        for weights in self._used_weights():
            name = self._weight_names.get(weights.key())
            if name is not None and name not in out:
                out[name] = weights
        return out

    def _used_weights(self) -> Iterable[Weights]:
        for layer in self._layers:
            yield from layer.weights().values()

    # INetworkDefinition API
    @property
    def num_layers(self) -> int:
        return len(self._layers)

    @property
    def num_inputs(self) -> int:
        return len(self._inputs)

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def get_layer(self, index: int) -> ILayer:
        return self._layers[_int(index, "get_layer(index)")]

    def get_input(self, index: int) -> ITensor:
        return self._inputs[_int(index, "get_input(index)")]

    def get_output(self, index: int) -> ITensor:
        return self._outputs[_int(index, "get_output(index)")]

    def _tensor(self, value: Any, what: str, *, min_rank: int = 0) -> ITensor:
        tensor: ITensor = _check(value, ITensor, what)
        if tensor._network is not self:
            raise ValueError(f"{what}: the tensor belongs to another network")
        rank = len(tensor.shape)
        if rank < min_rank:
            # TensorRT reports this at layer creation and returns no layer; the Python
            # binding then raises (a None layer has no get_output)
            raise ValueError(f"{what}: needs a tensor of rank >= {min_rank}, got rank {rank} "
                             f"{tensor.shape}")
        return tensor

    def _forget_shapes(self, layer: ILayer) -> None:
        """A layer changed after its output shape was inferred: infer everything again."""
        if layer._meta is not None:
            for each in self._layers:
                object.__setattr__(each, "_meta", None)

    def _add(self, kind: LayerType, inputs: Sequence[ITensor | None], **attrs: Any) -> ILayer:
        layer = ILayer(self, kind, inputs, **attrs)
        self._layers.append(layer)
        return layer

    def add_input(self, name: str, dtype: DataType, shape: Sequence[int]) -> ITensor:
        _check(name, str, "add_input(name)")
        _check(dtype, DataType, "add_input(dtype)")
        dims = _dims(shape, "add_input(shape)", allow_wildcard=True)
        if any(t.name == name for t in self._inputs):
            raise ValueError(f"add_input: an input named {name!r} exists")
        tensor = ITensor(self, None, name, dtype, dims)
        self._inputs.append(tensor)
        return tensor

    def mark_output(self, tensor: ITensor) -> None:
        self._outputs.append(self._tensor(tensor, "mark_output(tensor)"))

    def add_convolution_nd(self, input: ITensor, num_output_maps: int,
                           kernel_shape: Sequence[int], kernel: Weights,
                           bias: Weights | None = None) -> ILayer:
        shape = _dims(kernel_shape, "add_convolution_nd(kernel_shape)")
        x = self._tensor(input, "add_convolution_nd(input)", min_rank=len(shape) + 2)
        maps = _int(num_output_maps, "add_convolution_nd(num_output_maps)")
        if len(shape) not in (2, 3) or maps <= 0:
            raise ValueError(f"add_convolution_nd: kernel_shape {shape}, maps {maps}")
        return self._add(LayerType.CONVOLUTION, [x], num_output_maps=maps,
                         kernel_size_nd=shape,
                         kernel=_as_weights(kernel, "add_convolution_nd(kernel)"),
                         bias=_as_weights(bias, "add_convolution_nd(bias)", optional=True))

    def add_scale(self, input: ITensor, mode: ScaleMode, shift: Weights | None = None,
                  scale: Weights | None = None, power: Weights | None = None) -> ILayer:
        # the channel axis of add_scale is the third from last: rank 3 at least
        x = self._tensor(input, "add_scale(input)", min_rank=3)
        _check(mode, ScaleMode, "add_scale(mode)")
        return self._add(LayerType.SCALE, [x], mode=mode,
                         shift=_as_weights(shift, "add_scale(shift)", optional=True),
                         scale=_as_weights(scale, "add_scale(scale)", optional=True),
                         power=_as_weights(power, "add_scale(power)", optional=True),
                         channel_axis=len(x.shape) - 3)

    def add_scale_nd(self, input: ITensor, mode: ScaleMode, shift: Weights | None,
                     scale: Weights | None, power: Weights | None,
                     channel_axis: int) -> ILayer:
        x = self._tensor(input, "add_scale_nd(input)", min_rank=1)
        _check(mode, ScaleMode, "add_scale_nd(mode)")
        axis = _int(channel_axis, "add_scale_nd(channel_axis)")
        if not 0 <= axis < len(x.shape):
            raise ValueError(f"add_scale_nd: channel_axis {axis} outside rank {len(x.shape)}")
        return self._add(LayerType.SCALE, [x], mode=mode,
                         shift=_as_weights(shift, "add_scale_nd(shift)", optional=True),
                         scale=_as_weights(scale, "add_scale_nd(scale)", optional=True),
                         power=_as_weights(power, "add_scale_nd(power)", optional=True),
                         channel_axis=axis)

    def add_activation(self, input: ITensor, type: ActivationType) -> ILayer:
        x = self._tensor(input, "add_activation(input)")
        return self._add(LayerType.ACTIVATION, [x],
                         type=_check(type, ActivationType, "add_activation(type)"))

    def add_pooling_nd(self, input: ITensor, type: PoolingType,
                       window_size: Sequence[int]) -> ILayer:
        window = _dims(window_size, "add_pooling_nd(window_size)")
        x = self._tensor(input, "add_pooling_nd(input)", min_rank=len(window) + 1)
        return self._add(LayerType.POOLING, [x],
                         type=_check(type, PoolingType, "add_pooling_nd(type)"),
                         window_size_nd=window)

    def add_reduce(self, input: ITensor, op: ReduceOperation, axes: int,
                   keep_dims: bool) -> ILayer:
        x = self._tensor(input, "add_reduce(input)")
        if _int(axes, "add_reduce(axes)") >> len(x.shape) or axes <= 0:
            raise ValueError(f"add_reduce: axes mask {axes:#b} for rank {len(x.shape)}")
        return self._add(LayerType.REDUCE, [x], op=_check(op, ReduceOperation, "add_reduce(op)"),
                         axes=_int(axes, "add_reduce(axes)"),
                         keep_dims=_bool(keep_dims, "add_reduce(keep_dims)"))

    def add_shuffle(self, input: ITensor) -> ILayer:
        return self._add(LayerType.SHUFFLE, [self._tensor(input, "add_shuffle(input)")])

    def add_matrix_multiply(self, input0: ITensor, op0: MatrixOperation, input1: ITensor,
                            op1: MatrixOperation) -> ILayer:
        a = self._tensor(input0, "add_matrix_multiply(input0)", min_rank=2)
        b = self._tensor(input1, "add_matrix_multiply(input1)", min_rank=2)
        if len(a.shape) != len(b.shape):
            raise ValueError(f"add_matrix_multiply: ranks {len(a.shape)} and {len(b.shape)} "
                             "differ (without MatrixOperation.VECTOR)")
        return self._add(LayerType.MATRIX_MULTIPLY, [a, b],
                         op0=_check(op0, MatrixOperation, "add_matrix_multiply(op0)"),
                         op1=_check(op1, MatrixOperation, "add_matrix_multiply(op1)"))

    def add_elementwise(self, input1: ITensor, input2: ITensor,
                        op: ElementWiseOperation) -> ILayer:
        a = self._tensor(input1, "add_elementwise(input1)")
        b = self._tensor(input2, "add_elementwise(input2)")
        if len(a.shape) != len(b.shape):
            raise ValueError(f"add_elementwise: operands of rank {len(a.shape)} and "
                             f"{len(b.shape)}; TensorRT broadcasts only tensors of equal rank")
        return self._add(LayerType.ELEMENTWISE, [a, b],
                         op=_check(op, ElementWiseOperation, "add_elementwise(op)"))

    def add_unary(self, input: ITensor, op: UnaryOperation) -> ILayer:
        x = self._tensor(input, "add_unary(input)")
        return self._add(LayerType.UNARY, [x], op=_check(op, UnaryOperation, "add_unary(op)"))

    def add_constant(self, shape: Sequence[int], weights: Weights) -> ILayer:
        dims = _dims(shape, "add_constant(shape)")
        w = _as_weights(weights, "add_constant(weights)")
        if w.size != math.prod(dims):
            raise ValueError(f"add_constant: {w.size} weights do not fill shape {dims}")
        return self._add(LayerType.CONSTANT, [], weights=w, shape=dims)

    def add_cast(self, input: ITensor, to_type: DataType) -> ILayer:
        x = self._tensor(input, "add_cast(input)")
        return self._add(LayerType.CAST, [x], to_type=_check(to_type, DataType,
                                                             "add_cast(to_type)"))

    def add_slice(self, input: ITensor, start: Sequence[int], shape: Sequence[int],
                  stride: Sequence[int]) -> ILayer:
        x = self._tensor(input, "add_slice(input)")
        dims = [_dims(v, f"add_slice({k})") for k, v in
                (("start", start), ("shape", shape), ("stride", stride))]
        if any(len(d) != len(x.shape) for d in dims):
            raise ValueError(f"add_slice: start/shape/stride {dims} for rank {len(x.shape)}")
        return self._add(LayerType.SLICE, [x], start=dims[0], shape=dims[1], stride=dims[2])

    def add_identity(self, input: ITensor) -> ILayer:
        return self._add(LayerType.IDENTITY, [self._tensor(input, "add_identity(input)")])

    def set_weights_name(self, weights: Weights, name: str) -> bool:
        """TensorRT: 'The name must be set after the Weights are used in the network'; a
        name already given to other weights is refused."""
        _check(weights, Weights, "set_weights_name(weights)")
        _check(name, str, "set_weights_name(name)")
        if not any(w.key() == weights.key() for w in self._used_weights()):
            return False
        for key, existing in self._weight_names.items():
            if existing == name and key != weights.key():
                return False
        self._weight_names[weights.key()] = name
        return True


# ---------------------------------------------------------------------------- builder side


class ITimingCache:
    """Tactics by layer key, as TensorRT's cache keeps the timing result of each layer
    configuration (kind, attributes, input shapes and types; not names, not weight values)
    so a build that meets the same configuration replays the tactic instead of timing."""

    __slots__ = ("entries",)
    MAGIC = b"STANDIN-TIMING-CACHE:"

    def __init__(self, entries: dict[str, int] | None = None) -> None:
        self.entries: dict[str, int] = dict(entries or {})

    def serialize(self) -> bytes:
        return self.MAGIC + json.dumps(self.entries, sort_keys=True).encode()

    def combine(self, input_cache: ITimingCache, ignore_mismatch: bool) -> bool:
        """TensorRT: appends the input cache's entries; conflicting entries are skipped
        (this cache's stay). Every stand-in cache is of one version and device."""
        _check(input_cache, ITimingCache, "combine(input_cache)")
        _bool(ignore_mismatch, "combine(ignore_mismatch)")
        for key, tactic in input_cache.entries.items():
            self.entries.setdefault(key, tactic)
        return True


class IOptimizationProfile:
    __slots__ = ("shapes",)

    def __init__(self) -> None:
        self.shapes: dict[str, tuple[tuple[int, ...], ...]] = {}

    def set_shape(self, input: str, min: Sequence[int], opt: Sequence[int],
                  max: Sequence[int]) -> None:
        _check(input, str, "set_shape(input)")
        lo, mid, hi = (_dims(v, f"set_shape({k})") for k, v in
                       (("min", min), ("opt", opt), ("max", max)))
        if not len(lo) == len(mid) == len(hi) or not all(
            a <= b <= c for a, b, c in zip(lo, mid, hi, strict=True)
        ):
            raise ValueError(f"set_shape({input}): need min <= opt <= max, got {lo} {mid} {hi}")
        self.shapes[input] = (lo, mid, hi)

    def get_shape(self, input: str) -> list[tuple[int, ...]]:
        return list(self.shapes[_check(input, str, "get_shape(input)")])


class IInt8Calibrator:
    """Base of TensorRT's calibrators: a Python subclass must call the base __init__."""

    __slots__ = ("__dict__", "_initialised")

    def __init__(self) -> None:
        self._initialised = True

    def get_batch_size(self) -> int:
        raise NotImplementedError("pure virtual")

    def get_batch(self, names: list[str]) -> list[int] | None:
        raise NotImplementedError("pure virtual")

    def read_calibration_cache(self) -> Any:
        raise NotImplementedError("pure virtual")

    def write_calibration_cache(self, cache: Any) -> None:
        raise NotImplementedError("pure virtual")


class IInt8EntropyCalibrator2(IInt8Calibrator):
    __slots__ = ()


class IProfiler:
    """Base of a layer-time profiler: a Python subclass must call the base __init__ and
    override report_layer_time (TensorRT's docstring says both)."""

    __slots__ = ("__dict__", "_initialised")

    def __init__(self) -> None:
        self._initialised = True

    def report_layer_time(self, layer_name: str, ms: float) -> None:
        raise NotImplementedError("pure virtual")


def standin_layer_ms(layer: ILayer) -> float:
    """A stand-in layer's "time": fixed per kind, so a profile of it is reproducible."""
    return {LayerType.CONVOLUTION: 0.05, LayerType.MATRIX_MULTIPLY: 0.02}.get(layer.kind, 0.005)


class IBuilderConfig:
    __slots__ = ("_calibrator", "_flags", "_level", "_timing_cache", "_verbosity",
                 "memory_pool_limits", "profiles")

    def __init__(self) -> None:
        self._calibrator: IInt8Calibrator | None = None
        self._flags: set[BuilderFlag] = {BuilderFlag.TF32}  # TensorRT's default
        self._level = 3
        self._verbosity = ProfilingVerbosity.LAYER_NAMES_ONLY
        self.memory_pool_limits: dict[MemoryPoolType, int] = {}
        self.profiles: list[IOptimizationProfile] = []
        self._timing_cache: ITimingCache | None = None

    @staticmethod
    def _flag(flag: Any, what: str) -> BuilderFlag:
        # TensorRT 11's stand-in has its own, smaller BuilderFlag enum; same names
        if not isinstance(flag, _Enum) or type(flag).__name__ != "BuilderFlag":
            raise TypeError(f"{what}: incompatible argument: expected BuilderFlag, got {flag!r}")
        return BuilderFlag[flag.name]

    def set_flag(self, flag: BuilderFlag) -> None:
        self._flags.add(self._flag(flag, "set_flag(flag)"))

    def clear_flag(self, flag: BuilderFlag) -> None:
        self._flags.discard(self._flag(flag, "clear_flag(flag)"))

    def get_flag(self, flag: BuilderFlag) -> bool:
        return self._flag(flag, "get_flag(flag)") in self._flags

    @property
    def int8_calibrator(self) -> IInt8Calibrator | None:
        return self._calibrator

    @int8_calibrator.setter
    def int8_calibrator(self, value: IInt8Calibrator) -> None:
        calibrator = _check(value, IInt8Calibrator, "int8_calibrator")
        if not getattr(calibrator, "_initialised", False):
            raise TypeError("int8_calibrator: the subclass did not call the base __init__")
        self._calibrator = calibrator

    @property
    def builder_optimization_level(self) -> int:
        return self._level

    @builder_optimization_level.setter
    def builder_optimization_level(self, value: int) -> None:
        level = _int(value, "builder_optimization_level")
        if not 0 <= level <= 5:
            raise ValueError(f"builder_optimization_level {level} is outside 0-5")
        self._level = level

    @property
    def profiling_verbosity(self) -> ProfilingVerbosity:
        return self._verbosity

    @profiling_verbosity.setter
    def profiling_verbosity(self, value: ProfilingVerbosity) -> None:
        self._verbosity = _check(value, ProfilingVerbosity, "profiling_verbosity")

    def set_memory_pool_limit(self, pool: MemoryPoolType, pool_size: int) -> None:
        _check(pool, MemoryPoolType, "set_memory_pool_limit(pool)")
        self.memory_pool_limits[pool] = _int(pool_size, "set_memory_pool_limit(pool_size)")

    def add_optimization_profile(self, profile: IOptimizationProfile) -> int:
        _check(profile, IOptimizationProfile, "add_optimization_profile(profile)")
        if not profile.shapes:
            return -1
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def create_timing_cache(self, serialized_timing_cache: Any) -> ITimingCache:
        data = bytes(memoryview(serialized_timing_cache))  # any buffer, like py::buffer
        if not data:
            return ITimingCache()
        if not data.startswith(ITimingCache.MAGIC):
            raise ValueError("create_timing_cache: not a timing cache")
        return ITimingCache(json.loads(data[len(ITimingCache.MAGIC):]))

    def set_timing_cache(self, cache: ITimingCache, ignore_mismatch: bool) -> bool:
        _check(cache, ITimingCache, "set_timing_cache(cache)")
        _bool(ignore_mismatch, "set_timing_cache(ignore_mismatch)")
        self._timing_cache = cache
        return True

    def get_timing_cache(self) -> ITimingCache | None:
        return self._timing_cache


_PLANS: dict[bytes, tuple[INetworkDefinition, IBuilderConfig, list[int]]] = {}
_PLAN_IDS = itertools.count()
TACTICS_PER_LAYER = 3


def fastest_tactic(key: str, candidates: int) -> int:
    """Stand-in only: which of a layer configuration's candidate tactics (an index) timing
    finds fastest. TensorRT times them on the GPU, where noise can make another candidate
    win on another build; tests replace this function to make that happen."""
    return 0


def _tactic_value(key: str, index: int) -> int:
    """A candidate's tactic value: stable per layer configuration, like TensorRT's."""
    return int.from_bytes(hashlib.sha256(f"{key}#{index}".encode()).digest()[:8], "big")


def _timing_key(layer: ILayer, types: dict[int, DataType]) -> str:
    inputs = [(t.shape, types[t._id].name) for t in layer.inputs if t is not None]
    attrs = {name: (value.dtype.name, value.size) if isinstance(value, Weights) else value
             for name, value in sorted(layer._attrs.items())}
    return f"{layer.kind.name}|{inputs}|{attrs}"


def _choose_tactics(network: INetworkDefinition, config: IBuilderConfig) -> list[int]:
    """One tactic per layer: the config's timing cache's where it has the configuration
    (and the cache learns every tactic timed), else timed (`fastest_tactic`) once per
    configuration in this build, as TensorRT's builder keeps a cache of its own."""
    cache = config._timing_cache
    timed: dict[str, int] = {}
    types = _types(network)
    tactics = []
    for layer in network._layers:
        key = _timing_key(layer, types)
        if cache is not None and key in cache.entries:
            tactic = cache.entries[key]
        elif key in timed:
            tactic = timed[key]
        else:
            tactic = _tactic_value(key, fastest_tactic(key, TACTICS_PER_LAYER))
        timed[key] = tactic
        if cache is not None:
            cache.entries.setdefault(key, tactic)
        tactics.append(tactic)
    return tactics


class Builder:
    __slots__ = ("logger", "networks")

    def __init__(self, logger: ILogger) -> None:
        self.logger = _check(logger, ILogger, "Builder(logger)")
        self.networks: list[INetworkDefinition] = []

    def create_network(self, flags: int = 0) -> INetworkDefinition:
        network = INetworkDefinition(_int(flags, "create_network(flags)"))
        self.networks.append(network)
        return network

    def create_builder_config(self) -> IBuilderConfig:
        return IBuilderConfig()

    def create_optimization_profile(self) -> IOptimizationProfile:
        return IOptimizationProfile()

    def build_serialized_network(self, network: INetworkDefinition,
                                 config: IBuilderConfig) -> bytes | None:
        """Checks what TensorRT's builder checks, logs the reason and returns None on error."""
        _check(network, INetworkDefinition, "build_serialized_network(network)")
        _check(config, IBuilderConfig, "build_serialized_network(config)")
        try:
            _validate(network, config)
            if BuilderFlag.INT8 in config._flags:
                _calibrate(network, config)
        except StandInError as exc:
            self.logger.log(Severity.ERROR, str(exc))
            return None
        plan = b"STANDIN-PLAN:%d" % next(_PLAN_IDS)
        _PLANS[plan] = (network, config, _choose_tactics(network, config))
        return plan


def _calibrate(network: INetworkDefinition, config: IBuilderConfig) -> None:
    """Drive the calibrator as TensorRT's builder does: read the cache, else ask for
    batches by input name until get_batch returns None, reading each pointer's values
    (batch x the input's per-sample shape, float32), then write the cache."""
    calibrator = config._calibrator
    if calibrator is None:
        raise StandInError("INT8 without a calibrator: this network has no Q/DQ layers, so "
                           "TensorRT needs int8_calibrator (or dynamic ranges)")
    if calibrator.read_calibration_cache() is not None:
        return
    batch = calibrator.get_batch_size()
    names = [t.name for t in network._inputs]
    seen = 0
    while True:
        pointers = calibrator.get_batch(names)
        if pointers is None:
            break
        if len(pointers) != len(names) or not all(isinstance(p, int) for p in pointers):
            raise StandInError(f"calibrator: get_batch({names}) returned {pointers!r}")
        for tensor, pointer in zip(network._inputs, pointers, strict=True):
            per_sample = [d for d in tensor._declared_shape[1:]]
            count = batch * math.prod(per_sample)
            values = np.frombuffer(ctypes.string_at(pointer, 4 * count), np.float32)
            if not np.isfinite(values).all():
                raise StandInError("calibrator: a batch holds NaN or Inf")
        seen += 1
    if seen == 0:
        raise StandInError("calibrator: get_batch returned no batch at all")
    calibrator.write_calibration_cache(b"STANDIN-CALIBRATION:%d" % seen)


def _validate(network: INetworkDefinition, config: IBuilderConfig) -> None:
    if not network._inputs or not network._outputs:
        raise StandInError("network needs at least one input and one marked output")
    precision_flags = {BuilderFlag.FP16, BuilderFlag.BF16, BuilderFlag.INT8} & config._flags
    if network.strongly_typed and precision_flags:
        raise StandInError(f"strongly typed networks take no precision flags "
                           f"({sorted(f.name for f in precision_flags)})")
    shapes: dict[str, tuple[int, ...]] = {}
    for tensor in network._inputs:
        declared = tensor._declared_shape
        if -1 in declared:
            profile = next((p for p in config.profiles if tensor.name in p.shapes), None)
            if profile is None:
                raise StandInError(f"input {tensor.name} is dynamic but no optimization "
                                   "profile gives its shape")
            lo, opt, hi = profile.shapes[tensor.name]
            for d, a, c in zip(declared, lo, hi, strict=False):
                if len(lo) != len(declared) or (d != -1 and not a == c == d):
                    raise StandInError(f"profile {lo}..{hi} does not fit input "
                                       f"{tensor.name} {declared}")
            shapes[tensor.name] = opt
        else:
            shapes[tensor.name] = declared
    inputs = {name: torch.empty(shape, device="meta") for name, shape in shapes.items()}
    evaluate(network, inputs)  # shape and type inference; raises StandInError


# ---------------------------------------------------------------------------- runtime side


# Engine inspector vocabulary. A real engine's DETAILED JSON lists engine layers after
# fusion: "Name" joins the fused network layers' names with " + " (pointwise fusions read
# "PWN(a, b)"), "LayerType" is the kernel family ("CaskConvolution", "PointWiseV2",
# "Reformat", ...), "ParameterType" the operation, "TacticName" and "TacticValue" (a hex
# string) the tactic the build chose. The stand-in fuses nothing: one engine layer per
# network layer, its family from this table (the stand-in's choice, not a claim about which
# kernels TensorRT picks) and a tactic named after it.
_KERNEL_FAMILY = {
    LayerType.CONVOLUTION: "CaskConvolution", LayerType.POOLING: "CaskPooling",
    LayerType.MATRIX_MULTIPLY: "CaskGemmMatrixMultiply", LayerType.CAST: "Reformat",
    LayerType.SCALE: "Scale", LayerType.SHUFFLE: "Shuffle", LayerType.SLICE: "Slice",
    LayerType.CONSTANT: "Constant", LayerType.REDUCE: "Reduce",
    LayerType.ACTIVATION: "PointWiseV2", LayerType.ELEMENTWISE: "PointWiseV2",
    LayerType.UNARY: "PointWiseV2", LayerType.IDENTITY: "Reformat",
}
_PARAMETER_TYPE = {
    LayerType.CONVOLUTION: "Convolution", LayerType.POOLING: "Pooling",
    LayerType.MATRIX_MULTIPLY: "MatrixMultiply", LayerType.CAST: "Reformat",
    LayerType.SCALE: "Scale", LayerType.SHUFFLE: "Shuffle", LayerType.SLICE: "Slice",
    LayerType.CONSTANT: "Constant", LayerType.REDUCE: "Reduce",
    LayerType.ACTIVATION: "PointWise", LayerType.ELEMENTWISE: "PointWise",
    LayerType.UNARY: "PointWise", LayerType.IDENTITY: "Reformat",
}


class IEngineInspector:
    __slots__ = ("_engine",)

    def __init__(self, engine: ICudaEngine) -> None:
        self._engine = engine

    def get_engine_information(self, format: LayerInformationFormat) -> str:
        _check(format, LayerInformationFormat, "get_engine_information(format)")
        layers = self._engine._network._layers
        detailed = self._engine._config._verbosity == ProfilingVerbosity.DETAILED
        if format == LayerInformationFormat.ONELINE:
            return "\n".join(layer.name for layer in layers)
        entries: list[Any] = [
            {"Name": layer.name, "LayerType": _KERNEL_FAMILY[layer.kind],
             "ParameterType": _PARAMETER_TYPE[layer.kind],
             "TacticName": f"standin_{_KERNEL_FAMILY[layer.kind].lower()}_{tactic:016x}",
             "TacticValue": f"0x{tactic:016x}"} if detailed else layer.name
            for layer, tactic in zip(layers, self._engine._tactics, strict=True)
        ]
        return json.dumps({"Layers": entries, "Bindings": [INPUT.name for INPUT in
                                                           self._engine._io()]})


class ICudaEngine:
    __slots__ = ("_config", "_network", "_tactics", "refitted")

    def __init__(self, network: INetworkDefinition, config: IBuilderConfig,
                 tactics: list[int]) -> None:
        self._network = network
        self._config = config
        self._tactics = tactics  # per layer, what the build chose
        # refit replaces values here, keyed like TensorRT by the weights' name
        self.refitted: dict[str, torch.Tensor] = {}

    def _io(self) -> list[ITensor]:
        return [*self._network._inputs, *self._network._outputs]

    @property
    def num_layers(self) -> int:
        return len(self._network._layers)

    @property
    def num_io_tensors(self) -> int:
        return len(self._io())

    @property
    def refittable(self) -> bool:
        return BuilderFlag.REFIT in self._config._flags

    def get_tensor_name(self, index: int) -> str:
        return self._io()[_int(index, "get_tensor_name(index)")].name

    def _named(self, name: str) -> ITensor:
        _check(name, str, "name")
        for tensor in self._io():
            if tensor.name == name:
                return tensor
        raise KeyError(name)

    def get_tensor_mode(self, name: str) -> TensorIOMode:
        tensor = self._named(name)
        return TensorIOMode.INPUT if tensor in self._network._inputs else TensorIOMode.OUTPUT

    def get_tensor_dtype(self, name: str) -> DataType:
        return _types(self._network)[self._named(name)._id]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self._named(name).shape

    def create_engine_inspector(self) -> IEngineInspector:
        return IEngineInspector(self)

    def create_execution_context(self) -> IExecutionContext:
        return IExecutionContext(self)

    def evaluate(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Stand-in only: run the engine's network on the CPU, refitted weights included."""
        return evaluate(self._network, inputs, refitted=self.refitted)


class IExecutionContext:
    """Runs the engine on raw pointers like TensorRT: inputs are read from the addresses
    given with set_tensor_address (host memory here, device memory there) and outputs
    written to theirs. Stand-in rules mirror the documented ones: a dynamic input needs
    set_input_shape inside the profile, every I/O tensor needs an address."""

    __slots__ = ("_addresses", "_engine", "_profiler", "_shapes", "enqueue_emits_profile",
                 "enqueues")

    def __init__(self, engine: ICudaEngine) -> None:
        self._engine = engine
        self._addresses: dict[str, int] = {}
        self._shapes: dict[str, tuple[int, ...]] = {}
        self._profiler: IProfiler | None = None
        self.enqueue_emits_profile = True
        self.enqueues = 0  # stand-in record

    @property
    def profiler(self) -> IProfiler | None:
        return self._profiler

    @profiler.setter
    def profiler(self, value: IProfiler) -> None:
        _check(value, IProfiler, "profiler")
        if not getattr(value, "_initialised", False):
            raise TypeError("profiler: the subclass did not call IProfiler.__init__")
        if type(value).report_layer_time is IProfiler.report_layer_time:
            raise TypeError("profiler: report_layer_time is not overridden")
        self._profiler = value

    def _profile_fits(self, tensor: ITensor, shape: tuple[int, ...]) -> bool:
        declared = tensor._declared_shape
        if len(shape) != len(declared) or any(d not in (-1, s) for d, s in
                                              zip(declared, shape, strict=True)):
            return False
        if -1 not in declared:
            return True
        for profile in self._engine._config.profiles:
            if tensor.name in profile.shapes:
                lo, _, hi = profile.shapes[tensor.name]
                return all(a <= s <= c for a, s, c in zip(lo, shape, hi, strict=True))
        return False

    def set_input_shape(self, name: str, shape: Sequence[int]) -> bool:
        tensor = self._engine._named(name)
        dims = _dims(shape, "set_input_shape(shape)")
        if tensor not in self._engine._network._inputs or not self._profile_fits(tensor, dims):
            return False
        self._shapes[name] = dims
        return True

    def _input_shapes(self) -> dict[str, tuple[int, ...]] | None:
        out = {}
        for tensor in self._engine._network._inputs:
            shape = self._shapes.get(tensor.name, tensor._declared_shape)
            if -1 in shape:
                return None
            out[tensor.name] = shape
        return out

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        tensor = self._engine._named(name)
        shapes = self._input_shapes()
        if tensor in self._engine._network._inputs:
            return self._shapes.get(name, tensor._declared_shape)
        if shapes is None:
            return tensor.shape  # -1 where an input's shape is not set yet
        metas = {n: torch.empty(s, device="meta") for n, s in shapes.items()}
        return tuple(evaluate(self._engine._network, metas)[name].shape)

    def set_tensor_address(self, name: str, memory: int) -> bool:
        self._engine._named(name)
        self._addresses[name] = _int(memory, "set_tensor_address(memory)")
        return True

    def execute_async_v3(self, stream_handle: int) -> bool:
        _int(stream_handle, "execute_async_v3(stream_handle)")
        shapes = self._input_shapes()
        if shapes is None or set(self._addresses) != {t.name for t in self._engine._io()}:
            return False
        inputs = {}
        for tensor in self._engine._network._inputs:
            dtype = _TORCH_TYPES[tensor._declared_dtype]
            count = math.prod(shapes[tensor.name])
            raw = ctypes.string_at(self._addresses[tensor.name],
                                   count * _ITEMSIZE[tensor._declared_dtype])
            inputs[tensor.name] = torch.frombuffer(bytearray(raw), dtype=dtype).reshape(
                shapes[tensor.name])
        outputs = self._engine.evaluate(inputs)
        types = _types(self._engine._network)
        for tensor in self._engine._network._outputs:
            value = outputs[tensor.name].to(_TORCH_TYPES[types[tensor._id]]).contiguous()
            ctypes.memmove(self._addresses[tensor.name], value.data_ptr(),
                           value.numel() * value.element_size())
        self.enqueues += 1
        if self._profiler is not None and self.enqueue_emits_profile:
            # one report per engine layer and enqueue, by the layer's name (DETAILED)
            for layer in self._engine._network._layers:
                self._profiler.report_layer_time(layer.name, standin_layer_ms(layer))
        return True


class Runtime:
    __slots__ = ("logger",)

    def __init__(self, logger: ILogger) -> None:
        self.logger = _check(logger, ILogger, "Runtime(logger)")

    def deserialize_cuda_engine(self, serialized_engine: Any) -> ICudaEngine | None:
        data = bytes(memoryview(serialized_engine))
        if data not in _PLANS:
            self.logger.log(Severity.ERROR, "deserialize_cuda_engine: not a stand-in plan")
            return None
        return ICudaEngine(*_PLANS[data])


def _refit_groups(network: INetworkDefinition) -> list[set[str]]:
    """Weights that must be refitted together. The stand-in's rule, after TensorRT's
    documented behaviour that weights fused into one kernel are refitted as one: a layer's
    own weights form a group, and a convolution whose output only feeds a scale layer
    (the Conv+BatchNorm fusion) shares its group with that scale layer."""
    names = network._weight_names
    consumers: dict[int, list[ILayer]] = {}
    for layer in network._layers:
        for tensor in layer.inputs:
            if tensor is not None:
                consumers.setdefault(tensor._id, []).append(layer)
    groups: dict[int, set[str]] = {}
    for layer in network._layers:
        own = {names[w.key()] for w in layer.weights().values() if w.key() in names}
        groups.setdefault(id(layer), set()).update(own)
        if layer.kind == LayerType.CONVOLUTION:
            users = consumers.get(layer._outputs[0]._id, [])
            if len(users) == 1 and users[0].kind == LayerType.SCALE:
                merged = groups[id(layer)] | groups.setdefault(id(users[0]), set())
                groups[id(layer)] = groups[id(users[0])] = merged
    unique: list[set[str]] = []
    for group in groups.values():
        if group and all(group is not g for g in unique):
            unique.append(group)
    return unique


class Refitter:
    __slots__ = ("_engine", "_logger", "_pending")

    def __init__(self, engine: ICudaEngine, logger: ILogger) -> None:
        self._engine = _check(engine, ICudaEngine, "Refitter(engine)")
        self._logger = _check(logger, ILogger, "Refitter(logger)")
        self._pending: dict[str, Weights] = {}
        if not engine.refittable:
            logger.log(Severity.ERROR, "Refitter: the engine was not built refittable")

    def _named(self) -> dict[str, Weights]:
        return self._engine._network.weight_names if self._engine.refittable else {}

    def get_all_weights(self) -> list[str]:
        return sorted(self._named())

    def get_missing_weights(self) -> list[str]:
        """Names still to set before refit_cuda_engine: the rest of every group touched."""
        if not self._engine.refittable:
            return []
        missing: set[str] = set()
        for group in _refit_groups(self._engine._network):
            if group & set(self._pending):
                missing |= group - set(self._pending)
        return sorted(missing)

    def set_named_weights(self, name: str, weights: Weights) -> bool:
        _check(name, str, "set_named_weights(name)")
        _check(weights, Weights, "set_named_weights(weights)")
        named = self._named()
        if name not in named:
            self._logger.log(Severity.ERROR, f"refit: no weights named {name!r}")
            return False
        old = named[name]
        if (old.dtype, old.size) != (weights.dtype, weights.size):
            self._logger.log(Severity.ERROR, f"refit: {name!r} needs {old.size} {old.dtype.name}"
                             f" values, got {weights.size} {weights.dtype.name}")
            return False
        self._pending[name] = weights
        return True

    def refit_cuda_engine(self) -> bool:
        if not self._engine.refittable or self.get_missing_weights():
            if self._engine.refittable:
                self._logger.log(Severity.ERROR, "refit: weights missing: "
                                 + ", ".join(self.get_missing_weights()[:5]))
            return False
        for name, weights in self._pending.items():
            self._engine.refitted[name] = weights.values()
        self._pending.clear()
        return True


# ---------------------------------------------------------------------------- evaluation


def _order(network: INetworkDefinition) -> list[ILayer]:
    """Layers in dependency order (set_input may wire a layer to one created after it)."""
    producer = {id(layer._outputs[0]): layer for layer in network._layers}
    state: dict[int, int] = {}  # 1: on the current path, 2: done
    order: list[ILayer] = []
    for root in network._layers:
        stack: list[tuple[ILayer, int]] = [(root, 0)]
        while stack:
            layer, next_input = stack.pop()
            if next_input == 0:
                if state.get(id(layer)) == 2:
                    continue
                state[id(layer)] = 1
            if next_input < len(layer.inputs):
                stack.append((layer, next_input + 1))
                tensor = layer.inputs[next_input]
                if tensor is None:
                    raise StandInError(f"layer {layer.name}: input {next_input} was never set")
                parent = producer.get(id(tensor))
                if parent is not None:
                    if state.get(id(parent)) == 1:
                        raise StandInError(f"layer {layer.name}: the network has a cycle")
                    if state.get(id(parent)) != 2:
                        stack.append((parent, 0))
                continue
            state[id(layer)] = 2
            order.append(layer)
    return order


def _types(network: INetworkDefinition) -> dict[int, DataType]:
    types = {t._id: t._declared_dtype for t in network._inputs}
    for layer in _order(network):
        types[layer._outputs[0]._id] = _layer_type(network, layer, types)
    return types


def _layer_type(network: INetworkDefinition, layer: ILayer, types: dict[int, DataType]) -> DataType:
    """TensorRT's type rules for the layers we use; mismatches are build errors."""
    kind = layer.kind
    ins = [types[t._id] for t in layer.inputs if t is not None]
    strong = network.strongly_typed
    if kind == LayerType.CONSTANT:
        return layer.weights()["weights"].dtype
    if kind == LayerType.CAST:
        return layer.to_type
    if ins[0] not in _FLOAT_TYPES:
        raise StandInError(f"layer {layer.name}: input type {ins[0].name} is not a float type")
    if kind in (LayerType.ELEMENTWISE, LayerType.MATRIX_MULTIPLY) and len(set(ins)) != 1:
        raise StandInError(f"layer {layer.name}: operand types differ "
                           f"({', '.join(t.name for t in ins)})")
    if kind == LayerType.CONVOLUTION and len(set(ins)) != 1:
        raise StandInError(f"layer {layer.name}: kernel/bias tensors must have the input's "
                           f"type ({', '.join(t.name for t in ins)})")
    if strong:
        for role, weights in layer.weights().items():
            if not weights.is_empty and weights.dtype != ins[0]:
                raise StandInError(f"layer {layer.name}: strongly typed, {role} weights are "
                                   f"{weights.dtype.name} but the input is {ins[0].name}")
    return ins[0]


def _weight_tensor(weights: Weights, layer: ILayer, role: str,
                   refitted: dict[str, torch.Tensor], names: dict[tuple[Any, ...], str],
                   device: str) -> torch.Tensor:
    name = names.get(weights.key())
    values = refitted[name] if name is not None and name in refitted else weights.values()
    if weights.dtype == DataType.HALF:
        values = values.half().float()
    return values.to(device)


_DYNAMIC = 7919  # a dynamic dimension's stand-in size during shape inference (a prime)


def _meta(tensor: ITensor) -> torch.Tensor:
    """The tensor as a meta tensor: shape inference by evaluating its layer (cached)."""
    if tensor._producer is None:
        dims = [_DYNAMIC if d == -1 else d for d in tensor._declared_shape]
        return torch.empty(dims, device="meta")
    layer = tensor._producer
    if layer._meta is None:
        values = {t._id: _meta(t) for t in layer.inputs if t is not None}
        try:
            out = _run_layer(layer, values, {}, {}, "meta")
        except StandInError:
            raise
        except (RuntimeError, ValueError, IndexError) as exc:
            raise StandInError(f"layer {layer.name} ({layer.kind.name}): {exc}") from exc
        object.__setattr__(layer, "_meta", out)
    return layer._meta


def evaluate(network: INetworkDefinition, inputs: dict[str, torch.Tensor], *,
             refitted: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """Run the recorded network with torch ops (float32 arithmetic, declared types checked).

    Values at half/bf16 casts are rounded to that type, and fp16 weights carry their fp16
    values; otherwise arithmetic is float32, so numerical comparisons test the wiring, not
    TensorRT's kernels. With meta tensors it is shape and type inference only.
    """
    refitted = refitted or {}
    names = network._weight_names
    types = _types(network)
    values: dict[int, torch.Tensor] = {}
    device = "cpu"
    for tensor in network._inputs:
        if tensor.name not in inputs:
            raise StandInError(f"no value for input {tensor.name}")
        x = inputs[tensor.name]
        device = str(x.device.type)
        declared = tensor._declared_shape
        if len(declared) != x.dim() or any(d not in (-1, s) for d, s in
                                           zip(declared, x.shape, strict=True)):
            raise StandInError(f"input {tensor.name}: shape {tuple(x.shape)} does not match "
                               f"{declared}")
        dtype = _TORCH_TYPES[tensor._declared_dtype]
        values[tensor._id] = x.to(dtype).float()
    for layer in _order(network):
        try:
            out = _run_layer(layer, values, refitted, names, device)
        except StandInError:
            raise
        except (RuntimeError, ValueError, IndexError) as exc:
            raise StandInError(f"layer {layer.name} ({layer.kind.name}): {exc}") from exc
        if layer.kind == LayerType.CAST:
            out = out.to(_TORCH_TYPES[layer.to_type]).float()
        values[layer._outputs[0]._id] = out
    del types  # computed for its checks
    return {t.name: values[t._id] for t in network._outputs}


def _broadcast_check(layer: ILayer, a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dim() != b.dim():
        raise StandInError(f"layer {layer.name}: operands have rank {a.dim()} and {b.dim()}; "
                           "TensorRT broadcasts only tensors of equal rank")
    for x, y in zip(a.shape, b.shape, strict=True):
        if x != y and 1 not in (x, y):
            raise StandInError(f"layer {layer.name}: shapes {tuple(a.shape)} and "
                               f"{tuple(b.shape)} do not broadcast")


def _run_layer(layer: ILayer, values: dict[int, torch.Tensor], refitted: dict[str, torch.Tensor],
               names: dict[tuple[Any, ...], str], device: str) -> torch.Tensor:
    kind = layer.kind
    ins = [values[t._id] for t in layer.inputs if t is not None]

    def w(role: str) -> torch.Tensor:
        return _weight_tensor(layer.weights()[role], layer, role, refitted, names, device)

    if kind == LayerType.CONSTANT:
        return w("weights").reshape(layer.shape)
    x = ins[0]
    if kind == LayerType.CONVOLUTION:
        k = tuple(layer.kernel_size_nd)
        groups = layer.num_groups
        cin = x.shape[1]
        kernel_w, bias_w = layer.weights()["kernel"], layer.weights()["bias"]
        has_kernel_input = len(layer.inputs) > 1 and layer.inputs[1] is not None
        has_bias_input = len(layer.inputs) > 2 and layer.inputs[2] is not None
        if has_kernel_input == (not kernel_w.is_empty):
            raise StandInError(f"layer {layer.name}: the kernel must come from exactly one of "
                               "kernel weights or set_input(1) (with empty weights)")
        if has_bias_input and not bias_w.is_empty:
            raise StandInError(f"layer {layer.name}: set_input(2) needs empty bias weights")
        shape = (layer.num_output_maps, cin // groups, *k)
        kernel = ins[1] if has_kernel_input else w("kernel")
        if kernel.numel() != math.prod(shape):
            raise StandInError(f"layer {layer.name}: kernel has {kernel.numel()} values, "
                               f"needs {shape}")
        kernel = kernel.reshape(shape)
        bias = ins[2] if has_bias_input else (None if bias_w.is_empty else w("bias"))
        if bias is not None:
            if bias.numel() != layer.num_output_maps:
                raise StandInError(f"layer {layer.name}: bias has {bias.numel()} values")
            bias = bias.reshape(-1)
        stride = layer.stride_nd or (1,) * len(k)
        padding = layer.padding_nd or (0,) * len(k)
        dilation = layer.dilation_nd or (1,) * len(k)
        return F.conv2d(x, kernel, bias, stride, padding, dilation, groups)
    if kind == LayerType.SCALE:
        if layer.mode != ScaleMode.CHANNEL:
            raise StandInError("stand-in evaluates CHANNEL scale only")
        axis = layer.channel_axis
        channels = x.shape[axis]
        view = tuple(channels if d == axis else 1 for d in range(x.dim()))
        parts = {}
        for role, default in (("scale", 1.0), ("shift", 0.0), ("power", 1.0)):
            weights = layer.weights()[role]
            if weights.is_empty:
                parts[role] = torch.full(view, default, device=device)
            else:
                if weights.size != channels:
                    raise StandInError(f"layer {layer.name}: {role} has {weights.size} values "
                                       f"for {channels} channels")
                parts[role] = w(role).reshape(view)
        return torch.pow(x * parts["scale"] + parts["shift"], parts["power"])
    if kind == LayerType.ACTIVATION:
        if layer.type != ActivationType.RELU:
            raise StandInError("stand-in evaluates RELU only")
        return torch.relu(x)
    if kind == LayerType.POOLING:
        window = tuple(layer.window_size_nd)
        stride = layer.stride_nd or (1,) * len(window)
        padding = layer.padding_nd or (0,) * len(window)
        if layer.type == PoolingType.MAX:
            return F.max_pool2d(x, window, stride, padding)
        return F.avg_pool2d(x, window, stride, padding,
                            count_include_pad=not layer.average_count_excludes_padding)
    if kind == LayerType.REDUCE:
        axes = [d for d in range(x.dim()) if layer.axes >> d & 1]
        if not axes or layer.axes >> x.dim():
            raise StandInError(f"layer {layer.name}: axes mask {layer.axes:#b} for rank {x.dim()}")
        ops = {ReduceOperation.AVG: torch.mean, ReduceOperation.SUM: torch.sum,
               ReduceOperation.MAX: torch.amax, ReduceOperation.MIN: torch.amin}
        return ops[layer.op](x, dim=axes, keepdim=layer.keep_dims)  # type: ignore[operator]
    if kind == LayerType.SHUFFLE:
        if layer.first_transpose is not None:
            x = x.permute(layer.first_transpose)
        if layer.reshape_dims is not None:
            dims = list(layer.reshape_dims)
            if layer.zero_is_placeholder:
                dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
            x = x.reshape(dims)
        if layer.second_transpose is not None:
            x = x.permute(layer.second_transpose)
        return x
    if kind == LayerType.MATRIX_MULTIPLY:
        a, b = ins
        if a.dim() != b.dim():
            raise StandInError(f"layer {layer.name}: matmul operands have rank {a.dim()} and "
                               f"{b.dim()}")
        if layer.op0 == MatrixOperation.TRANSPOSE:
            a = a.transpose(-1, -2)
        if layer.op1 == MatrixOperation.TRANSPOSE:
            b = b.transpose(-1, -2)
        return torch.matmul(a, b)
    if kind == LayerType.ELEMENTWISE:
        a, b = ins
        _broadcast_check(layer, a, b)
        ew = {ElementWiseOperation.SUM: torch.add, ElementWiseOperation.PROD: torch.mul,
              ElementWiseOperation.SUB: torch.sub, ElementWiseOperation.DIV: torch.div,
              ElementWiseOperation.MAX: torch.maximum, ElementWiseOperation.MIN: torch.minimum,
              ElementWiseOperation.POW: torch.pow}
        return ew[layer.op](a, b)  # type: ignore[operator]
    if kind == LayerType.UNARY:
        unary = {UnaryOperation.SQRT: torch.sqrt, UnaryOperation.EXP: torch.exp,
                 UnaryOperation.LOG: torch.log, UnaryOperation.ABS: torch.abs,
                 UnaryOperation.NEG: torch.neg, UnaryOperation.RECIP: torch.reciprocal}
        return unary[layer.op](x)
    if kind == LayerType.SLICE:
        for dim, (first, size, step) in enumerate(zip(layer.start, layer.shape, layer.stride,
                                                      strict=True)):
            last = first + (size - 1) * step
            if size and not (0 <= first < x.shape[dim] and 0 <= last < x.shape[dim]):
                raise StandInError(f"layer {layer.name}: slice reads outside dimension {dim}")
            index = first + torch.arange(size, device=x.device) * step
            x = x.index_select(dim, index)
        return x
    if kind in (LayerType.CAST, LayerType.IDENTITY):
        return x
    raise StandInError(f"stand-in cannot evaluate {kind.name}")


# ---------------------------------------------------------------------------- ONNX parser


class ParserError:
    __slots__ = ("_desc",)

    def __init__(self, desc: str) -> None:
        self._desc = desc

    def desc(self) -> str:
        return self._desc


def _onnx_attrs(node: Any) -> dict[str, Any]:
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _symmetric(pads: Sequence[int], what: str) -> tuple[int, ...]:
    half = len(pads) // 2
    if list(pads[:half]) != list(pads[half:]):
        raise StandInError(f"{what}: asymmetric pads {list(pads)} (stand-in imports symmetric)")
    return tuple(int(p) for p in pads[:half])


def _onnx_weight_values(proto: Any) -> dict[str, np.ndarray]:
    """Every weight the stand-in parser builds, by the name it gives it: conv and Gemm
    initializers under their own names; BatchNormalization folded on the host into
    '<scale initializer>' (the per-channel scale) and '<bias initializer>' (the shift)."""
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    out: dict[str, np.ndarray] = {}
    for node in proto.graph.node:
        if node.op_type in ("Conv", "Gemm"):
            for name in node.input[1:]:
                if name:
                    out[name] = np.ascontiguousarray(inits[name], np.float32)
        elif node.op_type == "BatchNormalization":
            gamma, beta, mean, var = (inits[n].astype(np.float64) for n in node.input[1:5])
            eps = float(_onnx_attrs(node).get("epsilon", 1e-5))
            scale = gamma / np.sqrt(var + eps)
            out[node.input[1]] = np.ascontiguousarray(scale, np.float32)
            out[node.input[2]] = np.ascontiguousarray(beta - mean * scale, np.float32)
    return out


def _out(layer: ILayer) -> ITensor:
    tensor = layer.get_output(0)
    assert tensor is not None
    return tensor


def _import_onnx(network: INetworkDefinition, proto: Any) -> None:
    """Fill `network` from an ONNX graph the way TensorRT's parser maps these ops: conv
    and Gemm initializers become Weights named after the initializer, BatchNormalization
    a per-channel scale layer. Ops outside a ResNet's set are an error, as an op without
    an importer is for TensorRT."""
    import onnx

    weights = _onnx_weight_values(proto)
    inits = {t.name for t in proto.graph.initializer}
    values: dict[str, ITensor] = {}
    held: list[Weights] = []

    def w(name: str) -> Weights:
        item = Weights(weights[name])
        held.append(item)
        return item

    def named(layer: ILayer, roles: dict[str, str]) -> None:
        for role, name in roles.items():
            network.set_weights_name(layer.weights()[role], name)

    for tensor in proto.graph.input:
        if tensor.name in inits:
            continue
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1
                     for d in tensor.type.tensor_type.shape.dim)
        dtype = {onnx.TensorProto.FLOAT: DataType.FLOAT,
                 onnx.TensorProto.FLOAT16: DataType.HALF}[tensor.type.tensor_type.elem_type]
        values[tensor.name] = network.add_input(tensor.name, dtype, dims)
    for node in proto.graph.node:
        attrs = _onnx_attrs(node)
        op = node.op_type
        if op not in ("Conv", "BatchNormalization", "Relu", "MaxPool", "GlobalAveragePool",
                      "Flatten", "Gemm", "Add"):
            raise StandInError(f"no importer for ONNX op {op} (node {node.name})")
        x = values.get(node.input[0])
        if x is None:
            raise StandInError(f"{op} {node.name}: input {node.input[0]!r} is not a tensor")
        if op == "Conv":
            kernel = weights[node.input[1]]
            bias_name = node.input[2] if len(node.input) > 2 and node.input[2] else None
            layer = network.add_convolution_nd(x, int(kernel.shape[0]), kernel.shape[2:],
                                               w(node.input[1]),
                                               w(bias_name) if bias_name else Weights())
            layer.stride_nd = tuple(attrs.get("strides", (1, 1)))
            layer.padding_nd = _symmetric(attrs.get("pads", (0, 0, 0, 0)), node.name)
            layer.dilation_nd = tuple(attrs.get("dilations", (1, 1)))
            layer.num_groups = int(attrs.get("group", 1))
            named(layer, {"kernel": node.input[1], **({"bias": bias_name} if bias_name else {})})
        elif op == "BatchNormalization":
            layer = network.add_scale_nd(x, ScaleMode.CHANNEL, w(node.input[2]),
                                         w(node.input[1]), Weights(), 1)
            named(layer, {"shift": node.input[2], "scale": node.input[1]})
        elif op == "Relu":
            layer = network.add_activation(x, ActivationType.RELU)
        elif op == "MaxPool":
            layer = network.add_pooling_nd(x, PoolingType.MAX, tuple(attrs["kernel_shape"]))
            layer.stride_nd = tuple(attrs.get("strides", (1, 1)))
            layer.padding_nd = _symmetric(attrs.get("pads", (0, 0, 0, 0)), node.name)
        elif op == "GlobalAveragePool":
            layer = network.add_reduce(x, ReduceOperation.AVG, (1 << 2) | (1 << 3), True)
        elif op == "Flatten":
            if int(attrs.get("axis", 1)) != 1:
                raise StandInError(f"Flatten {node.name}: axis {attrs['axis']}")
            layer = network.add_shuffle(x)
            layer.reshape_dims = (0, -1)
        elif op == "Gemm":
            if int(attrs.get("transB", 0)) != 1 or int(attrs.get("transA", 0)) != 0:
                raise StandInError(f"Gemm {node.name}: only transB=1")
            const = network.add_constant(weights[node.input[1]].shape, w(node.input[1]))
            named(const, {"weights": node.input[1]})
            layer = network.add_matrix_multiply(x, MatrixOperation.NONE, _out(const),
                                                MatrixOperation.TRANSPOSE)
            if len(node.input) > 2 and node.input[2]:
                bias = weights[node.input[2]]
                bconst = network.add_constant((1, int(bias.size)), w(node.input[2]))
                named(bconst, {"weights": node.input[2]})
                layer = network.add_elementwise(_out(layer), _out(bconst),
                                                ElementWiseOperation.SUM)
        else:  # Add
            layer = network.add_elementwise(x, values[node.input[1]], ElementWiseOperation.SUM)
        out = _out(layer)
        out.name = node.output[0]
        values[node.output[0]] = out
    for output in proto.graph.output:
        network.mark_output(values[output.name])
    network._keep = held


class OnnxParser:
    __slots__ = ("_errors", "_logger", "_network")

    def __init__(self, network: INetworkDefinition, logger: ILogger) -> None:
        self._network = _check(network, INetworkDefinition, "OnnxParser(network)")
        self._logger = _check(logger, ILogger, "OnnxParser(logger)")
        self._errors: list[ParserError] = []

    @property
    def num_errors(self) -> int:
        return len(self._errors)

    def get_error(self, index: int) -> ParserError:
        return self._errors[_int(index, "get_error(index)")]

    def parse_from_file(self, model: str) -> bool:
        import onnx

        _check(model, str, "parse_from_file(model)")
        try:
            _import_onnx(self._network, onnx.load(model))
        except (StandInError, KeyError, ValueError, TypeError) as exc:
            self._errors.append(ParserError(str(exc)))
            return False
        return True


class OnnxParserRefitter:
    __slots__ = ("_errors", "_logger", "_refitter")

    def __init__(self, refitter: Refitter, logger: ILogger) -> None:
        self._refitter = _check(refitter, Refitter, "OnnxParserRefitter(refitter)")
        self._logger = _check(logger, ILogger, "OnnxParserRefitter(logger)")
        self._errors: list[ParserError] = []

    @property
    def num_errors(self) -> int:
        return len(self._errors)

    def get_error(self, index: int) -> ParserError:
        return self._errors[_int(index, "get_error(index)")]

    def refit_from_file(self, model: str) -> bool:
        import onnx

        values = _onnx_weight_values(onnx.load(_check(model, str, "refit_from_file(model)")))
        for name in self._refitter.get_all_weights():
            if name not in values:
                self._errors.append(ParserError(f"{name}: not in {model}"))
                return False
            if not self._refitter.set_named_weights(name, Weights(values[name])):
                self._errors.append(ParserError(f"{name}: refused"))
                return False
        return True


# ---------------------------------------------------------------------------- the module object


class TensorRTStandIn:
    """What tests pass where the product passes the `tensorrt` module.

    Attribute access mirrors `import tensorrt as trt`; anything the stand-in does not
    implement raises AttributeError naming it, so a converter using more of TensorRT than
    is mirrored here fails loudly instead of silently passing.
    """

    __version__ = "0.0.0-standin"
    DataType = DataType
    float32 = DataType.FLOAT
    float16 = DataType.HALF
    bfloat16 = DataType.BF16
    int32 = DataType.INT32
    int64 = DataType.INT64
    int8 = DataType.INT8
    bool = DataType.BOOL
    NetworkDefinitionCreationFlag = NetworkDefinitionCreationFlag
    BuilderFlag = BuilderFlag
    MemoryPoolType = MemoryPoolType
    ProfilingVerbosity = ProfilingVerbosity
    LayerInformationFormat = LayerInformationFormat
    TensorIOMode = TensorIOMode
    LayerType = LayerType
    ActivationType = ActivationType
    PoolingType = PoolingType
    ScaleMode = ScaleMode
    ElementWiseOperation = ElementWiseOperation
    UnaryOperation = UnaryOperation
    ReduceOperation = ReduceOperation
    MatrixOperation = MatrixOperation
    ILogger = ILogger
    Logger = Logger
    Weights = Weights
    Builder = Builder
    Runtime = Runtime
    Refitter = Refitter
    IInt8Calibrator = IInt8Calibrator
    IInt8EntropyCalibrator2 = IInt8EntropyCalibrator2
    IProfiler = IProfiler
    IBuilderConfig = IBuilderConfig
    ICudaEngine = ICudaEngine
    IExecutionContext = IExecutionContext
    EngineInspector = IEngineInspector  # TensorRT spells it without the I
    IOptimizationProfile = IOptimizationProfile
    ITimingCache = ITimingCache
    OnnxParser = OnnxParser
    OnnxParserRefitter = OnnxParserRefitter
    ParserError = ParserError
    ITensor = ITensor
    ILayer = ILayer
    INetworkDefinition = INetworkDefinition

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(f"the TensorRT stand-in does not implement trt.{name}; mirror it "
                             "from the TensorRT 10 Python API if the converter needs it")


class _Builder11(Builder):
    def create_network(self, flags: int = 0) -> INetworkDefinition:
        # TensorRT 11: every network is strongly typed (the flag is kept, deprecated)
        strong = 1 << int(NetworkDefinitionCreationFlag.STRONGLY_TYPED)
        return super().create_network(_int(flags, "create_network(flags)") | strong)


class _BuilderFlag11(_Enum):
    REFIT = 4
    TF32 = 6
    REFIT_IDENTICAL = 20


_BuilderFlag11.__name__ = "BuilderFlag"


class TensorRT11StandIn(TensorRTStandIn):
    """TensorRT 11's surface for precision: weakly typed networks and FP16/BF16 flags are gone."""

    __version__ = "11.0.0-standin"
    BuilderFlag = _BuilderFlag11  # type: ignore[assignment]
    Builder = _Builder11
