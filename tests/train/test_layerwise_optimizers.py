"""LAMB and LARS (issue 29) in the trainer: their norms are of whole
tensors, so a tensor split over tp ranks or ZeRO's dp shards must give the
step one device gives. `bmc compile --optimizer lamb|lars` on 2 ranks
against 1, and the plan's accounting of their state.

The one-step formulas themselves are checked against numpy in
tests/runtime/test_optimizer.py."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from conftest import read_log, run

MPIRUN = shutil.which("mpirun")

MESHES = {
    "tp2": "dp=1,tp=2,pp=1",           # weights split over tp
    "zero1": "dp=2,tp=1,pp=1,zero=1",  # optimizer state split over dp
    "zero3": "dp=2,tp=1,pp=1,zero=3",  # parameters split over dp too
}


def mpirun(ranks: int, out: str, *flags: str):
    return run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1",
                os.path.join(out, "trainer"), "--threads", "1", *flags])


def losses(path) -> list[float]:
    return [r["loss"] for r in read_log(str(path))]


def check_ranks_train_as_one(one: str, split: str, ranks: int, steps: int,
                             tmp_path, every_rank: bool = False):
    """Trains compile `one` on one rank and compile `split` on `ranks` ranks
    for `steps` steps: the losses (rank 0's, or with `every_rank` each
    rank's log) agree to 1e-5 relative, as the N-rank tests assert (fp32
    summation orders change with the split)."""
    run([os.path.join(one, "trainer"), "--threads", "1", "--steps", str(steps),
         "--log", str(tmp_path / "one.jsonl")])
    mpirun(ranks, split, "--steps", str(steps), "--log", str(tmp_path / "split.jsonl"))
    single = losses(tmp_path / "one.jsonl")
    for rank in range(ranks if every_rank else 1):
        log = "split.jsonl" if rank == 0 else f"split.rank{rank}.jsonl"
        np.testing.assert_allclose(losses(tmp_path / log), single, rtol=1e-5)


def check_resume_across(one: str, split: str, ranks: int, tmp_path):
    """A run stopped at step 2 of 4 on one layout (one rank, or `ranks`
    ranks of compile `split`) and resumed on the other goes on as a straight
    one-rank run does, both ways: 1e-5 relative, as the N-rank tests (fp32
    summation orders change with the layout)."""
    run([os.path.join(one, "trainer"), "--threads", "1", "--steps", "4",
         "--log", str(tmp_path / "straight.jsonl")])
    straight = losses(tmp_path / "straight.jsonl")
    for name, first, second in (("to_one", split, one), ("to_split", one, split)):
        ckpt = str(tmp_path / name)

        def train(out, *flags):
            command = ["--steps", "4", "--checkpoint", ckpt, *flags]
            if out == split:
                mpirun(ranks, out, *command)
            else:
                run([os.path.join(out, "trainer"), "--threads", "1", *command])
        train(first, "--stop-at", "2")
        train(second, "--resume", "--log", str(tmp_path / f"{name}.jsonl"))
        np.testing.assert_allclose(losses(tmp_path / f"{name}.jsonl"), straight[2:],
                                   rtol=1e-5)


@pytest.mark.parametrize("optimizer", ["lamb", "lars"])
@pytest.mark.parametrize("mesh", sorted(MESHES))
def test_two_ranks_step_as_one(compiled, tmp_path, optimizer, mesh):
    # The same global batch of 8 on one rank and on two. The split changes
    # fp32 summation orders (GEMMs over tp, the gradient's all-reduce, the
    # norms' sums over shards): 1e-5 relative over 5 steps, as the AdamW
    # tests of test_parallel.py (measured ~1e-7). A norm of one shard
    # instead of the whole tensor moves the loss by far more (see below).
    flags = ("--global-batch", "8", "--optimizer", optimizer)
    one = compiled("gpt3-tiny", *flags)
    two = compiled("gpt3-tiny", *flags, "--gpus", "2", "--fix", MESHES[mesh])
    for name, lr in (("one", []), ("frozen", ["--lr", "0"])):
        run([os.path.join(one, "trainer"), "--threads", "1", "--steps", "5", *lr,
             "--log", str(tmp_path / f"{name}.jsonl")])
    mpirun(2, two, "--steps", "5", "--log", str(tmp_path / "two.jsonl"))
    single = losses(tmp_path / "one.jsonl")
    # The default learning rates (LAMB 1e-3; LARS 1, its steps scaled by
    # the trust coefficient) move the loss by 2e-3 to 7e-3 in 5 steps
    # against the same batches with lr 0: far beyond the tolerance.
    frozen = losses(tmp_path / "frozen.jsonl")
    assert np.max(np.abs(np.array(single) - frozen)) > 1e-3, (single, frozen)
    for log in ("two.jsonl", "two.rank1.jsonl"):
        np.testing.assert_allclose(losses(tmp_path / log), single, rtol=1e-5)


def test_lamb_differs_from_adamw(compiled, tmp_path):
    # The trust ratios change the trajectory: LAMB is not AdamW renamed.
    lamb = compiled("gpt3-tiny", "--global-batch", "8", "--optimizer", "lamb")
    adam = compiled("gpt3-tiny", "--global-batch", "8", "--optimizer", "adam")
    for name, out in (("lamb", lamb), ("adam", adam)):
        run([os.path.join(out, "trainer"), "--threads", "1", "--steps", "4", "--lr", "1e-3",
             "--log", str(tmp_path / f"{name}.jsonl")])
    a, b = losses(tmp_path / "lamb.jsonl"), losses(tmp_path / "adam.jsonl")
    assert a[0] == b[0] and abs(a[-1] - b[-1]) > 1e-4


def test_plan_counts_their_state(compiled):
    # LAMB keeps two moments (as Adam), LARS one buffer (as SGD).
    def optimizer_bytes(optimizer: str) -> float:
        out = compiled("gpt3-tiny", "--global-batch", "8", "--optimizer", optimizer)
        with open(os.path.join(out, "plan.json")) as f:
            plan = json.load(f)
        assert plan["optimizer"] == optimizer
        return plan["memory"]["optimizer"]
    assert optimizer_bytes("lamb") == optimizer_bytes("adam")
    assert optimizer_bytes("lars") == optimizer_bytes("sgd")
    # Under bf16 both keep an fp32 master copy too: 12 bytes per parameter
    # against 8.
    assert optimizer_bytes("lamb") == 1.5 * optimizer_bytes("lars")


@pytest.mark.parametrize("optimizer", ["lamb", "lars"])
def test_resume_is_bit_for_bit(compiled, tmp_path, optimizer):
    # Their state (LAMB's two moments, LARS's buffer) is checkpointed, here
    # under ZeRO 1 (flat dp shards): stopping at 3 and resuming gives the
    # straight run's losses exactly.
    out = compiled("gpt3-tiny", "--global-batch", "8", "--optimizer", optimizer,
                   "--gpus", "2", "--fix", MESHES["zero1"])
    straight, split = tmp_path / "straight", tmp_path / "split"
    mpirun(2, out, "--steps", "6", "--checkpoint", str(straight), "--log", str(tmp_path / "a.jsonl"))
    mpirun(2, out, "--steps", "6", "--stop-at", "3", "--checkpoint", str(split),
           "--log", str(tmp_path / "b.jsonl"))
    mpirun(2, out, "--steps", "6", "--resume", "--checkpoint", str(split),
           "--log", str(tmp_path / "b.jsonl"))
    assert losses(tmp_path / "a.jsonl") == losses(tmp_path / "b.jsonl")
