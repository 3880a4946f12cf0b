"""GatherElements, ScatterElements, GatherND and ScatterND compiled and run
against onnxruntime, and trained.

Each case is a small classifier: h = x @ W (W a parameter), the indexing op
on h (indices a model input, or a constant), flattened to logits. `bmc
compile` lowers it; bmrt-forward runs it on the same inputs as onnxruntime,
and the trainer takes a few steps through the op's gradient. The indices
cover what exporters write: negatives, repeats (scatter-add accumulates
them), a non-axis dim shorter than the data's, run-time tuples of two
indices and batch dims.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import run, tool
from test_forward import bmrt_forward

# Tolerance: h is a 3-term dot product per element, computed in fp32 by
# OpenBLAS and by MLAS in different orders (a few ulps); the indexing ops
# copy, or add at most three values at one position in a different order
# (scatter "add"): 1e-5 of values of order 1 covers both, and a wrong index
# moves an element by O(1).
TOL = 1e-5

X_SHAPE = [2, 5, 3]


def case(op, extra_inputs, attrs=None, constants=(), opset=18):
    """(model, feeds): `op` reads h and the extra operands in order: integer
    ones are model inputs fed at run time, float ones (updates) parameters
    (the trainer feeds a classifier one float input), then `constants`."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="proj")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, X_SHAPE)]
    feeds = {"x": np.random.default_rng(7).standard_normal(X_SHAPE).astype(np.float32)}
    initializers = [numpy_helper.from_array(
        np.random.default_rng(3).standard_normal((3, 3)).astype(np.float32), "w")]
    for name, values in extra_inputs:
        values = np.asarray(values)
        if values.dtype.kind == "f":
            initializers.append(numpy_helper.from_array(values.astype(np.float32), name))
            continue
        inputs.append(helper.make_tensor_value_info(name, TensorProto.INT64, list(values.shape)))
        feeds[name] = values.astype(np.int64)
    for name, values in constants:
        initializers.append(numpy_helper.from_array(np.asarray(values), name))
    operands = ["h"] + [name for name, _ in extra_inputs] + [name for name, _ in constants]
    nodes.append(helper.make_node(op, operands, ["r"], name="indexing", **(attrs or {})))
    nodes.append(helper.make_node("Flatten", ["r"], ["logits"], name="flat", axis=1))
    graph = helper.make_graph(nodes, "indexing", inputs,
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model, feeds


RUN_IDS = [[[1, 4, 0], [-1, 2, 2], [3, 3, 1], [0, -5, 4]],
           [[2, 0, 1], [4, 4, 4], [-2, 1, 0], [1, 3, 2]]]


def cases():
    return {
        "gather_elements_run_time": case(
            "GatherElements", [("ids", RUN_IDS)], {"axis": 1}),
        "gather_elements_short_dim": case(
            "GatherElements", [], {"axis": 2},
            [("cols", np.array([[[2, 0], [1, 1]], [[0, 0], [-1, 2]]], np.int64))]),
        "scatter_elements_add_repeats": case(
            "ScatterElements", [("ids", RUN_IDS),
                                ("upd", np.linspace(-1, 1, 24).reshape(2, 4, 3))],
            {"axis": 1, "reduction": "add"}),
        "scatter_elements_none": case(
            "ScatterElements", [("ids", [[[4, 0, 1]], [[1, 3, 0]]]),
                                ("upd", [[[5.0, 6.0, 7.0]], [[8.0, 9.0, 10.0]]])],
            {"axis": -2}),
        "gather_nd_constant": case(
            "GatherND", [], constants=[("rows", np.array([[1, 4], [0, -1], [1, 0]], np.int64))]),
        "gather_nd_run_time": case("GatherND", [("tuples", [[1, -2], [0, 3], [-1, 0]])]),
        "gather_nd_batch_dims": case(
            "GatherND", [("per_batch", [[[3, 2], [0, 0]], [[-1, 1], [2, 2]]])],
            {"batch_dims": 1}),
        "scatter_nd_run_time": case(
            "ScatterND", [("tuples", [[1, 4], [0, -1]]),
                          ("rows_upd", [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])]),
        "scatter_nd_add": case(
            "ScatterND", [("tuples", [[1], [1], [0]]),
                          ("slices", np.linspace(-1, 1, 45).reshape(3, 5, 3))],
            {"reduction": "add"}),
    }


CASES = cases()


@pytest.fixture(scope="module")
def compiled_cases(tmp_path_factory):
    out = {}
    for name, (model, _) in CASES.items():
        folder = tmp_path_factory.mktemp(name)
        path = str(folder / "model.onnx")
        onnx.save(model, path)
        run([tool("bmc"), "compile", path, "-o", str(folder / "out"), "--global-batch", "2"])
        out[name] = (path, str(folder / "out"))
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_onnxruntime(name, compiled_cases, tmp_path):
    path, out = compiled_cases[name]
    feeds = CASES[name][1]
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    got = bmrt_forward(out, feeds, tmp_path)["output0"]
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL, err_msg=name)


@pytest.mark.parametrize("name", ["gather_elements_run_time", "gather_elements_short_dim",
                                  "scatter_elements_add_repeats", "scatter_elements_none",
                                  "gather_nd_constant", "scatter_nd_add"])
def test_trains_through_the_gradient(name, compiled_cases, tmp_path):
    """Forty AdamW steps on the trainer's synthetic task (labels a function
    of the input, a fresh batch each step): every loss finite, and the mean
    of the last five below that of the first five (the gradient reaches W,
    and the updates where they are parameters, through the op). The
    synthetic indices stay below the indexed axis (idBound follows them
    through views); run-time GatherND/ScatterND tuples of two indices go
    through arithmetic that idBound does not follow, so they are left to
    the forward test."""
    _, out = compiled_cases[name]
    result = run([os.path.join(out, "trainer"), "--threads", "1", "--steps", "40",
                  "--lr", "0.05", "--log", str(tmp_path / "log.jsonl")])
    losses = [json.loads(line)["loss"] for line in open(tmp_path / "log.jsonl")
              if '"loss"' in line]
    assert len(losses) == 40, result.stdout
    assert all(np.isfinite(losses)), losses
    assert np.mean(losses[-5:]) < np.mean(losses[:5]), losses
