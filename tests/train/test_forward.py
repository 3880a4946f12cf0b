"""The compiled forward model against onnxruntime on the same ONNX file.

For every tiny model of the zoo and every Hugging Face tiny export, `bmc
compile` lowers the model to a forward program; bmrt-forward runs it with the
model's weights, and onnxruntime runs the ONNX file, on the same inputs.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import MODELS, read_safetensors, run, tool, write_safetensors

TINY = ["gpt3-tiny", "llama2-tiny", "bert-tiny", "t5-tiny", "vit-tiny",
        "wresnet-tiny", "moe-tiny", "hf-gpt2-tiny", "hf-llama2-tiny", "hf-bert-tiny"]

# Tolerance: both sides compute in fp32 but sum in different orders
# (OpenBLAS against MLAS, our reductions against onnxruntime's). Each logit
# is a chain of a few hundred-term dot products through two layers, so the
# orders differ by a few fp32 ulps per term: about 1e-6 relative to the sum
# of |terms|, which for these O(1)-weighted tiny models is below 1e-4 of the
# logits' scale. A wrong kernel or rule is off by O(1).
RTOL, ATOL = 1e-4, 1e-4


def inputs_for(model: onnx.ModelProto, batch: int, vocab: int, seed: int = 3,
               dims: dict[str, int] | None = None):
    """Random inputs: token ids below `vocab`, N(0, 1) floats. Dim 0 is the
    batch; other symbolic dims take their size from `dims`, or else from the
    zoo's metadata `bm.dim.NAME`."""
    if dims is None:
        dims = {p.key[len("bm.dim."):]: int(p.value) for p in model.metadata_props
                if p.key.startswith("bm.dim.")}
    rng = np.random.default_rng(seed)
    feeds = {}
    initializers = {i.name for i in model.graph.initializer}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        shape = [d.dim_value or (batch if i == 0 else dims[d.dim_param])
                 for i, d in enumerate(value.type.tensor_type.shape.dim)]
        if value.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[value.name] = rng.integers(0, vocab, size=shape, dtype=np.int64)
        else:
            feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def vocab_of(session: ort.InferenceSession) -> int:
    """The token-id bound: the last dim of the first output (the logits)."""
    last = session.get_outputs()[0].shape[-1]
    return last if isinstance(last, int) else 16


def bmrt_forward(out: str, feeds: dict[str, np.ndarray], tmp) -> dict[str, np.ndarray]:
    """The outputs ("output0", ...) of bmrt-forward on the model compiled in `out`."""
    write_safetensors(str(tmp / "in.safetensors"), feeds)
    run([tool("bmrt-forward"), out, str(tmp / "in.safetensors"),
         str(tmp / "out.safetensors")])
    return read_safetensors(str(tmp / "out.safetensors"))


@pytest.mark.parametrize("name", TINY)
def test_forward_matches_onnxruntime(name, compiled, tmp_path):
    out = compiled(name, "--global-batch", "2")
    path = os.path.join(MODELS, f"{name}.onnx")
    model = onnx.load(path)
    with open(os.path.join(out, "trainer.json")) as f:
        batch = json.load(f)["micro_batch"]
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = inputs_for(model, batch, vocab_of(session))
    expected = session.run(None, feeds)

    got = bmrt_forward(out, feeds, tmp_path)
    assert len(got) == len(expected)
    for i, want in enumerate(expected):
        np.testing.assert_allclose(got[f"output{i}"], want, rtol=RTOL, atol=ATOL,
                                   err_msg=f"{name} output {i}")
