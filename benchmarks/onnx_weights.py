"""ONNX graph surgery for the `tensor` weight representation, and node counting.

An exported ONNX model carries its weights as initializers: constants ONNX Runtime may fold
(Conv+BatchNormalization into one Conv), pre-pack and re-layout. Turning those initializers
into graph inputs makes them values known only at run time, the ONNX counterpart of a
TensorRT network whose weights enter through `set_input` or of an unfrozen torch.compile
graph. The arithmetic is unchanged; only what the optimizer may assume is.

Only the top-level graph is rewritten: the exported ResNets have no control-flow subgraphs.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Ops whose float initializer operands are model weights: conv/linear weights and biases,
# BatchNorm scale/bias/mean/var, and the parameter operands of MatMul/Add (a Linear the
# exporter split into MatMul + Add).
WEIGHT_CONSUMERS = frozenset(
    {"Conv", "ConvTranspose", "Gemm", "BatchNormalization", "MatMul", "Add"}
)

_FLOAT_TYPES = frozenset(
    {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE}
)


def node_counts(model: onnx.ModelProto) -> dict[str, int]:
    """Nodes of the top-level graph by op type, most frequent first."""
    counts = Counter(node.op_type for node in model.graph.node)
    return dict(counts.most_common())


def domain_counts(model: onnx.ModelProto) -> dict[str, int]:
    """Nodes by operator domain: ORT's NCHWc re-layout and contrib fusions show up here."""
    counts = Counter(node.domain or "ai.onnx" for node in model.graph.node)
    return dict(counts.most_common())


def weight_initializer_names(
    model: onnx.ModelProto, consumers: frozenset[str] = WEIGHT_CONSUMERS
) -> list[str]:
    """Float initializers that reach a weight-consuming op, directly or through Identity.

    The TorchScript exporter deduplicates equal initializers and reaches some of them
    through Identity nodes, so an initializer counts as a weight when any chain of Identity
    nodes leads from it to one of `consumers`. Integer initializers (Reshape shapes, axes)
    stay constants: they are graph structure, not weights.
    """
    users: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in model.graph.node:
        for name in node.input:
            if name:
                users[name].append(node)

    def reaches_consumer(name: str, seen: set[str]) -> bool:
        for node in users.get(name, []):
            if node.op_type in consumers:
                return True
            if node.op_type == "Identity" and node.output[0] not in seen:
                seen.add(node.output[0])
                if reaches_consumer(node.output[0], seen):
                    return True
        return False

    return [
        init.name
        for init in model.graph.initializer
        if init.data_type in _FLOAT_TYPES and reaches_consumer(init.name, {init.name})
    ]


def weights_to_inputs(
    model: onnx.ModelProto, consumers: frozenset[str] = WEIGHT_CONSUMERS
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A copy of `model` whose weight initializers are graph inputs, and their values.

    The caller feeds the returned arrays at run time under the same names. The original
    model is left untouched.
    """
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    graph = rewritten.graph
    names = set(weight_initializer_names(rewritten, consumers))
    existing_inputs = {i.name for i in graph.input}

    values: dict[str, np.ndarray] = {}
    kept: list[onnx.TensorProto] = []
    new_inputs: list[onnx.ValueInfoProto] = []
    for init in graph.initializer:
        if init.name not in names:
            kept.append(init)
            continue
        values[init.name] = numpy_helper.to_array(init)
        # a model exported with keep_initializers_as_inputs already lists it as an input
        if init.name not in existing_inputs:
            new_inputs.append(helper.make_tensor_value_info(init.name, init.data_type,
                                                            list(init.dims)))
    del graph.initializer[:]
    graph.initializer.extend(kept)
    graph.input.extend(new_inputs)
    return rewritten, values
