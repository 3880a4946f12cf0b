#!/usr/bin/env python3
"""Writes the small hand-made ONNX models that tests/import/*.test import
and FileCheck. The generated files are committed.

  mlp.onnx          parameters (embedded and external), a symbolic batch dim
                    with a bm.dim default, a Shape->Gather->Concat->Reshape
                    chain that must fold
  causal_mask.onnx  a torch.onnx-style attention mask: Shape, Range, Trilu,
                    ConstantOfShape, Where, Expand
  ops.onnx          lowerings with normalisation: implicit einsum, Split by
                    num_outputs, clamped and reversed Slice, SAME_UPPER Conv,
                    Gelu, Reshape with 0 and -1, TopK, CumSum
  pad.onnx          constant Pad with pads computed from the shape (Swin's
                    window padding), negative pads, a value, opset-18 axes
  control_flow.onnx a Loop over constants (torchlib's as_strided shape): a
                    sequence built with SequenceInsert, an If in the body, a
                    scan output, a value the body captures, and
                    ConcatFromSequence of the result; it folds to constants
  loop_runtime.onnx a Loop whose body reads the graph's input: refused
  indexing.onnx     GatherElements, ScatterElements (add), GatherND with
                    constant (negative), run-time and batched indices,
                    ScatterND of run-time values
  shape_arith.onnx  integer shape arithmetic that real exporters write and
                    that folds: Swin's window padding (Mod), Floor, Ceil,
                    Round, Sign, Abs, NonZero, ScatterND and Transpose on
                    constants
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def save(name, graph, opset=17, dims=None):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="bmc-tests")
    model.ir_version = 8
    for key, value in (dims or {}).items():
        entry = model.metadata_props.add()
        entry.key, entry.value = "bm.dim." + key, str(value)
    # No checker: it insists on reading external data, which is absent.
    onnx.save(model, os.path.join(HERE, name))


def const(name, values, dtype=np.int64):
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(np.array(values, dtype=dtype), name))


def mlp():
    w1 = numpy_helper.from_array(np.ones((8, 16), np.float32), "fc1.weight")
    b1 = numpy_helper.from_array(np.zeros((16,), np.float32), "fc1.bias")
    # External data that is absent: the importer never reads it.
    w2 = TensorProto(name="fc2.weight", data_type=TensorProto.FLOAT, dims=[16, 8])
    w2.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "mlp.weights"), ("offset", "0"), ("length", "512")):
        entry = w2.external_data.add()
        entry.key, entry.value = key, value
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "scale")
    heads = numpy_helper.from_array(np.array([2, 4], np.int64), "heads")
    nodes = [
        helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["a"], name="act"),
        helper.make_node("MatMul", ["a", "fc2.weight"], ["o"], name="fc2"),
        helper.make_node("Mul", ["o", "scale"], ["s"], name="scale_out"),
        # reshape to [batch, 2, 4] with batch read from the input's shape
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        const("zero", 0),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="batch", axis=0),
        const("axes0", [0]),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"], name="batch1"),
        helper.make_node("Concat", ["batch1", "heads"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["s", "target"], ["y"], name="split_heads"),
    ]
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2, 4])],
        [w1, b1, w2, scale, heads])
    save("mlp.onnx", graph, dims={"batch": 4})


def causal_mask():
    nodes = [
        helper.make_node("Shape", ["scores"], ["shape"], name="shape"),
        const("minus1", -1),
        helper.make_node("Gather", ["shape", "minus1"], ["seq"], name="seq", axis=0),
        const("zero", 0), const("one", 1),
        helper.make_node("Range", ["zero", "seq", "one"], ["pos"], name="positions"),
        const("axes1", [1]),
        helper.make_node("Unsqueeze", ["pos", "axes1"], ["col"], name="column"),
        helper.make_node("LessOrEqual", ["pos", "col"], ["allowed"], name="causal"),
        const("square_axes", [0]),
        helper.make_node("Unsqueeze", ["seq", "square_axes"], ["seq1"], name="seq1"),
        helper.make_node("Concat", ["seq1", "seq1"], ["square"], name="square", axis=0),
        helper.make_node("ConstantOfShape", ["square"], ["ones"], name="ones",
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Trilu", ["ones"], ["lower"], name="lower", upper=0),
        const("neg_inf", -1e9, np.float32),
        helper.make_node("Where", ["allowed", "scores", "neg_inf"], ["masked"], name="mask"),
        helper.make_node("Mul", ["masked", "lower"], ["m2"], name="keep_lower"),
        helper.make_node("Softmax", ["m2"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "causal_mask",
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 4, "seq", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, "seq", "seq"])])
    save("causal_mask.onnx", graph, opset=17, dims={"seq": 8})


def ops():
    nodes = [
        # implicit output: letters used once, sorted -> "bij,bjk->ik"
        helper.make_node("Einsum", ["a", "b"], ["e"], name="contract", equation="bij,bjk"),
        helper.make_node("Einsum", ["a", "b"], ["e2"], name="ellipsis", equation="...ij,...jk->...ik"),
        helper.make_node("Split", ["e"], ["p0", "p1", "p2"], name="thirds", axis=-1, num_outputs=3),
        const("starts", [1]), const("ends", [1000]), const("axes", [-1]),
        helper.make_node("Slice", ["e2", "starts", "ends", "axes"], ["tail"], name="tail"),
        helper.make_node("Conv", ["img", "kernel"], ["c"], name="conv", auto_pad="SAME_UPPER",
                         strides=[2, 2]),
        helper.make_node("Gelu", ["c"], ["g"], name="gelu", approximate="tanh"),
        helper.make_node("ReduceMean", ["g", "rm_axes"], ["r"], name="mean", keepdims=0),
        helper.make_node("Max", ["p0", "p1", "p2"], ["mx"], name="max3"),
        # Reshape with 0 (copy) and -1 (infer)
        const("flat_shape", [0, -1]),
        helper.make_node("Reshape", ["tail", "flat_shape"], ["flat"], name="flatten_tail"),
        # Gather with a negative constant index, normalised
        const("last", [-1]),
        helper.make_node("Gather", ["flat", "last"], ["picked"], name="pick_last", axis=1),
        helper.make_node("Transpose", ["a"], ["at"], name="reverse_dims"),
        helper.make_node("TopK", ["at", "k2"], ["topv", "topi"], name="top2", axis=-1),
        helper.make_node("CumSum", ["picked", "minus_one"], ["cs"], name="cumsum"),
        # Negative steps: every other element of the last dim, backwards
        const("rstart", [-1]), const("rend", [-1000]), const("raxis", [2]),
        const("rstep", [-2]),
        helper.make_node("Slice", ["a", "rstart", "rend", "raxis", "rstep"], ["rev"],
                         name="reverse"),
    ]
    kernel = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "kernel")
    rm_axes = numpy_helper.from_array(np.array([-1, -2], np.int64), "rm_axes")
    k2 = numpy_helper.from_array(np.array([2], np.int64), "k2")
    minus_one = numpy_helper.from_array(np.array(-1, np.int64), "minus_one")
    graph = helper.make_graph(
        nodes, "ops",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 4, 6]),
         helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 3, 7, 7])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
         for n in ("mx", "tail", "r", "cs", "topv", "rev")]
        + [helper.make_tensor_value_info("topi", TensorProto.INT64, None)],
        [kernel, rm_axes, k2, minus_one])
    save("ops.onnx", graph, opset=20)


def shape_arith():
    f32 = np.float32
    nodes = [
        # Swin: pad h up to a multiple of the window (4), then count windows:
        # (h + (4 - h % 4) % 4) / 4 = 2 for h = 7.
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        const("one", [1]), const("four", [4]), const("zero", [0]),
        helper.make_node("Gather", ["s", "one"], ["h"], name="height"),
        helper.make_node("Mod", ["h", "four"], ["hm"], name="h_mod"),
        helper.make_node("Sub", ["four", "hm"], ["missing"], name="missing"),
        helper.make_node("Mod", ["missing", "four"], ["pad"], name="pad_mod"),
        helper.make_node("Add", ["h", "pad"], ["hp"], name="padded"),
        helper.make_node("Div", ["hp", "four"], ["windows"], name="windows"),
        helper.make_node("Gather", ["s", "zero"], ["b"], name="batch"),
        const("rest", [-1]),
        helper.make_node("Concat", ["b", "windows", "rest"], ["target"], name="target", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="by_window"),
        # Elementwise semantics, folded to constants (graph outputs).
        const("num", [-7, 7, -7, 7]), const("den", [4, -4, -4, 4]),
        helper.make_node("Mod", ["num", "den"], ["mod_py"], name="mod_py"),
        helper.make_node("Mod", ["num", "den"], ["mod_c"], name="mod_c", fmod=1),
        const("halves", [-1.5, -0.5, 0.5, 1.5, 2.5], f32),
        helper.make_node("Floor", ["halves"], ["floor"], name="floor"),
        helper.make_node("Ceil", ["halves"], ["ceil"], name="ceil"),
        helper.make_node("Round", ["halves"], ["round"], name="round"),
        helper.make_node("Sign", ["num"], ["sign"], name="sign"),
        helper.make_node("Abs", ["num"], ["abs"], name="abs"),
        const("sparse", [[1, 0], [0, 3]]),
        helper.make_node("NonZero", ["sparse"], ["nz"], name="nonzero"),
        # Swin's attention-mask regions, written with ScatterND: single
        # cells, and whole rows (index tuples shorter than the rank).
        const("regions", np.zeros((3, 4), np.int64)),
        const("cells", [[0, 0], [1, 3], [2, 1]]), const("ids", [5, 6, 7]),
        helper.make_node("ScatterND", ["regions", "cells", "ids"], ["mask"], name="mask"),
        const("rows", [[2], [0]]), const("row_ids", [[1, 1, 1, 1], [2, 2, 2, 2]]),
        helper.make_node("ScatterND", ["regions", "rows", "row_ids"], ["row_mask"],
                         name="row_mask"),
        # The legacy exporter reverses F.pad's list with a Transpose.
        const("grid", [[1, 2, 3], [4, 5, 6]]),
        helper.make_node("Transpose", ["grid"], ["grid_t"], name="grid_t", perm=[1, 0]),
    ]
    ints = ("mod_py", "mod_c", "sign", "abs", "nz", "mask", "row_mask", "grid_t")
    graph = helper.make_graph(
        nodes, "shape_arith",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 7, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
        + [helper.make_tensor_value_info(n, TensorProto.INT64, None) for n in ints]
        + [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
           for n in ("floor", "ceil", "round")])
    save("shape_arith.onnx", graph, opset=17)


def pad():
    nodes = [
        # Swin pads the width up to a multiple of the window (4): 6 -> 8.
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        const("two", [2]), const("four", [4]),
        helper.make_node("Gather", ["s", "two"], ["w"], name="width"),
        helper.make_node("Mod", ["w", "four"], ["wm"], name="w_mod"),
        helper.make_node("Sub", ["four", "wm"], ["short"], name="short"),
        helper.make_node("Mod", ["short", "four"], ["pad_w"], name="pad_w"),
        const("zeros3", [0, 0, 0]), const("zeros2", [0, 0]),
        helper.make_node("Concat", ["zeros3", "zeros2", "pad_w"], ["pads"], name="pads", axis=0),
        helper.make_node("Pad", ["x", "pads"], ["windowed"], name="window_pad"),
        # Trim one row at the front, add two at the back with value 1.5,
        # on axis 1 only (opset 18 axes).
        const("row_pads", [-1, 2]), const("one", [1]),
        const("value", 1.5, np.float32),
        helper.make_node("Pad", ["x", "row_pads", "value", "one"], ["rows"], name="row_pad"),
    ]
    graph = helper.make_graph(
        nodes, "pad",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 6])],
        [helper.make_tensor_value_info("windowed", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("rows", TensorProto.FLOAT, None)])
    save("pad.onnx", graph, opset=18)


def indexing():
    nodes = [
        helper.make_node("GatherElements", ["x", "ids"], ["picked"], name="pick", axis=1),
        helper.make_node("ScatterElements", ["x", "ids", "upd"], ["added"], name="add_at",
                         axis=-2, reduction="add"),
        const("rows", [[1, 4], [0, -1]]),
        helper.make_node("GatherND", ["x", "rows"], ["nd_const"], name="nd_const"),
        helper.make_node("GatherND", ["x", "tuples"], ["nd_run"], name="nd_run"),
        const("per_batch", [[3], [1]]),
        helper.make_node("GatherND", ["x", "per_batch"], ["nd_batch"], name="nd_batch",
                         batch_dims=1),
        helper.make_node("ScatterND", ["x", "tuples", "rows_upd"], ["nd_written"],
                         name="nd_write"),
    ]
    graph = helper.make_graph(
        nodes, "indexing",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 3]),
         helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 4, 3]),
         helper.make_tensor_value_info("upd", TensorProto.FLOAT, [2, 4, 3]),
         helper.make_tensor_value_info("tuples", TensorProto.INT64, [2, 2]),
         helper.make_tensor_value_info("rows_upd", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
         for n in ("picked", "added", "nd_const", "nd_run", "nd_batch", "nd_written")])
    save("indexing.onnx", graph, opset=18)


def loop_body(step_input):
    """Body (i, cond, acc, seq) -> (cond, acc + step_input * (i + 1) *
    scale, seq + [i], i * 10 as a scan output), with If(i == 0) choosing the
    scale: 100, else 1."""
    then = helper.make_graph([const("big", [100])], "then", [],
                             [helper.make_tensor_value_info("big", TensorProto.INT64, [1])])
    other = helper.make_graph([const("one", [1])], "else", [],
                              [helper.make_tensor_value_info("one", TensorProto.INT64, [1])])
    nodes = [
        helper.make_node("Equal", ["i", "zero"], ["first"]),
        helper.make_node("If", ["first"], ["scale"], then_branch=then, else_branch=other),
        helper.make_node("Mul", [step_input, "i"], ["term"]),
        helper.make_node("Add", ["term", step_input], ["term1"]),
        helper.make_node("Mul", ["term1", "scale"], ["scaled"]),
        helper.make_node("Add", ["acc", "scaled"], ["acc_out"]),
        helper.make_node("Unsqueeze", ["i", "axis0"], ["i1"]),
        helper.make_node("SequenceInsert", ["seq", "i1"], ["seq_out"]),
        helper.make_node("Mul", ["i", "ten"], ["scan"]),
        helper.make_node("Identity", ["cond"], ["cond_out"]),
    ]
    return helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc", TensorProto.INT64 if step_input == "step"
                                       else TensorProto.FLOAT, [1]),
         helper.make_tensor_sequence_value_info("seq", TensorProto.INT64, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.INT64, [1]),
         helper.make_tensor_sequence_value_info("seq_out", TensorProto.INT64, None),
         helper.make_tensor_value_info("scan", TensorProto.INT64, [])])


def control_flow():
    # acc = 2*1*100 + 2*2 + 2*3 + 2*4 = 218; seq = [[0], [1], [2], [3]];
    # scan = [0, 10, 20, 30] (onnxruntime 1.22 agrees). The body captures `step`, `zero`, `ten` and
    # `axis0` from the outer graph.
    nodes = [const("trips", 4), const("acc0", [0]), const("step", [2]), const("zero", 0),
             const("ten", 10), const("axis0", [0]),
             helper.make_node("SequenceEmpty", [], ["seq0"], dtype=TensorProto.INT64),
             helper.make_node("Loop", ["trips", "", "acc0", "seq0"], ["acc", "seq", "scans"],
                              name="count", body=loop_body("step")),
             helper.make_node("ConcatFromSequence", ["seq"], ["joined"], axis=0),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["joined"], ["joinedf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["scans"], ["scansf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["x", "accf"], ["y"]),
             helper.make_node("Add", ["y", "joinedf"], ["z"]),
             helper.make_node("Add", ["z", "scansf"], ["out"])]
    graph = helper.make_graph(
        nodes, "control_flow", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    save("control_flow.onnx", graph, opset=18)


def loop_runtime():
    nodes = [const("trips", 2), const("acc0", [0.0], np.float32), const("zero", 0),
             const("ten", 10), const("axis0", [0]),
             helper.make_node("SequenceEmpty", [], ["seq0"], dtype=TensorProto.INT64),
             helper.make_node("Loop", ["trips", "", "acc0", "seq0"], ["acc", "seq", "scans"],
                              name="over_x", body=loop_body("x"))]
    graph = helper.make_graph(
        nodes, "loop_runtime", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("acc", TensorProto.FLOAT, None)])
    save("loop_runtime.onnx", graph, opset=18)


if __name__ == "__main__":
    control_flow()
    loop_runtime()
    indexing()
    pad()
    mlp()
    causal_mask()
    ops()
    shape_arith()
