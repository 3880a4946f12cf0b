"""Data parallelism over MPI: `bmc compile --gpus 2` and `mpirun -np 2
OUT/trainer` compute what one device computes on the whole batch."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from conftest import ENV, read_log, run, tool
from mesh_programs import read_checkpoint

MPIRUN = shutil.which("mpirun")


def mpirun(ranks: int, out: str, *flags: str, check: bool = True):
    # Each rank one thread: two ranks share this machine's two cores.
    return run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1",
                os.path.join(out, "trainer"), "--threads", "1", *flags], check=check)


# Pure data parallelism (the planner may otherwise pick tp=2 for a model
# this small).
DP = "dp=2,tp=1,pp=1"


def test_two_ranks_compute_what_one_device_computes(compiled, tmp_path):
    # Each rank takes half of every batch of 8 sequences and the gradients
    # are all-reduced: the same step as one device on all 8, up to fp32
    # summation order (two half-batch sums added instead of one sum):
    # 1e-5 relative over 5 AdamW steps (measured 1e-7).
    one = compiled("gpt3-tiny", "--global-batch", "8")
    two = compiled("gpt3-tiny", "--global-batch", "8", "--gpus", "2", "--fix", DP)
    run([os.path.join(one, "trainer"), "--threads", "1", "--steps", "5",
         "--log", str(tmp_path / "one.jsonl")])
    result = mpirun(2, two, "--steps", "5", "--log", str(tmp_path / "two.jsonl"))
    assert result.stdout.count("step 5/5") == 1  # rank 0 prints, not every rank
    single = [r["loss"] for r in read_log(str(tmp_path / "one.jsonl"))]
    for log in ("two.jsonl", "two.rank1.jsonl"):
        losses = [r["loss"] for r in read_log(str(tmp_path / log))]
        np.testing.assert_allclose(losses, single, rtol=1e-5)


def test_data_parallel_resume_is_bit_for_bit(compiled, tmp_path):
    out = compiled("gpt3-tiny", "--global-batch", "8", "--gpus", "2", "--fix", DP)
    straight, split = tmp_path / "straight", tmp_path / "split"
    mpirun(2, out, "--steps", "6", "--checkpoint", str(straight),
           "--log", str(tmp_path / "a.jsonl"))
    mpirun(2, out, "--steps", "6", "--stop-at", "3", "--checkpoint", str(split),
           "--log", str(tmp_path / "b.jsonl"))
    mpirun(2, out, "--steps", "6", "--resume", "--checkpoint", str(split),
           "--log", str(tmp_path / "b.jsonl"))
    a = [r["loss"] for r in read_log(str(tmp_path / "a.jsonl"))]
    b = [r["loss"] for r in read_log(str(tmp_path / "b.jsonl"))]
    assert a == b
    x, y = read_checkpoint(str(straight)), read_checkpoint(str(split))
    assert x and all(np.array_equal(x[k], y[k]) for k in x)


def test_wrong_rank_count_is_one_line(compiled):
    out = compiled("gpt3-tiny", "--global-batch", "8", "--gpus", "2", "--fix", DP)
    result = run([os.path.join(out, "trainer"), "--steps", "1"], check=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "trainer: error: the step program's mesh tp=1,ep=1,dp=2,pp=1 has 2 ranks; the "
        "trainer was started on 1"]


def test_a_failing_rank_ends_the_job(compiled, tmp_path):
    # Every token of this file is outside the vocabulary: the ranks stop at
    # their first batch, and the job ends instead of hanging in a collective.
    out = compiled("gpt3-tiny", "--global-batch", "8", "--gpus", "2", "--fix", DP)
    bad = tmp_path / "bad.bin"
    np.full(1000, 600, dtype=np.uint16).tofile(bad)
    result = mpirun(2, out, "--steps", "3", "--data", str(bad), check=False)
    assert result.returncode != 0
    assert "trainer: error: rank" in result.stderr
    assert "600" in result.stderr


def test_parallelism_the_partitioner_needs_is_refused(tmp_path):
    model = os.path.join(os.path.dirname(tool("bmc")), "..", "..", "models", "onnx",
                         "gpt3-tiny.onnx")
    result = run([tool("bmc"), "compile", model, "-o", str(tmp_path / "o"), "--gpus", "2",
                  "--fix", "pp=2,v=2,schedule=interleaved"], check=False)
    assert result.returncode != 0
    assert "interleaved" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def _plan(tmp_path, model="llama2-tiny"):
    root = os.path.join(os.path.dirname(tool("bmc")), "..", "..")
    plan = tmp_path / "plan.json"
    run([tool("bmc"), "plan", os.path.join(root, "models", "onnx", f"{model}.onnx"),
         "--gpus", "4", "--global-batch", "8", "--fix", "dp=2,tp=2,pp=1",
         "--cluster", os.path.join(root, "tests", "data", "clusters", "slow-compute.yaml"),
         "-o", str(plan)])
    return root, plan


@pytest.mark.parametrize("name", ["llama2-tiny", "vit-tiny"])
def test_compile_takes_a_plan_file(tmp_path, name):
    # The plan file gives what --gpus, --cluster and --fix would: the same
    # step program (also for a model without token inputs, whose plan
    # records one token per sample and binds no sequence).
    root, plan = _plan(tmp_path, name)
    model = os.path.join(root, "models", "onnx", f"{name}.onnx")
    run([tool("bmc"), "compile", model, "--plan", str(plan), "--init", "random",
         "-o", str(tmp_path / "a")])
    run([tool("bmc"), "compile", model, "--gpus", "4", "--global-batch", "8",
         "--fix", "dp=2,tp=2,pp=1", "--init", "random", "-o", str(tmp_path / "b"),
         "--cluster", os.path.join(root, "tests", "data", "clusters", "slow-compute.yaml")])
    a, b = ((tmp_path / d / "step.bmp").read_text() for d in "ab")
    assert a == b and "mesh tp=2 ep=1 dp=2 pp=1" in a


@pytest.mark.parametrize("case", ["other-model", "other-gpus", "with-fix", "missing",
                                  "not-json"])
def test_a_bad_plan_file_is_one_line(tmp_path, case):
    root, plan = _plan(tmp_path)
    model = os.path.join(root, "models", "onnx",
                         "bert-tiny.onnx" if case == "other-model" else "llama2-tiny.onnx")
    extra = {"other-gpus": ["--gpus", "2"], "with-fix": ["--fix", "tp=1"]}.get(case, [])
    if case == "missing":
        plan = tmp_path / "nope.json"
    if case == "not-json":
        plan.write_text('{"schema')
    result = run([tool("bmc"), "compile", model, "--plan", str(plan), "--init", "random",
                  "-o", str(tmp_path / "o"), *extra], check=False)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bmc: error: ")
    expected = {"other-model": "made for another model",
                "other-gpus": "is for 4 GPUs but --gpus says 2",
                "with-fix": "--plan gives the configuration; --fix goes with planning",
                "missing": "cannot read plan", "not-json": "malformed JSON"}[case]
    assert expected in lines[0]

