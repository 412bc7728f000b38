"""The PyTorch module traced and emitted layer by layer into a TensorRT network definition,
with weights as constant arrays or as tensors (the Torch-TensorRT 2.6-2.8 behaviours)."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    import tensorrt


from benchmarks.trt_options import (
    _NUMPY_DTYPES,
    INPUT_NAME,
    OUTPUT_NAME,
    TENSOR_CONV_MODES,
    ConversionError,
    ConversionReport,
    ConverterOptions,
    UnsupportedOp,
)


def named_weight_values(model: nn.Module, *, fold_bn: bool = False,
                        mode: str = "trt-2.8") -> dict[str, torch.Tensor]:
    """Every named weight a `refit` network of `mode` carries, from the model's state.

    Names follow the module paths: '<conv>.weight'/'<conv>.bias' (BN folded in when
    `fold_bn`), '<linear>.weight'/'<linear>.bias', and for BatchNorm '<bn>.scale',
    '<bn>.shift', '<bn>.power' (trt-2.8) or '<bn>.weight', '<bn>.bias',
    '<bn>.running_mean', '<bn>.running_var', '<bn>.eps' (trt-2.6, trt-2.7).
    """
    return _graph_weight_values(_trace(model), fold_bn=fold_bn, mode=mode)


def batchnorm_constants(bn: nn.BatchNorm2d) -> dict[str, torch.Tensor]:
    """The five constants of the elementwise BatchNorm (trt-2.6/2.7), by role; eps rank 0."""
    if bn.running_mean is None or bn.running_var is None:
        raise ConversionError("BatchNorm2d without running statistics cannot be converted")
    channels = int(bn.num_features)
    return {
        "weight": bn.weight.detach() if bn.weight is not None else torch.ones(channels),
        "bias": bn.bias.detach() if bn.bias is not None else torch.zeros(channels),
        "running_mean": bn.running_mean.detach(),
        "running_var": bn.running_var.detach(),
        "eps": torch.tensor(float(bn.eps)),
    }


def _graph_weight_values(
    graph_module: torch.fx.GraphModule, *, fold_bn: bool, mode: str
) -> dict[str, torch.Tensor]:
    folds = _bn_folds(graph_module) if fold_bn else {}
    values: dict[str, torch.Tensor] = {}
    for node in graph_module.graph.nodes:
        if node.op != "call_module":
            continue
        module = graph_module.get_submodule(node.target)
        if isinstance(module, nn.Conv2d):
            bn = folds.get(node)
            kernel, bias = conv_parameters(module, bn[1] if bn else None)
            values[f"{node.target}.weight"] = kernel
            if bias is not None:
                values[f"{node.target}.bias"] = bias
        elif isinstance(module, nn.BatchNorm2d) and not any(
            n is node for n, _ in folds.values()
        ):
            if mode == "trt-2.8":
                scale, shift = batchnorm_scale_shift(module)
                values[f"{node.target}.scale"] = scale
                values[f"{node.target}.shift"] = shift
                values[f"{node.target}.power"] = torch.ones_like(scale)
            else:
                for role, value in batchnorm_constants(module).items():
                    values[f"{node.target}.{role}"] = value
        elif isinstance(module, nn.Linear):
            values[f"{node.target}.weight"] = module.weight.detach()
            if module.bias is not None:
                values[f"{node.target}.bias"] = module.bias.detach().reshape(1, -1)
    return values


# arithmetic shared by build and refit


def batchnorm_scale_shift(bn: nn.BatchNorm2d) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode BN as y = x*scale + shift, per channel, computed in float64."""
    if bn.running_mean is None or bn.running_var is None:
        raise ConversionError("BatchNorm2d without running statistics cannot be converted")
    mean = bn.running_mean.detach().double()
    var = bn.running_var.detach().double()
    gamma = bn.weight.detach().double() if bn.weight is not None else torch.ones_like(mean)
    beta = bn.bias.detach().double() if bn.bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(var + bn.eps)
    shift = beta - mean * scale
    return scale.float(), shift.float()


def conv_parameters(
    conv: nn.Conv2d, bn: nn.BatchNorm2d | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The conv's kernel and bias, with a following BN folded in when given."""
    kernel = conv.weight.detach()
    bias = conv.bias.detach() if conv.bias is not None else None
    if bn is None:
        return kernel, bias
    scale, shift = batchnorm_scale_shift(bn)
    folded = (kernel.double() * scale.double().reshape(-1, 1, 1, 1)).float()
    base = bias.double() if bias is not None else torch.zeros_like(scale, dtype=torch.float64)
    return folded, (base * scale.double() + shift.double()).float()


# int8 calibration


def make_logger(trt: Any) -> Any:
    """A TensorRT logger that also keeps error messages, so a failed build can say why."""

    class _KeepingLogger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            if getattr(severity, "name", str(severity)).endswith("ERROR"):
                self.errors.append(str(msg))

    return _KeepingLogger()


def trt_dtype(trt: Any, dtype: torch.dtype) -> Any:
    table = {torch.float32: trt.float32, torch.float16: trt.float16,
             torch.bfloat16: trt.bfloat16}
    if dtype not in table:
        raise ConversionError(f"dtype {dtype} has no TensorRT counterpart here")
    return table[dtype]


def _precision_dtype(precision: str) -> torch.dtype:
    # int8: the network's input, output and weights stay float32; the INT8 flag and the
    # calibrator let the builder choose int8 kernels
    table = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
             "int8": torch.float32}
    if precision not in table:
        raise ConversionError(f"precision: {precision!r} is not one of fp32, fp16, bf16")
    return table[precision]


def _to_weights(trt: Any, value: torch.Tensor, dtype: torch.dtype, keep: list[Any]) -> Any:
    """trt.Weights over a contiguous CPU copy of `value` in `dtype`, kept alive in `keep`.

    numpy has no bfloat16, so bf16 goes through the (type, pointer, count) constructor over
    a torch CPU tensor; the tensor itself is what stays alive.
    """
    host = value.detach().to(device="cpu", dtype=dtype).contiguous()
    if dtype in _NUMPY_DTYPES:
        array = np.ascontiguousarray(host.numpy())
        keep.append(array)
        return trt.Weights(array)
    if dtype == torch.bfloat16:
        keep.append(host)
        return trt.Weights(trt.bfloat16, host.data_ptr(), host.numel())
    raise ConversionError(f"weights of dtype {dtype} are not supported")


def _trace(model: nn.Module) -> torch.fx.GraphModule:
    try:
        return torch.fx.symbolic_trace(model)
    except Exception as exc:  # fx raises many types; all mean "cannot walk this model"
        raise ConversionError(
            f"cannot trace {type(model).__name__} with torch.fx: {type(exc).__name__}: {exc}"
        ) from exc


def _bn_folds(gm: torch.fx.GraphModule) -> dict[Any, tuple[Any, nn.BatchNorm2d]]:
    """conv node -> (bn node, bn) where a BatchNorm2d is the conv's only consumer."""
    folds: dict[Any, tuple[Any, nn.BatchNorm2d]] = {}
    for node in gm.graph.nodes:
        if node.op != "call_module" or not isinstance(gm.get_submodule(node.target), nn.Conv2d):
            continue
        users = list(node.users)
        if len(users) == 1 and users[0].op == "call_module":
            bn = gm.get_submodule(users[0].target)
            if isinstance(bn, nn.BatchNorm2d) and users[0].args[0] is node:
                folds[node] = (users[0], bn)
    return folds


def _op_label(target: Any) -> str:
    """A readable name for an FX call target: 'speedwatch::opaque_identity', 'torch.cat'."""
    qualified = getattr(target, "_qualified_op_name", None)  # torch.ops packet
    if isinstance(qualified, str):
        return qualified
    schema = getattr(target, "_schema", None)  # torch.ops overload
    if schema is not None:
        return str(schema.name)
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", None) or str(target)
    if module in ("_operator", "operator"):
        return f"operator.{name}"
    return f"{module}.{name}" if module else name


def _shape(tensor: Any) -> tuple[int, ...]:
    """An ITensor's dimensions as known while the network is built (-1: dynamic)."""
    return tuple(int(d) for d in tensor.shape)


def _pair(value: int | Sequence[int], what: str) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(
        isinstance(v, int) for v in value
    ):
        return (int(value[0]), int(value[1]))
    raise ConversionError(f"{what}: {value!r} is not an int or a pair of ints")


# the graph walk


class _Emitter:
    """Turns FX nodes into TensorRT layers, one converter per module type or function."""

    def __init__(self, trt: Any, report: ConversionReport, gm: torch.fx.GraphModule,
                 options: ConverterOptions) -> None:
        self.trt = trt
        self.report = report
        self.gm = gm
        self.network: tensorrt.INetworkDefinition = report.network
        self.mode = report.mode  # trt-2.6 / trt-2.7 / trt-2.8
        self.refit = report.weights == "refit"
        self.folds = _bn_folds(gm) if options.fold_bn else {}
        self.folded_bn_nodes = {bn_node for bn_node, _ in self.folds.values()}
        self.counts: Counter[str] = Counter()
        self.layer_names: Counter[str] = Counter()
        self.unnamed: list[tuple[Any, str]] = []
        self.values: dict[Any, Any] = {}

    # ---- bookkeeping

    def _layer(self, kind: str, layer: Any, name: str) -> Any:
        """Counts by the API we called; `layer.type` would not do (pooling and activation
        layers shadow it with their own `type` attribute)."""
        if layer is None:
            raise ConversionError(f"TensorRT refused the {kind} layer for {name}")
        self.counts[kind] += 1
        for weights, weights_name in self.unnamed:
            if not self.network.set_weights_name(weights, weights_name):
                raise ConversionError(f"TensorRT refused the weights name {weights_name!r}")
            self.report.weight_names.append(weights_name)
        self.unnamed.clear()
        base = f"{name}/{kind.lower()}"
        seen = self.layer_names[base]
        self.layer_names[base] += 1
        layer.name = f"{base}_{seen}" if seen else base  # unique, as the inspector needs
        return layer

    def _weights(self, value: torch.Tensor, name: str, wiring: str) -> Any:
        weights = _to_weights(self.trt, value, self.report.weight_dtype, self.report.keepalive)
        self.report.weight_wiring[name] = wiring
        if self.refit:
            # TensorRT names weights only once a layer uses them: _layer() names these
            self.unnamed.append((weights, name))
        return weights

    def _empty(self) -> Any:
        return self.trt.Weights(trt_dtype(self.trt, self.report.weight_dtype))

    def _constant(self, value: torch.Tensor, name: str, wiring: str,
                  shape: Sequence[int] | None = None) -> Any:
        dims = tuple(int(d) for d in (shape if shape is not None else value.shape))
        weights = self._weights(value.reshape(dims), name, wiring)
        layer = self._layer("CONSTANT", self.network.add_constant(dims, weights), name)
        return layer.get_output(0)

    # ---- the walk

    def emit(self, example_shape: Sequence[int], *, dynamic: bool) -> None:
        trt, report = self.trt, self.report
        shape = [int(d) for d in example_shape]
        if len(shape) != 4:
            raise ConversionError(f"input shape {shape}: expected NCHW")
        if dynamic:
            shape[0] = -1
        outputs: list[Any] = []
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                if self.values:
                    raise ConversionError("models with more than one input are not supported")
                tensor = self.network.add_input(INPUT_NAME, trt_dtype(trt, report.io_dtype),
                                                tuple(shape))
                self.values[node] = tensor
            elif node.op == "call_module":
                self.values[node] = self._module(node)
            elif node.op in ("call_function", "call_method"):
                self.values[node] = self._function(node)
            elif node.op == "get_attr":
                raise UnsupportedOp(f"attribute {node.target}",
                                    "tensors read from module attributes are not converted")
            elif node.op == "output":
                result = node.args[0]
                if not isinstance(result, torch.fx.Node):
                    raise ConversionError("models with more than one output are not supported")
                outputs.append(self.values[result])
        if len(outputs) != 1:
            raise ConversionError("the traced model has no output")
        out = outputs[0]
        out.name = OUTPUT_NAME
        self.network.mark_output(out)
        report.layer_counts = dict(self.counts)

    def _arg(self, node: Any, index: int = 0) -> Any:
        arg = node.args[index]
        if not isinstance(arg, torch.fx.Node):
            raise UnsupportedOp(_describe(node), f"argument {index} is not a tensor")
        return self.values[arg]

    def _module(self, node: Any) -> Any:
        module = self.gm.get_submodule(node.target)
        name = str(node.target)
        x = self._arg(node)
        if node in self.folds and isinstance(module, nn.Conv2d):
            _, bn = self.folds[node]
            return self._conv(name, x, module, bn)
        if node in self.folded_bn_nodes:
            return x  # already inside the conv before it
        converters: dict[type[nn.Module], Callable[[str, Any, Any], Any]] = {
            nn.Conv2d: lambda n, t, m: self._conv(n, t, m, None),
            nn.BatchNorm2d: self._batchnorm,
            nn.ReLU: lambda n, t, m: self._relu(n, t),
            nn.MaxPool2d: self._maxpool,
            nn.AdaptiveAvgPool2d: self._adaptive_avgpool,
            nn.Flatten: self._flatten_module,
            nn.Linear: self._linear,
            nn.Identity: lambda n, t, m: t,
            nn.Dropout: lambda n, t, m: t,  # eval mode
        }
        for cls, convert in converters.items():
            if type(module) is cls:
                return convert(name, x, module)
        raise UnsupportedOp(f"module {type(module).__module__}.{type(module).__name__}",
                            f"at {name}")

    def _function(self, node: Any) -> Any:
        target = node.target
        name = str(node.name)
        if node.op == "call_method":
            if target == "relu":
                return self._relu(name, self._arg(node))
            if target == "flatten":
                return self._flatten(name, self._arg(node), *node.args[1:], **node.kwargs)
            if target == "add":
                return self._add(name, node)
            raise UnsupportedOp(f"Tensor.{target}", f"at {name}")
        if target in (operator.add, operator.iadd, torch.add):
            return self._add(name, node)
        if target in (torch.relu, torch.nn.functional.relu):
            return self._relu(name, self._arg(node))
        if target is torch.flatten:
            return self._flatten(name, self._arg(node), *node.args[1:], **node.kwargs)
        label = _op_label(target)
        if "::" in label and not label.startswith("aten::"):
            raise UnsupportedOp(label, "a custom op; TensorRT would need a plugin for it")
        raise UnsupportedOp(label, f"at {name}")

    # ---- converters

    def _conv(self, name: str, x: Any, conv: nn.Conv2d, bn: nn.BatchNorm2d | None) -> Any:
        if conv.padding_mode != "zeros" or isinstance(conv.padding, str):
            raise UnsupportedOp("module torch.nn.Conv2d",
                                f"{name}: padding {conv.padding!r}/{conv.padding_mode} "
                                "(only explicit zero padding)")
        kernel, bias = conv_parameters(conv, bn)
        out_channels = int(kernel.shape[0])
        kernel_shape = tuple(int(k) for k in kernel.shape[2:])
        if self.mode in TENSOR_CONV_MODES:
            # 2.7 (impl/conv.py): kernel and bias through get_trt_tensor, i.e. constant
            # layers of the weights' own shape, wired in with set_input; empty Weights
            layer = self.network.add_convolution_nd(x, out_channels, kernel_shape,
                                                    self._empty(), self._empty())
            self._layer("CONVOLUTION", layer, name)
            layer.set_input(1, self._constant(kernel, f"{name}.weight", "tensor"))
            if bias is not None:
                layer.set_input(2, self._constant(bias, f"{name}.bias", "tensor"))
        else:
            kernel_w = self._weights(kernel, f"{name}.weight", "weights")
            bias_w = self._weights(bias, f"{name}.bias", "weights") if bias is not None \
                else self._empty()
            layer = self.network.add_convolution_nd(x, out_channels, kernel_shape, kernel_w,
                                                    bias_w)
            self._layer("CONVOLUTION", layer, name)
        layer.stride_nd = _pair(conv.stride, f"{name}.stride")
        layer.padding_nd = _pair(conv.padding, f"{name}.padding")
        layer.dilation_nd = _pair(conv.dilation, f"{name}.dilation")
        layer.num_groups = int(conv.groups)
        return layer.get_output(0)

    def _batchnorm(self, name: str, x: Any, bn: nn.BatchNorm2d) -> Any:
        if self.mode == "trt-2.8":
            return self._batchnorm_scale(name, x, bn)
        return self._batchnorm_elementwise(name, x, bn)

    def _batchnorm_scale(self, name: str, x: Any, bn: nn.BatchNorm2d) -> Any:
        """2.8 (impl/normalization/ops.py): parameters folded on the host into scale and
        shift, a power of ones, one add_scale_nd(CHANNEL) on channel axis 1."""
        scale, shift = batchnorm_scale_shift(bn)
        layer = self.network.add_scale_nd(
            x, self.trt.ScaleMode.CHANNEL,
            self._weights(shift, f"{name}.shift", "weights"),
            self._weights(scale, f"{name}.scale", "weights"),
            self._weights(torch.ones_like(scale), f"{name}.power", "weights"),
            1,
        )
        return self._layer("SCALE", layer, name).get_output(0)

    def _batchnorm_elementwise(self, name: str, x: Any, bn: nn.BatchNorm2d) -> Any:
        """2.6 and 2.7 (impl/normalization/ops.py): the raw parameters as constants and
        (x * (gamma / sqrt(var + eps))) + (beta - mean * gamma / sqrt(var + eps)); the builder
        must constant-fold the parameter arithmetic before it sees a per-channel scale."""
        trt = self.trt
        op = trt.ElementWiseOperation
        const = {role: self._constant(value, f"{name}.{role}", "constant-layer")
                 for role, value in batchnorm_constants(bn).items()}
        std = self._binary(name, const["running_var"], const["eps"], op.SUM)
        std = self._layer("UNARY", self.network.add_unary(std, trt.UnaryOperation.SQRT),
                          name).get_output(0)
        scale = self._binary(name, const["weight"], std, op.DIV)
        shift = self._binary(name, const["bias"],
                             self._binary(name, const["running_mean"], scale, op.PROD), op.SUB)
        channels = (1, int(bn.num_features), 1, 1)
        scale = self._reshape(name, scale, channels)
        shift = self._reshape(name, shift, channels)
        return self._binary(name, self._binary(name, x, scale, op.PROD), shift, op.SUM)

    def _binary(self, name: str, a: Any, b: Any, kind: Any) -> Any:
        """An elementwise layer as Torch-TensorRT's convert_binary_elementwise builds it
        (impl/elementwise/base.py): ranks made equal by prepending ones to the lower one
        (a shuffle, converter_utils.broadcast) and, where neither operand has a dynamic
        dimension, both expanded to one shape (broadcast_to_same_shape: impl.slice.expand,
        a slice whose stride is 0 along the broadcast dimensions)."""
        a_shape, b_shape = _shape(a), _shape(b)
        if len(a_shape) < len(b_shape):
            a, a_shape = self._prepend_ones(name, a, a_shape, len(b_shape) - len(a_shape))
        elif len(b_shape) < len(a_shape):
            b, b_shape = self._prepend_ones(name, b, b_shape, len(a_shape) - len(b_shape))
        if -1 not in a_shape and -1 not in b_shape and a_shape != b_shape:
            target = tuple(max(p, q) for p, q in zip(a_shape, b_shape, strict=True))
            if a_shape != target:
                a = self._expand(name, a, a_shape, target)
            if b_shape != target:
                b = self._expand(name, b, b_shape, target)
        return self._layer("ELEMENTWISE", self.network.add_elementwise(a, b, kind),
                           name).get_output(0)

    def _prepend_ones(self, name: str, x: Any, shape: tuple[int, ...],
                      count: int) -> tuple[Any, tuple[int, ...]]:
        if -1 in shape:
            # upstream computes the shape with shape layers then; no converter here needs it
            raise ConversionError(f"{name}: broadcasting a dynamically shaped operand")
        dims = (1,) * count + shape
        return self._reshape(name, x, dims), dims

    def _reshape(self, name: str, x: Any, dims: tuple[int, ...]) -> Any:
        layer = self.network.add_shuffle(x)
        self._layer("SHUFFLE", layer, name)
        layer.reshape_dims = dims
        return layer.get_output(0)

    def _expand(self, name: str, x: Any, shape: tuple[int, ...],
                target: tuple[int, ...]) -> Any:
        stride = tuple(int(i == o) for i, o in zip(shape, target, strict=True))
        layer = self.network.add_slice(x, (0,) * len(target), target, stride)
        return self._layer("SLICE", layer, name).get_output(0)

    def _relu(self, name: str, x: Any) -> Any:
        layer = self.network.add_activation(x, self.trt.ActivationType.RELU)
        return self._layer("ACTIVATION", layer, name).get_output(0)

    def _maxpool(self, name: str, x: Any, pool: nn.MaxPool2d) -> Any:
        if pool.ceil_mode or _pair(pool.dilation, f"{name}.dilation") != (1, 1):
            raise UnsupportedOp("module torch.nn.MaxPool2d",
                                f"{name}: ceil_mode or dilation is not supported")
        window = _pair(pool.kernel_size, f"{name}.kernel_size")
        layer = self.network.add_pooling_nd(x, self.trt.PoolingType.MAX, window)
        self._layer("POOLING", layer, name)
        layer.stride_nd = _pair(pool.stride if pool.stride is not None else pool.kernel_size,
                                f"{name}.stride")
        layer.padding_nd = _pair(pool.padding, f"{name}.padding")
        return layer.get_output(0)

    def _adaptive_avgpool(self, name: str, x: Any, pool: nn.AdaptiveAvgPool2d) -> Any:
        size = pool.output_size
        if size not in (1, (1, 1), [1, 1]):
            raise UnsupportedOp("module torch.nn.AdaptiveAvgPool2d",
                                f"{name}: output_size {size!r} (only global pooling, 1x1)")
        axes = (1 << 2) | (1 << 3)  # H and W of NCHW, as TensorRT's reduce bit mask
        layer = self.network.add_reduce(x, self.trt.ReduceOperation.AVG, axes, True)
        return self._layer("REDUCE", layer, name).get_output(0)

    def _flatten_module(self, name: str, x: Any, module: nn.Flatten) -> Any:
        return self._flatten(name, x, module.start_dim, module.end_dim)

    def _flatten(self, name: str, x: Any, start_dim: int = 0, end_dim: int = -1) -> Any:
        if start_dim != 1 or end_dim != -1:
            raise UnsupportedOp("torch.flatten",
                                f"{name}: start_dim={start_dim}, end_dim={end_dim} "
                                "(only flatten(x, 1))")
        layer = self.network.add_shuffle(x)
        self._layer("SHUFFLE", layer, name)
        layer.reshape_dims = (0, -1)  # 0 copies the (possibly dynamic) batch dimension
        return layer.get_output(0)

    def _linear(self, name: str, x: Any, linear: nn.Linear) -> Any:
        """MatMul against a constant, plus a broadcast bias (TensorRT 10 has no FC layer)."""
        trt = self.trt
        weight = self._constant(linear.weight.detach(), f"{name}.weight", "constant-layer")
        layer = self.network.add_matrix_multiply(x, trt.MatrixOperation.NONE, weight,
                                                 trt.MatrixOperation.TRANSPOSE)
        out = self._layer("MATRIX_MULTIPLY", layer, name).get_output(0)
        if linear.bias is None:
            return out
        bias = self._constant(linear.bias.detach(), f"{name}.bias", "constant-layer",
                              (1, int(linear.out_features)))
        add = self.network.add_elementwise(out, bias, trt.ElementWiseOperation.SUM)
        return self._layer("ELEMENTWISE", add, name).get_output(0)

    def _add(self, name: str, node: Any) -> Any:
        if node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
            raise UnsupportedOp(_describe(node), f"{name}: only a + b of two tensors")
        a, b = self._arg(node, 0), self._arg(node, 1)
        layer = self.network.add_elementwise(a, b, self.trt.ElementWiseOperation.SUM)
        return self._layer("ELEMENTWISE", layer, name).get_output(0)


def _describe(node: Any) -> str:
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    return _op_label(node.target)
