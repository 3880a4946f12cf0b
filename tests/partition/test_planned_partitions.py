"""Every plan `bmc plan` prints partitions: for full-size zoo models on 8,
64 and 512 GPUs (shapes only, so this is cheap), the plan's annotated IR
goes through autodiff and the partition phase (bm-partition,
bm-split-stages, bm-verify-partitioned) without an error. Each case here
once failed: rows flattened from a batch split over dp and a sequence
split over tp (HF GPT-2's Conv1D under sequence parallelism on 512 GPUs;
MoE-27B's token reshapes), each device's share strided in the merged dim.
"""
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "bin")

# T5-large on 8: dp4 x pp2 interleaved over 12 chunks, the encoder's
# output crossing every decoder boundary beside the stream.
CASES = [("hf-gpt2-124m", 512), ("moe-27b", 8), ("moe-27b", 64), ("gpt3-13b", 64),
         ("llama2-70b", 64), ("vit-h14", 512), ("t5-large", 8)]


@pytest.mark.parametrize("model,gpus", CASES, ids=[f"{m}-{g}" for m, g in CASES])
def test_the_planners_plan_partitions(model, gpus, tmp_path):
    mlir, plan = tmp_path / "annotated.mlir", tmp_path / "plan.json"
    subprocess.run([os.path.join(BIN, "bmc"), "plan",
                    os.path.join(ROOT, "models", "onnx", model + ".onnx"),
                    "--gpus", str(gpus), "--emit-mlir", str(mlir), "-o", str(plan)],
                   check=True, stdout=subprocess.DEVNULL)
    config = json.loads(plan.read_text())["config"]
    pipeline = ("builtin.module(func.func(bm-fuse-gelu,bm-insert-reshards),"
                f"bm-autodiff{{recompute={config['recompute']}}},bm-partition-phase)")
    result = subprocess.run([os.path.join(BIN, "bmc-opt"), str(mlir),
                             "--pass-pipeline=" + pipeline, "-o", os.devnull],
                            capture_output=True, text=True)
    assert result.returncode == 0, f"{model} on {gpus} GPUs ({config}):\n{result.stderr[:2000]}"
