"""The models real exporters wrote, compiled, against onnxruntime.

Every file of models/exported (torchvision families and tiny Hugging Face
architectures through torch.onnx.export's legacy and dynamo exporters; see
models/README.md; four of the slowest under `scripts/test --full` only,
FULL_ONLY below) is compiled by `bmc compile --init random`; bmrt-forward
runs the forward program and onnxruntime the ONNX file with the same
weights on the same inputs. The files are graph-only: the weights are the
ones bmc initialised, adjusted as below, written back into the compiled
params.safetensors and into a copy of the model for onnxruntime.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from conftest import read_safetensors, run, tool, write_safetensors
from exported_models import FILES, IDS, bound_dims, dim_flags
from test_forward import bmrt_forward, inputs_for, vocab_of

# The weights. Matrices and kernels keep bmc's --init random (N(0, 0.02),
# He for convolutions) times GAIN: at He's full gain efficientnet_v2 (SiLU
# residual blocks whose batch norms, at their initial statistics, normalise
# nothing) is chaotic, and onnxruntime's own
# logits move by 100% for a 1e-6 relative change of the input (by 1.6e-4 at
# 0.9 of it, 3.5e-6 at 0.85: measured); no two fp32 implementations can
# agree on such a model. Vectors are set here, by what reads them: bmc
# zeroes the scale of a norm that the exporter wrote as elementwise ops
# (RMSNorm in LLaMA, Mistral, Qwen2, Gemma and T5, LayerNorm at opset 13),
# which makes those models' logits constant, and a bias of the size of the
# signal hides the signal in models whose activations shrink layer by layer
# (EfficientNet's logits are 1e-5 here): scales are N(1, 0.1), batch-norm
# variances U(0.5, 1.5), biases and shifts zero.
GAIN = 0.85
SCALE_INPUT = {"BatchNormalization": 1, "InstanceNormalization": 1,
               "LayerNormalization": 1, "RMSNormalization": 1,
               "SimplifiedLayerNormalization": 1}

# Tolerance, relative to the largest logit: both sides compute in fp32 in
# different summation orders, and these models are well conditioned at the
# weights above (onnxruntime's logits move by at most 5e-6 of their scale
# for a 1e-6 relative change of the image), so the two agree to a few 1e-6
# (2.8e-6 at worst over the 85 files, measured 2026-11-26). The logits must
# also depend on the input: two samples' differ by at least
# INPUT_DEPENDENCE of the scale (4.8e-2 at the least, GoogLeNet), so a
# kernel or rule that is wrong anywhere moves them by far more than TOL.
TOL = 1e-4
INPUT_DEPENDENCE = 1e-2


def vector_roles(model: onnx.ModelProto) -> dict[str, str]:
    """'variance' or 'scale' for the initializers read as such; the rest are
    biases or shifts."""
    roles: dict[str, str] = {}
    for node in model.graph.node:
        for index, name in enumerate(node.input):
            if node.op_type == "BatchNormalization" and index == 4:
                roles[name] = "variance"
            elif node.op_type == "Mul" or SCALE_INPUT.get(node.op_type) == index:
                roles.setdefault(name, "scale")
    return roles


def exported_weights(model: onnx.ModelProto, initialised: dict[str, np.ndarray],
                 seed: int = 5) -> dict[str, np.ndarray]:
    """bmc's initial parameters, adjusted as the comment at the top says."""
    rng = np.random.default_rng(seed)
    roles = vector_roles(model)
    weights = {}
    for name, value in initialised.items():
        if value.dtype != np.float32:
            weights[name] = value  # a causal mask
        elif value.ndim >= 2:
            weights[name] = value * np.float32(GAIN)
        elif roles.get(name) == "variance":
            weights[name] = rng.uniform(0.5, 1.5, value.shape).astype(np.float32)
        elif roles.get(name) == "scale":
            weights[name] = (1 + 0.1 * rng.standard_normal(value.shape)).astype(np.float32)
        else:
            weights[name] = np.zeros_like(value)
    return weights


def with_weights(model: onnx.ModelProto, weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` whose initializers hold `weights`, embedded."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for init in copy.graph.initializer:
        if init.name in weights:
            init.CopyFrom(numpy_helper.from_array(weights[init.name], init.name))
    absent = [i.name for i in copy.graph.initializer
              if i.data_location == onnx.TensorProto.EXTERNAL]
    assert not absent, f"initializers bmc does not hold as parameters: {absent[:5]}"
    return copy


def compile_exported(path: str, out: str, dims: dict[str, int]) -> int:
    """`bmc compile --init random` at two samples per micro-batch; the batch."""
    run([tool("bmc"), "compile", path, "-o", out, "--init", "random",
         "--global-batch", "2", *dim_flags(dims)])
    with open(os.path.join(out, "trainer.json")) as f:
        return json.load(f)["micro_batch"]


# The slowest files (4-28 s each on two cores), whose architecture CI
# checks through another exporter's file (vgg-dynamo18, alexnet-legacy17,
# efficientnet_v2-dynamo18, wide_resnet-dynamo18): run under
# `scripts/test --full` (BMC_TEST_FULL=1), to keep CI's time.
FULL_ONLY = {"vgg-legacy13", "vgg-legacy17", "alexnet-dynamo18",
             "alexnet-legacy13", "efficientnet_v2-legacy17",
             "wide_resnet-legacy13", "wide_resnet-legacy17"}
PARAMS = [pytest.param(path, id=name, marks=pytest.mark.skipif(
              name in FULL_ONLY and not os.environ.get("BMC_TEST_FULL"),
              reason="its architecture runs through another exporter's file; "
                     "this one under scripts/test --full"))
          for path, name in zip(FILES, IDS)]


@pytest.mark.parametrize("path", PARAMS)
def test_exported_forward_matches_onnxruntime(path, tmp_path):
    name = os.path.basename(path)
    model = onnx.load(path, load_external_data=False)
    dims = bound_dims(model)
    out = str(tmp_path / "out")
    batch = compile_exported(path, out, dims)
    assert batch >= 2, f"{name}: a micro-batch of {batch} shows no input dependence"
    params = os.path.join(out, "params.safetensors")
    weights = exported_weights(model, read_safetensors(params))
    write_safetensors(params, weights)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1  # as bmrt-forward (ENV): two cores, shared
    session = ort.InferenceSession(with_weights(model, weights).SerializeToString(),
                                   options, providers=["CPUExecutionProvider"])
    feeds = inputs_for(model, batch, vocab_of(session), dims=dims)
    expected = session.run(None, feeds)

    got = bmrt_forward(out, feeds, tmp_path)
    assert len(got) == len(expected)
    for i, want in enumerate(expected):
        scale = float(np.abs(want).max())
        assert np.isfinite(want).all() and scale > 0, f"{name} output {i}: {scale}"
        dependence = float(np.abs(want[0] - want[1]).max()) / scale
        assert dependence >= INPUT_DEPENDENCE, f"{name} output {i} barely depends on the input"
        np.testing.assert_allclose(got[f"output{i}"], want, rtol=0, atol=TOL * scale,
                                   err_msg=f"{name} output {i}")
