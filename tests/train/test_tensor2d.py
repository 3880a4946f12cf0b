"""2-D tensor parallelism (issue 29; Optimus, Xu et al. 2021): each tensor
group a tp x tp2 grid. tp splits the layers as 1-D tensor parallelism
does; tp2 splits each micro-batch's samples and every parameter along a
dimension tp leaves whole (Plan.h's tensor2Dim), so that neither the
weights nor the activations are replicated within the grid. Each reader of
a weight all-gathers its tp2 shards (SUMMA's broadcasts along the grid's
rows, as one collective) and its gradient is reduce-scattered back. 4 ranks
(2 x 2) must train as one does."""

from __future__ import annotations

import os

import pytest

from conftest import MODELS, run, tool
from test_layerwise_optimizers import check_ranks_train_as_one, check_resume_across


def program_of(out: str) -> str:
    with open(os.path.join(out, "step.bmp")) as f:
        return f.read()


# gpt3-small-cpu on the V100 cluster: the planner splits its heads, MLP
# and vocabulary over tp (gpt3-tiny keeps its layers whole), so tp and tp2
# both split the weights. llama2-tiny: rotary tables, RMS norms, grouped KV
# heads, fused attention.
@pytest.mark.parametrize("model,flags", [
    ("gpt3-small-cpu", ("--init", "random", "--cluster", "alpa-v100")),
    ("llama2-tiny", ("--fuse-attention", "on")),
])
def test_grid_trains_as_one(compiled, tmp_path, model, flags):
    # fp32 summation orders change (the weights' gradients summed over
    # tp2's samples inside a reduce-scatter, the GEMMs over tp): 1e-5
    # relative over the steps, as the other N-rank tests. A weight shard
    # read as if whole, or a gradient left unsummed over tp2, moves the
    # loss from the second step on by far more.
    flags = ("--global-batch", "8", *flags)
    one = compiled(model, *flags)
    grid = compiled(model, *flags, "--gpus", "4", "--fix", "tp=2,tp2=2,mb=8")
    program = program_of(grid)
    assert "tp2=2" in program.splitlines()[2]
    assert 'all_gather' in program and 'axes="tp2"' in program
    assert 'reduce_scatter' in program
    check_ranks_train_as_one(one, grid, 4, 3, tmp_path, every_rank=True)


@pytest.mark.parametrize("ranks,mesh,optimizer", [
    # With data parallelism and ZeRO 3 (its shards over dp, within each
    # tp2 shard), with pipeline stages, and with LAMB, whose trust ratios
    # need each weight's norms summed over its tp x tp2 blocks.
    (8, "dp=2,tp=2,tp2=2,mb=4,zero=3", "adam"),
    (8, "pp=2,tp=2,tp2=2,mb=4", "adam"),
    (4, "tp=2,tp2=2,mb=8", "lamb"),
])
def test_grid_composes(compiled, tmp_path, ranks, mesh, optimizer):
    # The same 1e-5 as above (measured 7.6e-8 for each).
    flags = ("--global-batch", "8", "--optimizer", optimizer)
    one = compiled("gpt3-tiny", *flags)
    grid = compiled("gpt3-tiny", *flags, "--gpus", str(ranks), "--fix", mesh)
    check_ranks_train_as_one(one, grid, ranks, 3, tmp_path)


def test_checkpoints_move_between_grid_and_one_rank(compiled, tmp_path):
    # Each rank writes its tp x tp2 block of every weight; the manifest's
    # offsets let one rank load the whole and the grid load its blocks.
    one = compiled("gpt3-tiny", "--global-batch", "8")
    grid = compiled("gpt3-tiny", "--global-batch", "8", "--gpus", "4",
                    "--fix", "tp=2,tp2=2,mb=8")
    check_resume_across(one, grid, 4, tmp_path)


def test_compile_follows_the_plan(tmp_path):
    # A plan written by bmc plan with tp2 compiles as written: the mesh
    # has the axis, the weights are stored in tp2 shards.
    plan = tmp_path / "plan.json"
    run([tool("bmc"), "plan", os.path.join(MODELS, "gpt3-tiny.onnx"), "--gpus", "4",
         "--global-batch", "8", "--fix", "tp=2,tp2=2", "-o", str(plan)])
    out = tmp_path / "out"
    run([tool("bmc"), "compile", os.path.join(MODELS, "gpt3-tiny.onnx"), "--plan",
         str(plan), "-o", str(out)])
    program = program_of(str(out))
    assert "tp2=2" in program.splitlines()[2]
    params = [line for line in program.splitlines()
              if line.startswith("slot") and " param " in line]
    assert params and any('"tp2"' in line for line in params), params[:3]
