"""Parallelism does not change the math: `bmc compile --gpus N --fix ...`
partitions the training step (bm-partition) and `mpirun -np N trainer`
runs it; ten AdamW steps give the one-rank losses and, merged from the
shards of the final checkpoint, the one-rank weights.

Tolerance, fp32: losses within 1e-5 relative, weights within 1e-5
relative plus 1e-5 absolute. The partitioned step computes the same sums
in other groupings (a GEMM's reduction over the hidden dim as tp partial
sums joined by an all-reduce, the batch as dp partial sums, means as sums
of local means scaled by 1/dp), each a rounding of about 1e-7 relative.
The runs use SGD: its update is proportional to the gradient, so those
roundings stay roundings in the weights. (Adam's m / sqrt(v) is
scale-free per element: an element whose gradient is at rounding level
steps by up to lr in a direction rounding decides, so Adam runs cannot be
compared element by element at this tolerance.) The absolute part covers
weights whose gradient is a sum that cancels (an embedding row summed over
tokens of both dp halves): their error scales with the terms, not the
sum. Measured worst: losses 9.4e-8 relative; weights 3.1e-6 absolute
(moe-tiny, ep2: an embedding row), 3.6e-7 elsewhere. Each test prints
its own (-s). A parameter on several pipeline stages (GPT's tied
embedding) sums the same shares (embedding and output layer, over
micro-batches, dp ranks and, under an interleaved schedule, a rank's
chunks) in another order, also a rounding: gpt3-tiny under dp2 x pp2
with ZeRO 2 and 3 and pp2 interleaved, losses 7.6e-8 relative, weights
1.2e-7 absolute. Stage boundaries that carry several values (T5's encoder
output beside the decoder's stream; gradients of tables computed again
on the next stage) move the same bytes as one rank's step reads: t5-tiny
pp2 (1F1B and GPipe) losses equal, weights 3.0e-8 absolute;
hf-llama2-tiny pp2 losses 9.4e-8, weights 3.0e-7.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import sys

import numpy as np
import pytest

from conftest import read_log, read_safetensors, run, tool, MODELS
from mesh_programs import read_checkpoint

MPIRUN = shutil.which("mpirun")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(ROOT, "tests", "data", "clusters", "slow-compute.yaml")
LOSS_RTOL = 1e-5
WEIGHT_RTOL, WEIGHT_ATOL = 1e-5, 1e-5
STEPS = 10


def model_path(tmp_path_factory, model):
    """The zoo's file, or for "NAME-4l" the zoo's NAME with four layers
    (an interleaved schedule needs pp x v chunks of layers), built here."""
    deeper = re.fullmatch(r"(.*)-(\d+)l", model)
    if not deeper:
        return os.path.join(MODELS, f"{model}.onnx")
    path = os.path.join(str(tmp_path_factory.getbasetemp()), f"{model}.onnx")
    if not os.path.exists(path):
        sys.path.insert(0, os.path.join(ROOT, "models"))
        import zoo
        config = dataclasses.replace(zoo.BY_NAME[deeper.group(1)], name=model,
                                     layers=int(deeper.group(2)))
        zoo.save(zoo.build(config), path)
    return path


def compile_for(tmp_path_factory, model, gpus, fix=None):
    out = str(tmp_path_factory.mktemp(f"{model}-{gpus}"))
    args = [tool("bmc"), "compile", model_path(tmp_path_factory, model), "-o", out,
            "--init", "random", "--seed", "3", "--optimizer", "sgd", "--gpus", str(gpus),
            "--cluster", CLUSTER]
    if fix:
        args += ["--fix", fix]
    result = run(args, check=False)
    if result.returncode != 0 and "bmc: error: --fix" in result.stderr:
        # The full cross product meets shapes a model cannot take (one
        # layer to recompute, a sequence tp does not divide).
        pytest.skip(result.stderr.strip())
    assert result.returncode == 0, result.stderr
    return out


# SGD's learning rate per model: as high as keeps ten steps stable (a
# rounding then stays a rounding), high enough that they visibly train.
LR = {"bert-tiny": "0.3", "gpt3-tiny": "0.3", "gpt3-tiny-4l": "0.3", "vit-tiny-4l": "0.3",
      "hf-gpt2-tiny": "0.3",
      "moe-tiny": "0.3", "moe-tiny-4l": "0.3", "moe-tiny-8l": "0.3", "t5-tiny": "30", "vit-tiny": "0.3",
      "wresnet-tiny": "0.02"}


def train(folder, ranks, tmp_path, name, lr, *flags, ckpt=None):
    """`flags` added to a run of STEPS steps that logs and checkpoints into
    `tmp_path` (or `ckpt`); returns rank 0's losses and the checkpoint's
    weights."""
    log, ckpt = str(tmp_path / f"{name}.jsonl"), ckpt or str(tmp_path / f"{name}.ckpt")
    args = [os.path.join(folder, "trainer"), "--steps", str(STEPS), "--lr", lr,
            "--threads", "1", "--quiet", "--log", log, "--checkpoint", ckpt, *flags]
    if ranks > 1:
        args = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1", *args]
    run(args)
    losses = [r["loss"] for r in read_log(log) if r.get("rank", 0) == 0]
    return np.array(losses), read_checkpoint(ckpt)


_one_rank = {}


def one_rank(tmp_path_factory, model):
    """The one-rank run's folder, losses and weights. Every plan trains on
    its samples: the feeder draws each sample's inputs together, so how a
    plan splits the batch into micro-batches and over dp ranks does not
    change them."""
    if model not in _one_rank:
        tmp = tmp_path_factory.mktemp(f"{model}-one")
        folder = compile_for(tmp_path_factory, model, 1)
        losses, weights = train(folder, 1, tmp, "one", LR.get(model, "10"))
        start = read_safetensors(os.path.join(folder, "params.safetensors"))
        moved = max(float(np.max(np.abs(weights[k] - start[k]))) for k in weights)
        assert moved > 1e-3, f"{model}: ten steps moved no weight: a vacuous check"
        _one_rank[model] = folder, losses, weights
    return _one_rank[model]


_parallel = {}


def parallel_run(tmp_path_factory, model, gpus, fix):
    """The plan's folder and its ten straight steps' losses and weights."""
    key = (model, gpus, fix)
    if key not in _parallel:
        folder = compile_for(tmp_path_factory, model, gpus, fix)
        tmp = tmp_path_factory.mktemp(f"{model}-{gpus}-run")
        _parallel[key] = (folder, *train(folder, gpus, tmp, "parallel",
                                         LR.get(model, "10")))
    return _parallel[key]


PLANS = [
    ("gpt3-tiny", 2, "dp=1,tp=2,pp=1"),
    ("gpt3-tiny", 4, "dp=2,tp=2,pp=1,zero=1"),
    ("hf-gpt2-tiny", 2, "dp=1,tp=2,pp=1"),
    ("vit-tiny", 2, "dp=1,tp=2,pp=1"),
    ("vit-tiny", 2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"),
    ("gpt3-tiny", 2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"),
    ("llama2-tiny", 2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"),
    ("vit-tiny-4l", 2, "dp=1,tp=1,pp=2,v=2,mb=2,schedule=interleaved"),
    ("llama2-tiny", 4, "dp=1,tp=2,pp=2,mb=2,schedule=1f1b"),
    ("gpt3-tiny", 4, "dp=1,tp=2,pp=2,mb=2,schedule=gpipe"),
    # GPT's embedding tied to its output layer, held on both pipeline
    # stages: its gradient summed over pp once the pipeline drains, under
    # ZeRO 2 and 3 too, and under the interleaved schedule from the copies
    # of each rank's two chunks first.
    ("gpt3-tiny", 4, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=2"),
    ("gpt3-tiny", 4, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=3"),
    ("gpt3-tiny-4l", 2, "dp=1,tp=1,pp=2,v=2,mb=2,schedule=interleaved"),
    # The planner's choice with two stages on four ranks (today tp2 x pp2,
    # interleaved, the stream split over tp between blocks).
    ("gpt3-tiny-4l", 4, "pp=2"),
    ("bert-tiny", 2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"),
    # Several values cross the boundary: T5's encoder output beside the
    # decoder's stream forward, and back their gradients (the relative
    # position bias, computed again on stage 1, returns its share of its
    # parameter's gradient through the bias's gather there); HF LLaMA's
    # rotary tables (cos and sin of a parameter, not linear) send their
    # gradients back beside the stream's.
    ("t5-tiny", 2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"),
    ("t5-tiny", 2, "dp=1,tp=1,pp=2,mb=2,schedule=gpipe"),
    ("hf-llama2-tiny", 2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"),
    ("vit-tiny", 2, "dp=1,tp=1,pp=2,mb=2,schedule=gpipe"),
    ("vit-tiny", 4, "dp=1,tp=2,pp=2,mb=4,schedule=1f1b"),
    ("vit-tiny", 4, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=1"),
    ("vit-tiny", 2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b,recompute=full"),
    ("llama2-tiny", 2, "dp=2,tp=1,pp=1"),
    ("llama2-tiny", 2, "dp=1,tp=2,pp=1"),
    ("llama2-tiny", 4, "dp=2,tp=2,pp=1"),
    ("llama2-tiny", 2, "dp=1,tp=2,pp=1,recompute=full"),
    ("llama2-tiny", 2, "dp=1,tp=2,pp=1,recompute=selective"),
    ("llama2-tiny", 2, "dp=1,tp=2,pp=1,stream=sequence"),
    # Conv1D's flattened rows, strided under sequence parallelism.
    ("hf-gpt2-tiny", 4, "dp=2,tp=2,pp=1,stream=sequence"),
    ("bert-tiny", 2, "dp=1,tp=2,pp=1"),
    ("bert-tiny", 4, "dp=2,tp=2,pp=1"),
    ("t5-tiny", 2, "dp=1,tp=2,pp=1"),
    ("hf-llama2-tiny", 2, "dp=1,tp=2,pp=1"),
    ("moe-tiny", 2, "dp=1,tp=2,pp=1"),
    ("moe-tiny", 2, "dp=2,ep=2,tp=1,pp=1"),
    ("wresnet-tiny", 2, "dp=2,tp=1,pp=1"),
]


# The zero-bubble schedules (B and W of each backward apart; ZB-V and
# DualPipe-V with two chunks per rank in a V, the hop between the middle
# stages on one rank), on 2 and 4 ranks. DualPipe-V needs 2 pp
# micro-batches a step.
ZERO_BUBBLE = [
    ("gpt3-tiny-4l", 2, "dp=1,tp=1,pp=2,mb=2,schedule=zb-h1"),
    ("gpt3-tiny-4l", 2, "dp=1,tp=1,pp=2,v=2,mb=2,schedule=zb-v"),
    ("gpt3-tiny-4l", 2, "dp=1,tp=1,pp=2,v=2,mb=1,schedule=dualpipe-v"),
    ("gpt3-tiny-4l", 4, "dp=1,tp=1,pp=4,mb=1,schedule=zb-h1"),
    ("gpt3-tiny-4l", 4, "dp=2,tp=1,pp=2,v=2,mb=1,schedule=zb-v,zero=1"),
    ("gpt3-tiny-4l", 4, "dp=1,tp=2,pp=2,v=2,mb=1,schedule=dualpipe-v"),
    ("t5-tiny", 2, "dp=1,tp=1,pp=2,mb=2,schedule=zb-h1"),
    ("t5-tiny", 2, "dp=1,tp=1,pp=2,v=2,mb=2,schedule=zb-v"),
    ("t5-tiny", 4, "dp=2,tp=1,pp=2,v=2,mb=1,schedule=dualpipe-v"),
    # moe-tiny folds its layers in pairs (a dense and an expert layer).
    ("moe-tiny-4l", 2, "dp=1,tp=1,pp=2,mb=2,schedule=zb-h1"),
    ("moe-tiny-8l", 2, "dp=1,tp=1,pp=2,v=2,mb=2,schedule=zb-v"),
    ("moe-tiny-8l", 4, "dp=2,ep=2,tp=1,pp=2,v=2,mb=1,schedule=dualpipe-v"),
    ("gpt3-tiny-4l", 4, "dp=2,tp=1,pp=2,mb=1,schedule=zb-h1,zero=3"),
]
PLANS += ZERO_BUBBLE

# Plans taken straight from the planner (bmc compile --gpus 4, no --fix):
# dp2 x tp2 with ZeRO 1 for most, tp4 for the ViT, dp4 with ep2 for the MoE.
PLANS += [(m, 4, None) for m in ["llama2-tiny", "gpt3-tiny", "bert-tiny", "t5-tiny",
                                 "vit-tiny", "moe-tiny", "wresnet-tiny", "hf-gpt2-tiny"]]

# scripts/test --full: every model under every plan shape it supports
# (pipelines need two layers).
FULL_MODELS = ["llama2-tiny", "hf-llama2-tiny", "gpt3-tiny", "hf-gpt2-tiny",
               "bert-tiny", "t5-tiny", "vit-tiny", "moe-tiny", "wresnet-tiny"]
FULL_SHAPES = [(2, "dp=2,tp=1,pp=1"), (2, "dp=1,tp=2,pp=1"), (4, "dp=2,tp=2,pp=1"),
               (2, "dp=2,tp=1,pp=1,zero=1"), (2, "dp=2,tp=1,pp=1,zero=2"),
               (2, "dp=2,tp=1,pp=1,zero=3"), (2, "dp=1,tp=2,pp=1,recompute=selective"),
               (2, "dp=1,tp=2,pp=1,recompute=full"), (2, "dp=1,tp=2,pp=1,stream=sequence")]
PIPELINED = ["gpt3-tiny", "hf-gpt2-tiny", "bert-tiny", "vit-tiny", "llama2-tiny", "t5-tiny",
             "hf-llama2-tiny"]
PIPE_SHAPES = [(2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"),
               (2, "dp=1,tp=1,pp=2,mb=2,schedule=gpipe"),
               (4, "dp=1,tp=2,pp=2,mb=2,schedule=1f1b"),
               (4, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=1"),
               (4, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=3")]
if os.environ.get("BMC_TEST_FULL"):
    PLANS = sorted(set(PLANS) | {(m, n, f) for m in FULL_MODELS for n, f in FULL_SHAPES}
                   | {(m, n, f) for m in PIPELINED for n, f in PIPE_SHAPES}
                   | {("moe-tiny", 4, "dp=4,ep=2,tp=1,pp=1")}
                   | {("gpt3-tiny-4l", 4, f"dp=2,tp=1,pp=2,v=2,mb=2,schedule=interleaved,zero={z}")
                      for z in (2, 3)}, key=str)


@pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")
@pytest.mark.parametrize("model,gpus,fix", PLANS,
                         ids=[f"{m}-{f or 'planned'}" for m, _, f in PLANS])
def test_partitioned_step_matches_one_rank(tmp_path_factory, model, gpus, fix):
    _, want_losses, want_weights = one_rank(tmp_path_factory, model)
    _, losses, weights = parallel_run(tmp_path_factory, model, gpus, fix)
    assert len(losses) == STEPS
    print(f"{model} {fix}: losses {losses[0]:.4f} -> {losses[-1]:.4f}")
    assert_matches(losses, weights, want_losses, want_weights)


def assert_matches(losses, weights, want_losses, want_weights):
    """Losses and weights within the tolerance above; prints the worst."""
    print(f"  losses: worst relative difference "
          f"{np.max(np.abs(losses - want_losses) / np.abs(want_losses)):.2e}")
    np.testing.assert_allclose(losses, want_losses, rtol=LOSS_RTOL)
    assert weights.keys() == want_weights.keys()
    worst = 0.0
    for name, value in weights.items():
        # A parameter stored in a factored view (a fused QKV [64, 192] as
        # [64, 3, 64], split by heads) holds the model's elements in order.
        value = value.reshape(want_weights[name].shape)
        np.testing.assert_allclose(value, want_weights[name], rtol=WEIGHT_RTOL, atol=WEIGHT_ATOL,
                                   err_msg=name)
        worst = max(worst, float(np.max(np.abs(value - want_weights[name]))))
    print(f"  weights: worst absolute difference {worst:.2e}")


# Checkpoints move between plans: five steps under tp2 x pp2 (four ranks),
# then five more under another plan resumed from that checkpoint, give the
# losses of ten steps straight on the new plan (the first five agree
# across plans within the rounding above).
RESHARD_TARGETS = [(2, "dp=2,tp=1,pp=1"), (2, "dp=1,tp=1,pp=2,mb=2,schedule=gpipe"),
                   (1, None)]


@pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")
@pytest.mark.parametrize("gpus,fix", RESHARD_TARGETS,
                         ids=[f or "one-rank" for _, f in RESHARD_TARGETS])
def test_a_checkpoint_moves_between_plans(tmp_path_factory, tmp_path, gpus, fix):
    model = "gpt3-tiny"
    source = compile_for(tmp_path_factory, model, 4, "dp=1,tp=2,pp=2,mb=2,schedule=1f1b")
    target = compile_for(tmp_path_factory, model, gpus, fix)
    ckpt = str(tmp_path / "ckpt")

    def trainer(folder, ranks, *flags):
        args = [os.path.join(folder, "trainer"), "--lr", LR[model], "--threads", "1",
                "--quiet", *flags]
        if ranks > 1:
            args = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                    "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1", *args]
        run(args)

    trainer(source, 4, "--steps", "10", "--stop-at", "5", "--checkpoint", ckpt)
    resumed_log, straight_log = str(tmp_path / "resumed.jsonl"), str(tmp_path / "straight.jsonl")
    trainer(target, gpus, "--steps", "10", "--resume", "--checkpoint", ckpt,
            "--log", resumed_log)
    trainer(target, gpus, "--steps", "10", "--log", straight_log)
    resumed = [r["loss"] for r in read_log(resumed_log) if r.get("rank", 0) == 0]
    straight = [r["loss"] for r in read_log(straight_log) if r.get("rank", 0) == 0]
    assert len(resumed) == 5
    np.testing.assert_allclose(resumed, straight[5:], rtol=LOSS_RTOL)


# Plans holding a parameter on several pipeline stages (GPT's tied
# embedding) checkpoint it once: 5 steps, then 5 resumed on the same plan,
# give the ten straight steps bit for bit (the same sums in the same
# order); the same checkpoint resumed on one rank gives the one-rank run's
# last five losses and weights within the tolerance above.
TIED = [("gpt3-tiny", 4, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=2"),
        ("gpt3-tiny", 4, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=3"),
        ("gpt3-tiny-4l", 2, "dp=1,tp=1,pp=2,v=2,mb=2,schedule=interleaved")]


@pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")
@pytest.mark.parametrize("model,gpus,fix", TIED, ids=[f"{m}-{f}" for m, _, f in TIED])
def test_a_tied_parameter_resumes(tmp_path_factory, tmp_path, model, gpus, fix):
    folder, straight_losses, straight_weights = parallel_run(tmp_path_factory, model,
                                                             gpus, fix)
    ckpt, lr = str(tmp_path / "ckpt"), LR[model]
    train(folder, gpus, tmp_path, "first", lr, "--stop-at", "5", ckpt=ckpt)
    moved = str(tmp_path / "moved")
    shutil.copytree(ckpt, moved)
    losses, weights = train(folder, gpus, tmp_path, "resumed", lr, "--resume", ckpt=ckpt)
    np.testing.assert_array_equal(losses, straight_losses[5:])
    assert weights.keys() == straight_weights.keys()
    for name, value in weights.items():
        np.testing.assert_array_equal(value, straight_weights[name], err_msg=name)
    one_folder, want_losses, want_weights = one_rank(tmp_path_factory, model)
    losses, weights = train(one_folder, 1, tmp_path, "one", lr, "--resume", ckpt=moved)
    print(f"{model} {fix} resumed on one rank:")
    assert_matches(losses, weights, want_losses[5:], want_weights)


# 1F1B and GPipe run the same forwards and backwards, the backwards in the
# same micro-batch order (so the gradients accumulate in the same order),
# and differ only in what runs between a micro-batch's forward and its
# backward: ten steps give the same losses and weights bit for bit. Stage
# 0 sends values (two per micro-batch for T5: the encoder output and the
# decoder's stream) that live only to the end of its forward; were one the
# backward still read left out of the per-micro-batch stash, the backward
# would read another micro-batch's value, and which one differs between
# the schedules.
SCHEDULED = ["gpt3-tiny", "t5-tiny"]


# ZB-H1 runs 1F1B's stage programs with each backward reordered into B
# and W (the same instructions, so the same values) and W later, after
# other micro-batches: what W reads kept from B (the forward's values, the
# received gradient, a weight gradient B wrote) must be this micro-batch's,
# and the gradients are summed over micro-batches in the same order.
@pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")
@pytest.mark.parametrize("model,schedule", [(m, "gpipe") for m in SCHEDULED]
                         + [(m, "zb-h1") for m in SCHEDULED])
def test_schedules_agree_bit_for_bit(tmp_path_factory, model, schedule):
    runs = [parallel_run(tmp_path_factory, model, 2,
                         f"dp=1,tp=1,pp=2,mb=2,schedule={kind}")
            for kind in (schedule, "1f1b")]
    (_, losses, weights), (_, want_losses, want_weights) = runs
    np.testing.assert_array_equal(losses, want_losses)
    assert weights.keys() == want_weights.keys()
    for name, value in weights.items():
        np.testing.assert_array_equal(value, want_weights[name], err_msg=name)
