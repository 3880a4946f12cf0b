"""`bmc calibrate`: measures this machine with the runtime's own kernels and
communicator and writes a cluster file that `bmc plan --cluster` reads.

Runs the quick grid (a few seconds) on one rank and on two MPI ranks; the
tests assert the file's contents and that the planner uses it, never the
measured numbers themselves (they depend on the machine and its load).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BMC = os.path.join(ROOT, "build", "bin", "bmc")
MODEL = os.path.join(ROOT, "models", "onnx", "gpt3-tiny.onnx")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")


def bmc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([BMC, *args], capture_output=True, text=True, env=ENV,
                          timeout=600)


@pytest.fixture(scope="module", params=[1, 2], ids=["1-rank", "2-ranks"])
def calibrated(request, tmp_path_factory):
    ranks = request.param
    out = tmp_path_factory.mktemp(f"calibrate{ranks}")
    path = out / "cluster.yaml"
    raw = out / "raw.json"
    result = bmc("calibrate", "--quick", "-np", str(ranks), "-o", str(path),
                 "--keep-json", str(raw))
    assert result.returncode == 0, result.stderr
    return ranks, path, raw, result


def test_writes_a_cluster_file_with_the_measured_curves(calibrated):
    ranks, path, raw, result = calibrated
    text = path.read_text()
    for key in ("precision: fp32", "calibration:", "gemm_tflops:",
                "memory_kernel_gbps:", "grad_reduce_overlap:"):
        assert key in text, key
    assert ("collectives:" in text) == (ranks > 1)
    # Progress shows while it measures; the last line names the file.
    assert "calibrate:" in result.stderr
    assert str(path) in result.stderr.splitlines()[-1]
    measured = json.loads(raw.read_text())
    assert measured["format"] == "bmrt-calibration-1"
    assert measured["ranks"] == ranks


def test_bmc_plan_reads_the_file(calibrated, tmp_path):
    ranks, path, _, _ = calibrated
    plan_file = tmp_path / "plan.json"
    result = bmc("plan", MODEL, "--gpus", str(ranks), "--cluster", str(path),
                 "-o", str(plan_file))
    assert result.returncode == 0, result.stderr
    plan = json.loads(plan_file.read_text())
    assert plan["precision"] == "fp32"
    # The same file gives the same plan, byte for byte.
    again = tmp_path / "again.json"
    assert bmc("plan", MODEL, "--gpus", str(ranks), "--cluster", str(path),
               "-o", str(again)).returncode == 0
    assert again.read_bytes() == plan_file.read_bytes()


@pytest.mark.parametrize("args, message", [
    ([], "bmc calibrate needs an output file"),
    (["-o", "x.yaml", "-np", "0"], "-np must be a count from 1 to 4096, got '0'"),
    (["-o", "x.yaml", "--threads", "many"],
     "--threads must be a count from 1 to 4096, got 'many'"),
    (["-o", "/nonexistent-folder/x.yaml"], "cannot write '/nonexistent-folder/x.yaml'"),
    (["-o", "x.yaml", "--frobnicate"], "--frobnicate"),
    (["-o", "x.yaml", "extra"], "takes no positional arguments"),
])
def test_bad_arguments_are_one_line(tmp_path, args, message):
    result = subprocess.run([BMC, "calibrate", *args], capture_output=True,
                            text=True, env=ENV, cwd=tmp_path, timeout=60)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bmc: error: "), result.stderr
    assert message in lines[0]
    assert not (tmp_path / "x.yaml").exists()


def test_a_missing_launcher_is_one_line(tmp_path):
    result = bmc("calibrate", "--quick", "-np", "2", "--mpirun", "no-such-mpirun",
                 "-o", str(tmp_path / "x.yaml"))
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "bmc: error: -np 2 needs 'no-such-mpirun', which is not on PATH "
        "(install OpenMPI or give --mpirun)"]
    assert not (tmp_path / "x.yaml").exists()
