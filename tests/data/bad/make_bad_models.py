#!/usr/bin/env python3
"""Writes the malformed ONNX models that tests/import/bad-input.test feeds to
`bmc import`. Each must produce one clear error line, never a crash.

Run from anywhere: python3 tests/data/bad/make_bad_models.py (needs onnx).
The generated files are committed, so the tests do not need Python.
"""
import os

import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = [helper.make_opsetid("", 17)]


def save(name, graph, **kwargs):
    model = helper.make_model(graph, opset_imports=OPSET, producer_name="bmc-tests", **kwargs)
    model.ir_version = 8
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(model.SerializeToString())
    return model


def vector_graph(nodes, inputs=None, outputs=None, initializers=()):
    inputs = inputs or [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])]
    outputs = outputs or [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])]
    return helper.make_graph(nodes, "bad", inputs, outputs, list(initializers))


def external_weight(location):
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4])
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key, entry.value = "location", location
    graph = vector_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                         initializers=[tensor])
    return graph


def main():
    # Bytes that are not a protobuf at all.
    with open(os.path.join(HERE, "not_onnx.onnx"), "wb") as f:
        f.write(b"this is a text file, not an ONNX model\n")
    # A valid model cut in half.
    good = save("_good.onnx", vector_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")]))
    data = good.SerializeToString()
    with open(os.path.join(HERE, "truncated.onnx"), "wb") as f:
        f.write(data[: len(data) // 2])
    os.remove(os.path.join(HERE, "_good.onnx"))
    # Deterministic garbage with a plausible first byte (field 1, varint).
    with open(os.path.join(HERE, "corrupt.onnx"), "wb") as f:
        f.write(bytes([0x08, 0x07, 0x3A, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F]) + bytes(range(7, 64)))

    save("cycle.onnx", vector_graph([
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Identity", ["b"], ["y"], name="out"),
    ]))
    save("dangling.onnx", vector_graph([
        helper.make_node("Add", ["x", "nowhere"], ["y"], name="add"),
    ]))
    save("unsupported_op.onnx", vector_graph([
        helper.make_node("Acos", ["x"], ["y"], name="arc"),
    ]))
    save("negative_dim.onnx", vector_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, -3])]))
    # Each dim fits in int64; the product does not.
    save("overflow_dim.onnx", vector_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [2**32, 2**32])]))
    save("unbound_dim.onnx", vector_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])]))
    save("matmul_mismatch.onnx", vector_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="proj")],
        inputs=[helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
                helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])]))
    save("add_broadcast_mismatch.onnx", vector_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], name="residual")],
        inputs=[helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
                helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])]))
    # Imports at batch 1 only: a Reshape to a shape written for one sample.
    save("batch_one_only.onnx", vector_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="flatten")],
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 2])],
        outputs=[helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializers=[helper.make_tensor("shape", TensorProto.INT64, [2], [1, 4])]))
    save("external_escape.onnx", external_weight("../../etc/passwd"))
    save("external_absolute.onnx", external_weight("/etc/passwd"))
    save("opset_too_new.onnx", vector_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")]))
    model = onnx.load(os.path.join(HERE, "opset_too_new.onnx"))
    model.opset_import[0].version = 22
    onnx.save(model, os.path.join(HERE, "opset_too_new.onnx"))


if __name__ == "__main__":
    main()
