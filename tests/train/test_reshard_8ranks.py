"""A checkpoint saved on eight ranks moves between plans (issue 13): five
SGD steps under dp2 x tp2 x pp2 (1F1B, ZeRO 1), saved, then resumed under
dp2 x tp4 (ZeRO 3), dp2 x pp4 (1F1B, no ZeRO) and on one rank, continue
with the losses, weights and momentum of ten steps straight on the new
plan.

The model is gpt3-tiny with four layers instead of two (models/zoo.py's
gpt3-tiny row with layers=4, built here): gpt3-tiny itself cannot take
pp4 (`--fix pp=4 exceeds the model's 2 layers`). Its 4 heads and hidden
64 split over tp4 (one head of 16 per rank), its vocabulary of 512 too.
The moves cover every way a shard changes: tp boxes halved and merged
(tp2 -> tp4, tp2 -> 1), stages regrouped (pp2 -> pp4, layers 0-1 | 2-3
-> one per stage, the tied embedding on the first and the last stage),
ZeRO's flat ranges of the momentum re-cut (ZeRO 1 -> 3, and the weights
flat under ZeRO 3) or joined into boxes (-> ZeRO 0, -> one rank).

Tolerance, fp32, as in test_partitioned.py: losses within 1e-5 relative;
weights within 1e-5 relative plus 1e-5 absolute; momentum within 1e-5
relative plus 1e-5 of its tensor's largest element (its elements are
1e-3 to 7e-2 here, so a fixed 1e-5 would be loose). The resumed run's
first five steps ran on another plan than the straight run's: the same
sums in other groupings (tp partial sums, dp halves, micro-batches),
each a rounding of about 1e-7 relative, which the checkpoint carries
over and five more SGD steps keep a rounding (SGD's update is
proportional to the gradient). The momentum holds the gradients
themselves; an element whose gradient cancels over the batch carries an
error of the size of its terms, not of itself, hence the part scaled by
the tensor's largest element. Measured worst (each test prints its own
with -s): continued losses 7.6e-8 relative (bit for bit under tp4 and on
one rank), the two plans' first five losses 7.6e-8 relative, weights
1.2e-7 absolute, momentum 7.8e-7 of its tensor's largest element.

Each 8-rank run is a few seconds on two shared cores (oversubscribed,
one thread per rank); the source is compiled and trained once and its
checkpoint copied for each target.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys

import numpy as np
import pytest

from conftest import ROOT, latest, read_log, read_safetensors, run, tool
from mesh_programs import read_checkpoint
from test_partitioned import CLUSTER, LOSS_RTOL, MPIRUN, WEIGHT_ATOL, WEIGHT_RTOL

MODEL = "gpt3-tiny-4l"
LR = "0.3"  # test_partitioned.py's SGD rate for gpt3-tiny
STEPS, STOP = 10, 5
SOURCE = (8, "dp=2,tp=2,pp=2,mb=2,schedule=1f1b,zero=1")
TARGETS = [(8, "dp=2,tp=4,pp=1,zero=3"),
           (8, "dp=2,tp=1,pp=4,mb=2,schedule=1f1b,zero=0"),
           (1, None)]
MOMENTUM_SCALE_ATOL = 1e-5

pytestmark = pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    sys.path.insert(0, os.path.join(ROOT, "models"))
    import zoo
    path = str(tmp_path_factory.mktemp("model") / f"{MODEL}.onnx")
    zoo.save(zoo.build(dataclasses.replace(zoo.BY_NAME["gpt3-tiny"], name=MODEL,
                                           layers=4)), path)
    return path


_compiled: dict = {}


def compiled(tmp_path_factory, model_file, gpus, fix):
    """The trainer folder of one plan, compiled once per session."""
    if (gpus, fix) not in _compiled:
        out = str(tmp_path_factory.mktemp(f"{MODEL}-{gpus}"))
        args = [tool("bmc"), "compile", model_file, "-o", out, "--init", "random",
                "--seed", "3", "--optimizer", "sgd", "--gpus", str(gpus),
                "--cluster", CLUSTER]
        run(args + (["--fix", fix] if fix else []))
        _compiled[(gpus, fix)] = out
    return _compiled[(gpus, fix)]


def trainer(folder, ranks, log, *flags):
    """Rank 0's losses by step of a run of `folder`'s trainer."""
    args = [os.path.join(folder, "trainer"), "--steps", str(STEPS), "--lr", LR,
            "--threads", "1", "--quiet", "--log", log, *flags]
    if ranks > 1:
        args = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1", *args]
    run(args)
    return {r["step"]: r["loss"] for r in read_log(log) if r.get("rank", 0) == 0}


@pytest.fixture(scope="module")
def saved(tmp_path_factory, model_file):
    """The source plan's five steps (of ten, as if interrupted): its
    folder, its losses and its checkpoint, written once for every target."""
    folder = compiled(tmp_path_factory, model_file, *SOURCE)
    tmp = tmp_path_factory.mktemp("source")
    ckpt = str(tmp / "ckpt")
    losses = trainer(folder, SOURCE[0], str(tmp / "source.jsonl"),
                     "--stop-at", str(STOP), "--checkpoint", ckpt)
    assert sorted(losses) == list(range(1, STOP + 1))
    with open(os.path.join(latest(ckpt), "manifest.json")) as f:
        assert json.load(f)["mesh"] == {"dp": 2, "ep": 1, "pp": 2, "tp": 2}
    return folder, losses, ckpt


def as_model(tensors: dict, model: dict, prefix: str = "") -> dict:
    """`tensors` in the model's shapes: a plan may keep a parameter in a
    factored view with the same element order (a fused QKV weight [64, 192]
    as [64, 3, 64] under tp), and its checkpoint records that view."""
    return {k: v.reshape(model[k[len(prefix):]].shape) for k, v in tensors.items()}


def worst(a: dict, b: dict) -> tuple[float, str]:
    """The largest absolute difference over tensors, and where."""
    return max((float(np.max(np.abs(a[k] - b[k]))), k) for k in a)


@pytest.mark.parametrize("gpus,fix", TARGETS, ids=[f or "one-rank" for _, f in TARGETS])
def test_an_8_rank_checkpoint_resumes_on_another_plan(tmp_path_factory, tmp_path,
                                                       model_file, saved, gpus, fix):
    source, source_losses, source_ckpt = saved
    target = compiled(tmp_path_factory, model_file, gpus, fix)
    ckpt, straight_ckpt = str(tmp_path / "ckpt"), str(tmp_path / "straight")
    shutil.copytree(source_ckpt, ckpt)
    resumed = trainer(target, gpus, str(tmp_path / "resumed.jsonl"),
                      "--resume", "--checkpoint", ckpt)
    straight = trainer(target, gpus, str(tmp_path / "straight.jsonl"),
                       "--checkpoint", straight_ckpt)

    assert sorted(resumed) == list(range(STOP + 1, STEPS + 1))
    assert sorted(straight) == list(range(1, STEPS + 1))
    before = np.array([source_losses[s] for s in range(1, STOP + 1)])
    after = np.array([resumed[s] for s in range(STOP + 1, STEPS + 1)])
    want_before = np.array([straight[s] for s in range(1, STOP + 1)])
    want_after = np.array([straight[s] for s in range(STOP + 1, STEPS + 1)])
    # The premise: the two plans' first five steps agree.
    np.testing.assert_allclose(before, want_before, rtol=LOSS_RTOL)
    np.testing.assert_allclose(after, want_after, rtol=LOSS_RTOL)

    start = read_safetensors(os.path.join(source, "params.safetensors"))
    at_stop = as_model(read_checkpoint(source_ckpt), start)
    weights = as_model(read_checkpoint(ckpt), start)
    want_weights = as_model(read_checkpoint(straight_ckpt), start)
    assert weights.keys() == want_weights.keys() == at_stop.keys() == start.keys()
    # Not vacuous: each half of the run moves the weights far beyond the
    # tolerance, so a resume that loaded the wrong step (or nothing) fails.
    assert worst(at_stop, start)[0] > 1e-3 and worst(weights, at_stop)[0] > 1e-3
    for name, value in weights.items():
        np.testing.assert_allclose(value, want_weights[name], rtol=WEIGHT_RTOL,
                                   atol=WEIGHT_ATOL, err_msg=name)
    momentum = as_model(read_checkpoint(ckpt, "optimizer_state"), start, "momentum_buffer.")
    want_momentum = as_model(read_checkpoint(straight_ckpt, "optimizer_state"), start,
                             "momentum_buffer.")
    assert momentum.keys() == want_momentum.keys() and len(momentum) == len(weights)
    momentum_worst = 0.0
    for name, value in momentum.items():
        want = want_momentum[name]
        scale = float(np.max(np.abs(want)))
        assert scale > 0, name
        np.testing.assert_allclose(value, want, rtol=WEIGHT_RTOL,
                                   atol=MOMENTUM_SCALE_ATOL * scale, err_msg=name)
        momentum_worst = max(momentum_worst, float(np.max(np.abs(value - want))) / scale)

    print(f"\n{fix or 'one rank'}: losses {after[0]:.4f} -> {after[-1]:.4f}, worst "
          f"relative difference {np.max(np.abs(after - want_after) / want_after):.2e} "
          f"(first five against the source plan "
          f"{np.max(np.abs(before - want_before) / want_before):.2e}); weights worst "
          f"absolute {worst(weights, want_weights)[0]:.2e} "
          f"({worst(weights, want_weights)[1]}); momentum worst "
          f"{momentum_worst:.2e} of its tensor's largest element")
