"""Fused attention (bm-fuse-attention; --fuse-attention on, the default for
--device cuda) on the CPU trainer: the attention cores of the zoo's and the
exporters' transformers become `attention` instructions, and the losses are
those of the unfused step to fp32 rounding, on one rank and split over tp
(heads) or pp. The plan records the choice and compile --plan keeps it.

Tolerance: the fused step sums the same terms as the unfused one (the
scores' dot products, the softmax's row sums, the context's weighted sums)
in other groupings (one OpenBLAS GEMM per head instead of one batched
call, the softmax gradient's row sum over p * dp instead of dy * y): a few
ulps per step, 1e-5 relative over ten steps of SGD. A wrong scale, mask or
gradient moves the first loss by far more."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnx
import pytest

from conftest import MODELS, read_log, run, tool
from test_parallel import mpirun
from test_trainer import error_line
from exported_models import EXPORTED, bound_dims, dim_flags

STEPS = 10


def instructions(folder: str, op: str) -> int:
    count = 0
    for name in os.listdir(folder):
        if name.endswith(".bmp"):
            with open(os.path.join(folder, name)) as f:
                count += sum(1 for line in f if f"= {op} " in line)
    return count


def losses(tmp_path, folder: str, name: str, ranks: int = 1) -> list[float]:
    log = str(tmp_path / f"{name}.jsonl")
    flags = ["--steps", str(STEPS), "--log", log]
    if ranks == 1:
        run([os.path.join(folder, "trainer"), "--threads", "1", *flags])
    else:
        mpirun(ranks, folder, *flags)
    return [r["loss"] for r in read_log(log)]


def compile_zoo(model: str, out: str, *flags: str) -> str:
    run([tool("bmc"), "compile", os.path.join(MODELS, f"{model}.onnx"), "-o", out,
         "--optimizer", "sgd", "--global-batch", "4", *flags])
    return out


@pytest.mark.parametrize("model", ["gpt3-tiny", "llama2-tiny", "hf-gpt2-tiny", "bert-tiny",
                                   "vit-tiny"])
def test_fused_step_trains_as_the_unfused_one(model, tmp_path):
    plain = compile_zoo(model, str(tmp_path / "plain"))
    fused = compile_zoo(model, str(tmp_path / "fused"), "--fuse-attention", "on")
    assert instructions(plain, "attention") == 0
    assert instructions(fused, "attention") > 0
    assert instructions(fused, "softmax") == 0
    assert instructions(fused, "attention_grad") > 0
    np.testing.assert_allclose(losses(tmp_path, fused, "fused"),
                               losses(tmp_path, plain, "plain"), rtol=1e-5)


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="needs mpirun")
@pytest.mark.parametrize("fix", ["dp=1,tp=2,pp=1", "dp=1,tp=1,pp=2,schedule=1f1b"])
def test_fused_attention_on_two_ranks_matches_one_unfused(fix, tmp_path):
    one = compile_zoo("gpt3-tiny", str(tmp_path / "one"))
    two = compile_zoo("gpt3-tiny", str(tmp_path / "two"), "--gpus", "2", "--fix", fix,
                      "--fuse-attention", "on")
    assert instructions(two, "attention") > 0
    single = losses(tmp_path, one, "one")
    split = losses(tmp_path, two, "two", ranks=2)
    np.testing.assert_allclose(split, single, rtol=1e-5)


def test_exported_gqa_model_fuses(tmp_path):
    # Qwen3 from the dynamo exporter: grouped keys expanded before the
    # scores, a causal mask built by where from a Trilu of ones.
    path = os.path.join(EXPORTED, "qwen3-dynamo18.onnx")
    dims = {d: 16 for d in bound_dims(onnx.load(path, load_external_data=False))}
    common = ["--init", "random", "--global-batch", "2", "--optimizer", "sgd",
              *dim_flags(dims)]
    plain, fused = str(tmp_path / "plain"), str(tmp_path / "fused")
    run([tool("bmc"), "compile", path, "-o", plain, *common])
    run([tool("bmc"), "compile", path, "-o", fused, *common, "--fuse-attention", "on"])
    assert instructions(fused, "attention") > 0
    np.testing.assert_allclose(losses(tmp_path, fused, "fused"),
                               losses(tmp_path, plain, "plain"), rtol=1e-5)


def test_cuda_compiles_fused_by_default(tmp_path):
    # The CUDA backend runs fused attention unless told otherwise; compiling
    # for it needs no GPU.
    cuda = compile_zoo("gpt3-tiny", str(tmp_path / "cuda"), "--device", "cuda")
    assert instructions(cuda, "attention") > 0
    off = compile_zoo("gpt3-tiny", str(tmp_path / "off"), "--device", "cuda",
                      "--fuse-attention", "off")
    assert instructions(off, "attention") == 0


def test_plan_records_fusion_and_compile_keeps_it(tmp_path):
    model = os.path.join(MODELS, "gpt3-tiny.onnx")
    fused_plan, plain_plan = str(tmp_path / "fused.json"), str(tmp_path / "plain.json")
    run([tool("bmc"), "plan", model, "--gpus", "2", "--fuse-attention", "on", "-o", fused_plan])
    run([tool("bmc"), "plan", model, "--gpus", "2", "-o", plain_plan])
    with open(fused_plan) as f:
        assert json.load(f)["fused_attention"] is True
    with open(plain_plan) as f:
        assert "fused_attention" not in json.load(f)
    # The plan decides: a CPU compile of a fused plan fuses, a CUDA compile
    # of an unfused plan does not.
    out = str(tmp_path / "from_fused")
    run([tool("bmc"), "compile", model, "--plan", fused_plan, "-o", out])
    assert instructions(out, "attention") > 0
    out = str(tmp_path / "from_plain")
    run([tool("bmc"), "compile", model, "--plan", plain_plan, "--device", "cuda", "-o", out])
    assert instructions(out, "attention") == 0
    line = error_line(run([tool("bmc"), "compile", model, "--plan", plain_plan,
                           "--fuse-attention", "on", "-o", str(tmp_path / "x")], check=False))
    assert line == (f"bmc: error: plan '{plain_plan}' was made with --fuse-attention off but "
                    "--fuse-attention says on; plan again with bmc plan --fuse-attention on")


def test_bad_fuse_attention_flags_are_one_line(tmp_path):
    model = os.path.join(MODELS, "gpt3-tiny.onnx")
    line = error_line(run([tool("bmc"), "compile", model, "--fuse-attention", "yes", "-o",
                           str(tmp_path / "x")], check=False))
    assert line == "bmc: error: --fuse-attention must be on or off, got 'yes'"
    line = error_line(run([tool("bmc"), "plan", model, "--gpus", "1", "--fuse-attention", "on",
                           "--fix", "recompute=selective"], check=False))
    assert "attention is fused (its backward recomputes the scores, which are never " \
           "stored), so selective recomputation drops nothing more" in line
