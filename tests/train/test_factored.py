"""A fused QKV projection split by heads over tp is stored in its factored
view: GPT's [64, 192] weight as [64, 3, 64] split along the last dim, so
that each rank's contiguous shard is its strided share of q, k and v
(Megatron-LM's permuted columns) and the step runs no collective to cut it.
The view holds the model's elements in the same order: the checkpoint
merges to it, `bmc export` writes the model's [64, 192] initializer from it,
a bad shape is still refused, and the compiled forward matches the one-rank
model (test_partitioned.py checks the training math).
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from conftest import MODELS, read_safetensors, run, tool, write_safetensors
from mesh_programs import read_checkpoint

MPIRUN = shutil.which("mpirun")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(ROOT, "tests", "data", "clusters", "slow-compute.yaml")
QKV = "h.0.attn.qkv.weight"


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("gpt-tp2"))
    run([tool("bmc"), "compile", os.path.join(MODELS, "gpt3-tiny.onnx"), "-o", out,
         "--init", "random", "--seed", "3", "--gpus", "2", "--cluster", CLUSTER,
         "--fix", "dp=1,tp=2,pp=1"])
    return out


def test_the_qkv_weight_is_stored_factored_and_read_without_collectives(tp2):
    with open(os.path.join(tp2, "step.bmp")) as f:
        text = f.read()
    # Local [64, 3, 32] of the view [64, 3, 64], split along its last dim.
    assert f'param f32[64,3,32] "{QKV}" sharding=[[],[],["tp"]] model=[64,192]' in text
    assert f'grad f32[64,3,32] "{QKV}" sharding=[[],[],["tp"]]' in text
    # Nothing gathers or slices the projection or its split into heads
    # (its backward all-reduces the input's gradient, as Megatron's does).
    qkv = [l for l in text.splitlines()
           if "attn/qkv" in l and ("all_gather" in l or "shard_slice" in l)]
    assert not qkv, qkv


@pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")
def test_a_factored_checkpoint_exports_the_models_shapes(tp2, tmp_path):
    import onnx
    from onnx import numpy_helper

    ckpt = tmp_path / "ckpt"
    run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2",
         "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1",
         os.path.join(tp2, "trainer"), "--steps", "2", "--threads", "1", "--quiet",
         "--checkpoint", str(ckpt)])
    trained = read_checkpoint(str(ckpt))
    assert trained[QKV].shape == (64, 3, 64)
    run([tool("bmc"), "export", str(ckpt), "-o", str(tmp_path / "m.onnx")])
    exported = {i.name: numpy_helper.to_array(i)
                for i in onnx.load(str(tmp_path / "m.onnx")).graph.initializer}
    assert exported[QKV].shape == (64, 192)
    for name, value in trained.items():
        np.testing.assert_array_equal(exported[name], value.reshape(exported[name].shape),
                                      err_msg=name)


def test_a_transposed_parameter_is_still_refused(tp2, tmp_path):
    # [64, 192] and [192, 64] hold the same count in another order: the
    # trainer names both shapes instead of reading it as the view.
    out = tmp_path / "bad"
    shutil.copytree(tp2, out)
    params = read_safetensors(str(out / "params.safetensors"))
    params[QKV] = np.ascontiguousarray(params[QKV].reshape(64, 192).T)
    write_safetensors(str(out / "params.safetensors"), params)
    result = run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2",
                  os.path.join(str(out), "trainer"), "--steps", "1", "--threads", "1",
                  "--quiet"], check=False)
    assert result.returncode != 0
    assert f"'{QKV}' is f32[192,64], the program needs f32[64,3,64]" in result.stderr
