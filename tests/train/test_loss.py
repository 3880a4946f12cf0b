"""The loss compile appends, and what the trainer feeds it.

A model whose output is a hidden state (nn.TransformerEncoder's [batch, seq,
hidden], here a residual MLP block) has no labels a classifier or a language
model could take: compile makes it a regression (mean squared error against
targets of the output's shape, which the trainer draws) and says so in its
first line; `--loss` picks the loss; what the trainer cannot feed is refused
by compile, in one line, before anything runs.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import read_log, run, tool
from test_parallel import mpirun

HIDDEN = 8


def encoder(tmp_path, out_dims=None) -> str:
    """x [2, 4, HIDDEN] -> x + relu(x @ W1) @ W2, then, with out_dims, a
    projection to [2, out_dims] of the positions' mean (a classifier head)."""
    rng = np.random.default_rng(11)
    w1 = numpy_helper.from_array(
        (rng.standard_normal((HIDDEN, 16)) * 0.3).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(
        (rng.standard_normal((16, HIDDEN)) * 0.3).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["b"]),
             helper.make_node("Add", ["x", "b"], ["y"])]
    inits, output = [w1, w2], "y"
    if out_dims:
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((HIDDEN, out_dims)) * 0.3).astype(np.float32), "head"))
        nodes += [helper.make_node("ReduceMean", ["y"], ["c"], axes=[1], keepdims=0),
                  helper.make_node("MatMul", ["c", "head"], ["logits"])]
        output = "logits"
    graph = helper.make_graph(
        nodes, "encoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, HIDDEN])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / ("classifier.onnx" if out_dims else "encoder.onnx"))
    onnx.save(model, path)
    return path


def compile_line(path: str, out: str, *flags: str) -> str:
    result = run([tool("bmc"), "compile", path, "-o", out, "--global-batch", "2", *flags])
    return result.stdout.splitlines()[0]


def train(out: str, log: str, *flags: str):
    return run([os.path.join(out, "trainer"), "--threads", "1", "--log", log, *flags])


def test_hidden_state_output_trains_as_a_regression(tmp_path):
    out = str(tmp_path / "out")
    line = compile_line(encoder(tmp_path), out)
    assert "(regression: mean squared error against targets of the output's shape)" in line
    with open(os.path.join(out, "trainer.json")) as f:
        assert json.load(f)["task"] == "regression"
    log = str(tmp_path / "log.jsonl")
    result = train(out, log, "--steps", "30", "--lr", "0.05")
    assert "data: synthetic regression task (one pattern of 32 targets" in result.stdout
    losses = [r["loss"] for r in read_log(log)]
    # The targets are one fixed N(0, 1) pattern: the loss starts near the
    # output's mean square plus one and falls as the model learns it.
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses


def test_cross_entropy_on_a_hidden_state_is_refused_by_compile(tmp_path):
    result = run([tool("bmc"), "compile", encoder(tmp_path), "-o", str(tmp_path / "out"),
                  "--global-batch", "2", "--loss", "cross-entropy"], check=False)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("bmc: error: the model's output needs labels of shape [2,4]")
    assert "--loss mse" in lines[0]
    assert not os.path.exists(tmp_path / "out" / "trainer")


def test_loss_flag_picks_the_loss_of_logits(tmp_path):
    path = encoder(tmp_path, out_dims=3)
    line = compile_line(path, str(tmp_path / "auto"))
    assert "(classifier: cross-entropy against one label per sample)" in line
    line = compile_line(path, str(tmp_path / "mse"), "--loss", "mse")
    assert "(regression:" in line
    log = str(tmp_path / "log.jsonl")
    train(str(tmp_path / "mse"), log, "--steps", "3")
    assert all(np.isfinite(r["loss"]) for r in read_log(log))


def test_unknown_loss_is_one_line(tmp_path):
    result = run([tool("bmc"), "compile", encoder(tmp_path), "-o", str(tmp_path / "out"),
                  "--loss", "hinge"], check=False)
    assert result.returncode != 0
    assert result.stderr.strip() == (
        "bmc: error: --loss must be auto, cross-entropy or mse, got 'hinge'")


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")
def test_regression_on_two_ranks_computes_what_one_device_computes(tmp_path):
    # Each rank takes one of the two samples and the mean squared error's
    # gradients are all-reduced: the same step as one device, up to fp32
    # summation order: 1e-5 relative over 5 steps.
    path = encoder(tmp_path)
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    compile_line(path, one)
    compile_line(path, two, "--gpus", "2", "--fix", "dp=2,tp=1,pp=1")
    train(one, str(tmp_path / "one.jsonl"), "--steps", "5")
    mpirun(2, two, "--steps", "5", "--log", str(tmp_path / "two.jsonl"))
    single = [r["loss"] for r in read_log(str(tmp_path / "one.jsonl"))]
    for log in ("two.jsonl", "two.rank1.jsonl"):
        losses = [r["loss"] for r in read_log(str(tmp_path / log))]
        np.testing.assert_allclose(losses, single, rtol=1e-5)


def save(tmp_path, name, nodes, inputs, output, inits) -> str:
    graph = helper.make_graph(nodes, name, inputs,
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(model, path)
    return path


def test_classifier_with_two_float_inputs_trains(tmp_path):
    # The classes are drawn into the larger float input (the images); the
    # other is noise.
    w = numpy_helper.from_array(np.full((6, 3), 0.1, np.float32), "w")
    path = save(tmp_path, "two_inputs",
                [helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
                 helper.make_node("MatMul", ["ab", "w"], ["logits"])],
                [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 4]),
                 helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 2])],
                "logits", [w])
    out = str(tmp_path / "out")
    assert "(classifier:" in compile_line(path, out)
    log = str(tmp_path / "log.jsonl")
    result = train(out, log, "--steps", "3")
    assert "synthetic classification task" in result.stdout
    assert all(np.isfinite(r["loss"]) for r in read_log(log))


def test_text_classifier_learns_its_first_token(tmp_path):
    # Integer inputs only (a sequence classifier over token ids): the label
    # is the first token modulo the synthetic classes (here the model's 4),
    # which embedding, flatten and a linear head can learn.
    rng = np.random.default_rng(2)
    table = numpy_helper.from_array(rng.normal(0, 0.5, (16, 8)).astype(np.float32), "table")
    head = numpy_helper.from_array(rng.normal(0, 0.1, (48, 4)).astype(np.float32), "head")
    path = save(tmp_path, "text",
                [helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
                 helper.make_node("Flatten", ["e"], ["f"], axis=1),
                 helper.make_node("MatMul", ["f", "head"], ["logits"])],
                [helper.make_tensor_value_info("ids", TensorProto.INT64, [8, 6])],
                "logits", [table, head])
    out = str(tmp_path / "out")
    run([tool("bmc"), "compile", path, "-o", out, "--global-batch", "8"])
    log = str(tmp_path / "log.jsonl")
    result = train(out, log, "--steps", "80", "--lr", "0.05")
    assert ("data: synthetic text classification (the label is the first token of "
            "'ids' modulo 4)") in result.stdout
    losses = [r["loss"] for r in read_log(log)]
    # ln 4 = 1.39 at chance; the first token decides the label.
    assert np.mean(losses[:5]) > 1.0 and np.mean(losses[-5:]) < 0.5, losses


def test_input_the_trainer_cannot_fill_is_refused_at_compile(tmp_path):
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    path = save(tmp_path, "masked",
                [helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.FLOAT),
                 helper.make_node("Mul", ["x", "m"], ["xm"]),
                 helper.make_node("MatMul", ["xm", "w"], ["logits"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]),
                 helper.make_tensor_value_info("mask", TensorProto.BOOL, [2, 4])],
                "logits", [w])
    result = run([tool("bmc"), "compile", path, "-o", str(tmp_path / "out"),
                  "--global-batch", "2"], check=False)
    assert result.returncode != 0
    assert result.stderr.strip() == ("bmc: error: the model takes an input of type "
                                     "tensor<2x4xi1>; the trainer fills i64 and f32 inputs")
