"""The partitioned training step runs the collectives the plan priced.

For tiny zoo models and a full-size GPT-3 (1.3B, shapes only) planned on
dp=2 x tp=2 (over a cluster of slow devices,
so that the planner does split them over tp), bm-partition must reduce
and gather exactly where the plan does: every all-reduce and
reduce-scatter over tp, by phase, and every forward all-gather over tp
(the vocabulary-parallel loss's statistics included), as many times per
micro-batch as the plan counts; and the data-parallel reduction of the
gradients, which the plan prices as a step collective, is left to the
trainer (the gradients leave the step as partial sums over dp).

The rest match too (an embedding table tied to the LM head is split
along the vocabulary for both readers: the planner offers only that split
to the lookup, and the partition stores the table once and gathers from
its slice in place, Megatron's vocabulary-parallel embedding), except
ViT's class token, whose gradient the partition gathers over dp where the
plan does not: KNOWN_EXTRA lists it; a plan that prices it, or a
partition that avoids it, makes this test fail until the entry goes.
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
# Collectives the partition runs beyond the plan's, per micro-batch (see
# the module's docstring).
KNOWN_EXTRA = {
    "vit-tiny": {("all_gather", "dp", "backward"): 1},
}


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
    for kind in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all"):
        for phase in ("forward", "backward"):
            for axis in ("tp", "dp"):
                key = (kind, axis, phase)
                extra = KNOWN_EXTRA.get(model, {}).get(key, 0)
                assert got.get(key, 0) == want.get(key, 0) + extra, key
    assert not any(axis == "dp" and kind in ("all_reduce", "reduce_scatter")
                   for kind, axis, _ in got), "the step reduces over dp itself"
    assert 'bm.partial = ["dp"' in step
    # Gradients the plan all-reduces over tp at the step are left partial
    # over tp for the trainer.
    if want.get(("all_reduce", "tp", "step")):
        assert '"dp", "tp"]' in step
