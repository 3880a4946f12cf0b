"""The partitioned training step runs the collectives the plan priced.

For tiny zoo models and a full-size GPT-3 (1.3B, shapes only) planned on
dp=2 x tp=2 (over a cluster of slow devices,
so that the planner does split them over tp), bm-partition must run
exactly the collectives the plan priced: for each kind (all-reduce,
reduce-scatter, all-gather, all-to-all), mesh axis and phase, as many
calls per micro-batch moving as many bytes (the plan's buffer sizes at its
precision; the partitioned step computes in fp32, the vocabulary-parallel
loss's statistics are fp32 in both); and the data-parallel reduction of the
gradients, which the plan prices as a step collective, is left to the
trainer (the gradients leave the step as partial sums over dp).

An embedding table tied to the LM head is split along the vocabulary for
both readers (the planner offers only that split to the lookup, and the
partition stores the table once and gathers from its slice in place,
Megatron's vocabulary-parallel embedding); a parameter broadcast over the
batch (ViT's class token) is broadcast to each replica's rows, so its
gradient is a partial sum over dp like every parameter's.
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from collectives import plan_collectives, step_collectives  # noqa: E402

BIN = os.path.join(ROOT, "build", "bin")
CLUSTER = os.path.join(ROOT, "tests", "data", "clusters", "slow-compute.yaml")
def pipeline(recompute):
    return ("builtin.module(func.func(bm-fuse-gelu,bm-insert-reshards),"
            f"bm-autodiff{{recompute={recompute}}},bm-partition)")


def partition(model, fix, tmp_path):
    mlir, plan = tmp_path / "annotated.mlir", tmp_path / "plan.json"
    subprocess.run([os.path.join(BIN, "bmc"), "plan",
                    os.path.join(ROOT, "models", "onnx", model + ".onnx"),
                    "--gpus", "4", "--cluster", CLUSTER, "--fix", fix,
                    "--emit-mlir", str(mlir), "-o", str(plan)],
                   check=True, stdout=subprocess.DEVNULL)
    config = json.loads(plan.read_text())
    step = subprocess.run([os.path.join(BIN, "bmc-opt"), str(mlir),
                           "--pass-pipeline=" + pipeline(config["config"]["recompute"])],
                          check=True, capture_output=True, text=True).stdout
    return step, config


@pytest.mark.parametrize("model", ["llama2-tiny", "bert-tiny", "t5-tiny", "gpt3-tiny",
                                   "vit-tiny", "moe-tiny", "gpt3-1.3b"])
def test_partition_reduces_where_the_plan_does(model, tmp_path):
    step, plan = partition(model, "dp=2,tp=2,pp=1", tmp_path)
    # The plan counts a step's micro-batches; the program is one of them.
    got = step_collectives(step)
    want = plan_collectives(plan, plan["config"]["num_micro_batches"])
    assert any(axis == "tp" for _, axis, _ in want), "the plan uses no tp"
    for key in sorted(set(got) | set(want)):
        print(key, "plan", want.get(key, 0), "partitioned", got.get(key, 0))
    float_bytes = 4 if plan["precision"] == "fp32" else 2
    got_bytes = step_collectives(step, "bytes", float_bytes)
    want_bytes = plan_collectives(plan, plan["config"]["num_micro_batches"], "bytes")
    for kind in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all"):
        for phase in ("forward", "backward"):
            for axis in ("tp", "dp"):
                key = (kind, axis, phase)
                assert got.get(key, 0) == want.get(key, 0), key
                assert got_bytes.get(key, 0) == want_bytes.get(key, 0), (
                    key, "bytes", got_bytes.get(key, 0), want_bytes.get(key, 0))
    assert not any(axis == "dp" and kind in ("all_reduce", "reduce_scatter")
                   for kind, axis, _ in got), "the step reduces over dp itself"
    assert 'bm.partial = ["dp"' in step
    # Gradients the plan all-reduces over tp at the step are left partial
    # over tp for the trainer.
    if want.get(("all_reduce", "tp", "step")):
        assert '"dp", "tp"]' in step
