#!/usr/bin/env python3
"""Writes the hand-made malformed ONNX models of tests/import/malformed.test.

    .venv/bin/python tests/data/malformed/make_malformed_models.py

Each model is a small valid one (x[batch, 4] -> MatMul w[4, 4] -> Relu -> y,
which `bmc plan` accepts) broken in one way: wrong element types, negative
and huge dims, cycles, dangling names, initializers whose data disagrees
with their shape, external data past its file's end or outside the model's
folder, opset mismatches, missing graph inputs, bad attributes, host-folded
shape computations that go wrong. `bmc plan` must answer each with one
`bmc: error:` line and a non-zero exit. The files are committed, so the
tests do not need Python; tests/data/bad holds an older set of the same kind.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def tensor(name, elem=F, shape=("batch", 4)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def weight(name="w", shape=(4, 4)):
    return numpy_helper.from_array(np.ones(shape, np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def model(nodes, inputs=None, outputs=None, initializers=None, opset=17):
    """The valid template unless parts are given."""
    inputs = [tensor("x")] if inputs is None else inputs
    outputs = [tensor("y")] if outputs is None else outputs
    initializers = [weight()] if initializers is None else initializers
    graph = helper.make_graph(nodes, "malformed", inputs, outputs, initializers)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="bmc-tests")
    m.ir_version = 8
    return m


def mlp(**kwargs):
    return model([helper.make_node("MatMul", ["x", "w"], ["h"], name="proj"),
                  helper.make_node("Relu", ["h"], ["y"], name="act")], **kwargs)


def then_y(node):
    """`node` (producing "t" from "x") followed by the template's MatMul."""
    return model([node, helper.make_node("MatMul", ["t", "w"], ["y"], name="proj")])


def external(location, offset=None, length=None, dims=(4, 4), data_type=F):
    t = TensorProto(name="w", data_type=data_type, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
    return mlp(initializers=[t])


def chain_cycle(length):
    names = [f"v{i}" for i in range(length)]
    nodes = [helper.make_node("Relu", [names[i - 1]], [names[i]], name=f"relu{i}")
             for i in range(length)]
    nodes.append(helper.make_node("Add", ["x", names[-1]], ["y"], name="out"))
    return model(nodes, initializers=[])


def cases():
    c = {}
    # Element types.
    c["string_input"] = mlp(inputs=[tensor("x", TensorProto.STRING)])
    c["undefined_input_type"] = mlp(inputs=[tensor("x", TensorProto.UNDEFINED)])
    c["complex_weight"] = mlp(initializers=[helper.make_tensor(
        "w", TensorProto.COMPLEX64, [4, 4], [0.0] * 32)])
    c["string_initializer"] = then_y(helper.make_node("Reshape", ["x", "s"], ["t"], name="reshape"))
    c["string_initializer"].graph.initializer.append(helper.make_tensor(
        "s", TensorProto.STRING, [2], [b"2", b"4"]))
    c["matmul_int_float"] = mlp(inputs=[tensor("x", I64)])
    # Dims.
    c["negative_weight_dim"] = mlp(initializers=[TensorProto(
        name="w", data_type=F, dims=[4, -4], data_location=TensorProto.EXTERNAL,
        external_data=[onnx.StringStringEntryProto(key="location", value="w.bin")])])
    c["huge_input"] = mlp(inputs=[tensor("x", shape=(2**50, 4))])
    c["dim_without_value"] = mlp(inputs=[tensor("x", shape=("batch", 4))])
    c["dim_without_value"].graph.input[0].type.tensor_type.shape.dim[1].Clear()
    c["no_input_shape"] = mlp()
    c["no_input_shape"].graph.input[0].type.tensor_type.ClearField("shape")
    c["sequence_input"] = mlp(inputs=[helper.make_tensor_sequence_value_info("x", F, [4])])
    # Graph structure.
    c["self_cycle"] = model([helper.make_node("Add", ["x", "y"], ["y"], name="loop")], initializers=[])
    c["long_cycle"] = chain_cycle(5)
    c["dangling_output"] = mlp(outputs=[tensor("z")])
    c["duplicate_producer"] = model([
        helper.make_node("Relu", ["x"], ["y"], name="first"),
        helper.make_node("Sigmoid", ["x"], ["y"], name="second")], initializers=[])
    c["output_shadows_input"] = model([
        helper.make_node("Relu", ["x"], ["x"], name="shadow"),
        helper.make_node("Relu", ["x"], ["y"], name="out")], initializers=[])
    c["missing_graph_input"] = mlp(inputs=[])
    c["empty_input_name"] = mlp()
    c["empty_input_name"].graph.node[0].input[0] = ""
    c["duplicate_initializer"] = mlp(initializers=[weight(), weight()])
    c["no_graph_outputs"] = mlp(outputs=[])
    # Initializers whose data disagrees with their shape.
    c["raw_data_short"] = then_y(helper.make_node("Reshape", ["x", "s"], ["t"], name="reshape"))
    s = TensorProto(name="s", data_type=I64, dims=[2], raw_data=np.array([2], np.int64).tobytes())
    c["raw_data_short"].graph.initializer.append(s)
    c["weight_values_short"] = mlp(initializers=[helper.make_tensor("w", F, [4, 4], [1.0] * 15)])
    c["weight_raw_long"] = mlp(initializers=[TensorProto(
        name="w", data_type=F, dims=[4, 4], raw_data=np.ones(17, np.float32).tobytes())])
    # External data.
    c["external_past_end"] = external("weights.bin", offset=32, length=64)
    c["external_length_wrong"] = external("weights.bin", offset=0, length=60)
    c["external_no_location"] = external(None)
    c["external_bad_offset"] = external("weights.bin", offset="0x10")
    c["external_windows_escape"] = external("..\\..\\secret.bin")
    c["external_drive_path"] = external("C:\\weights.bin")
    c["external_huge_weight"] = external("absent.bin", dims=(2**31, 2**31))
    # 2^48 parameters (1 PiB of fp32): valid, but no machine holds it;
    # tests/import/limits.test compiles it for a cluster on which it plans.
    c["petabyte_embedding"] = model(
        [helper.make_node("Gather", ["w", "ids"], ["y"], name="embed")],
        inputs=[tensor("ids", I64, ("batch", 16))],
        outputs=[tensor("y", F, ("batch", 16, 1024))],
        initializers=[external("absent.bin", dims=(2**38, 1024)).graph.initializer[0]])
    # Opsets.
    c["no_default_opset"] = mlp()
    c["no_default_opset"].opset_import[0].domain = "com.example"
    c["opset_zero"] = mlp(opset=0)
    c["squeeze_axes_attribute_opset13"] = then_y(helper.make_node(
        "Squeeze", ["x"], ["t"], name="squeeze", axes=[0]))
    c["reduce_axes_attribute_opset18"] = then_y(helper.make_node(
        "ReduceMean", ["x"], ["t"], name="mean", axes=[1], keepdims=1))
    c["reduce_axes_attribute_opset18"].opset_import[0].version = 18
    c["split_attribute_opset18"] = model([
        helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=1, split=[2, 2]),
        helper.make_node("Add", ["a", "b"], ["y"], name="add")],
        outputs=[tensor("y", shape=("batch", 2))], initializers=[], opset=18)
    # Attributes.
    c["cast_without_to"] = then_y(helper.make_node("Cast", ["x"], ["t"], name="cast"))
    c["perm_float"] = then_y(helper.make_node("Transpose", ["x"], ["t"], name="transpose"))
    c["perm_float"].graph.node[0].attribute.append(helper.make_attribute("perm", [1.0, 0.0]))
    c["perm_repeated"] = then_y(helper.make_node("Transpose", ["x"], ["t"], name="transpose", perm=[0, 0]))
    c["softmax_axis_out_of_range"] = then_y(helper.make_node("Softmax", ["x"], ["t"], name="softmax", axis=5))
    c["gather_axis_negative_out"] = then_y(helper.make_node(
        "Gather", ["x", "i"], ["t"], name="gather", axis=-3))
    c["gather_axis_negative_out"].graph.initializer.append(ints("i", [0]))
    # Host-folded shape computations that go wrong.
    c["reshape_two_minus_one"] = then_y(helper.make_node("Reshape", ["x", "s"], ["t"], name="reshape"))
    c["reshape_two_minus_one"].graph.initializer.append(ints("s", [-1, -1]))
    c["reshape_wrong_count"] = then_y(helper.make_node("Reshape", ["x", "s"], ["t"], name="reshape"))
    c["reshape_wrong_count"].graph.initializer.append(ints("s", [3, 4]))
    c["constant_of_shape_negative"] = model([
        helper.make_node("ConstantOfShape", ["s"], ["c"], name="fill"),
        helper.make_node("Add", ["x", "c"], ["y"], name="add")], initializers=[ints("s", [-2, 4])])
    c["gather_index_out_of_range"] = model([
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "i"], ["d"], name="pick", axis=0),
        helper.make_node("Reshape", ["x", "d"], ["y"], name="reshape")],
        initializers=[ints("i", [7])])
    c["range_zero_delta"] = model([
        helper.make_node("Range", ["a", "b", "d"], ["r"], name="range"),
        helper.make_node("Add", ["x", "r"], ["y"], name="add")],
        initializers=[ints("a", 0), ints("b", 4), ints("d", 0)])
    c["expand_huge"] = model([
        helper.make_node("Expand", ["x", "s"], ["y"], name="expand")],
        initializers=[ints("s", [2**40, 2**40, 4])])
    c["slice_step_zero"] = then_y(helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["t"], name="slice"))
    c["slice_step_zero"].graph.initializer.extend([ints("st", [0]), ints("en", [4]), ints("ax", [1]), ints("sp", [0])])
    c["concat_rank_mismatch"] = model([
        helper.make_node("Concat", ["x", "v"], ["y"], name="concat", axis=1)],
        inputs=[tensor("x"), tensor("v", shape=(4,))], initializers=[])
    c["mod_of_activation"] = then_y(helper.make_node("Mod", ["x", "m"], ["t"], name="wrap", fmod=1))
    c["mod_of_activation"].graph.initializer.append(numpy_helper.from_array(np.float32(3.0), "m"))
    c["pad_reflect"] = then_y(helper.make_node("Pad", ["x", "p"], ["t"], name="pad", mode="reflect"))
    c["pad_reflect"].graph.initializer.append(ints("p", [0, 0, 0, 0]))
    c["pad_trims_too_much"] = then_y(helper.make_node("Pad", ["x", "p"], ["t"], name="pad"))
    c["pad_trims_too_much"].graph.initializer.append(ints("p", [0, -3, 0, -3]))
    c["metadata_dim_negative"] = mlp()
    helper.set_model_props(c["metadata_dim_negative"], {"bm.dim.batch": "-8"})
    return c


def main():
    for name, m in cases().items():
        with open(os.path.join(HERE, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())
    # The external-data models' file: 48 bytes, less than one [4, 4] float
    # weight (64 bytes).
    with open(os.path.join(HERE, "weights.bin"), "wb") as f:
        f.write(np.zeros(12, np.float32).tobytes())


if __name__ == "__main__":
    main()
