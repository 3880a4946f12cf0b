"""The partitioned training step runs the collectives the plan priced.

For tiny zoo models and a full-size GPT-3 (1.3B, shapes only) planned on
dp=2 x tp=2 (over a cluster of slow devices,
so that the planner does split them over tp), bm-partition must reduce
exactly where the plan does: every all-reduce and reduce-scatter, by mesh
axis and phase, as many times per step as the plan counts; and the
data-parallel reduction of the gradients, which the plan prices as a step
collective, is left to the trainer (the gradients leave the step as partial
sums over dp). The all-gathers are printed beside the plan's, not asserted
equal yet: the partition adds the loss's own gather of vocabulary-split
logits (the planner does not price the loss), the gathers around a fused
QKV projection split by heads (a strided share, gathered and sliced again
where Megatron permutes the weight's columns instead), and gathers of
gradients that the plan sends back to a replicated producer.
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
    for kind in ("all_reduce", "reduce_scatter"):
        for phase in ("forward", "backward"):
            key = (kind, "tp", phase)
            assert got.get(key, 0) == want.get(key, 0), key
    assert not any(axis == "dp" and kind in ("all_reduce", "reduce_scatter")
                   for kind, axis, _ in got), "the step reduces over dp itself"
    assert 'bm.partial = ["dp"' in step
    # Gradients the plan all-reduces over tp at the step are left partial
    # over tp for the trainer.
    if want.get(("all_reduce", "tp", "step")):
        assert '"dp", "tp"]' in step
