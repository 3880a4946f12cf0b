#!/usr/bin/env python3
"""Writes a deep ONNX model: x[batch, 8] through N nodes in one chain
(MatMul with an 8x8 weight, then alternately Relu and Tanh), for the test
that deep graphs do not blow the importer's or the planner's stack.

    make_chain_model.py N OUT.onnx
"""
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def main():
    n, out = int(sys.argv[1]), sys.argv[2]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["v0"], name="proj")]
    for i in range(1, n):
        op = "Relu" if i % 2 else "Tanh"
        nodes.append(helper.make_node(op, [f"v{i - 1}"], [f"v{i}"], name=f"n{i}"))
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info(f"v{n - 1}", TensorProto.FLOAT, ["batch", 8])],
        [numpy_helper.from_array(np.ones((8, 8), np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with open(out, "wb") as f:
        f.write(model.SerializeToString())


if __name__ == "__main__":
    main()
