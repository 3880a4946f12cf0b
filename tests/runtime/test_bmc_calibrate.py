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


CORES = len(os.sched_getaffinity(0))


def bmc(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([BMC, *args], capture_output=True, text=True,
                          env=env or ENV, timeout=600)


def fake_load(folder, load: float, busy: float | None = None) -> dict:
    """The environment that makes bmc calibrate read `load` as the 1-minute
    load average (a file in /proc/loadavg's format) and, by two samples of
    /proc/stat one second apart, `busy` cores busy just before measuring
    (default: as many as the load average says)."""
    busy = load if busy is None else busy
    path = folder / "loadavg"
    path.write_text(f"{load:.2f} {load:.2f} {load:.2f} 1/300 4242\n")
    # 100 ticks per CPU between the samples, `busy` CPUs' worth of them in
    # user time (fields: user nice system idle iowait irq softirq steal).
    cpus = os.cpu_count()
    user, idle = 100 * min(busy, cpus), 100 * (cpus - min(busy, cpus))
    stat = folder / "stat"
    stat.write_text("cpu  1000 0 0 5000 0 0 0 0 0 0\n"
                    f"cpu  {1000 + user:.0f} 0 0 {5000 + idle:.0f} 0 0 0 0 0 0\n")
    return dict(ENV, BMC_LOADAVG_FILE=str(path), BMC_PROC_STAT_FILE=str(stat))


@pytest.fixture(scope="module", params=[1, 2], ids=["1-rank", "2-ranks"])
def calibrated(request, tmp_path_factory):
    ranks = request.param
    out = tmp_path_factory.mktemp(f"calibrate{ranks}")
    path = out / "cluster.yaml"
    raw = out / "raw.json"
    # An idle machine, whatever the real one runs meanwhile.
    result = bmc("calibrate", "--quick", "-np", str(ranks), "-o", str(path),
                 "--keep-json", str(raw), env=fake_load(out, 0.0))
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


def test_records_spread_load_and_single_rank_rates(calibrated):
    ranks, path, raw, result = calibrated
    text = path.read_text()
    measured = json.loads(raw.read_text())
    # Every point carries its spread (the relative interquartile range).
    assert all(p["spread"] >= 0 for p in measured["gemm"])
    assert all(k["spread"] >= 0 for k in measured["kernels"])
    assert "  spread: {" in text and "largest: " in text and "median: " in text
    assert f"  load_average: {{after: 0, before: 0, busy_cores_before: 0, cores: {CORES}}}" \
        in text
    # With several ranks, the compute rates of one rank alone beside them.
    assert ("  single_rank: {" in text) == (ranks > 1)
    assert ("calibrate: one rank alone: GEMM peak" in result.stderr) == (ranks > 1)
    # An idle machine: no busy warning (an unsteady one may still show on a
    # loaded test machine; it names its own cause).
    assert "was busy" not in result.stderr


def test_a_busy_machine_is_one_warning_line(tmp_path):
    load = CORES + 1.5  # exact in binary and in one decimal
    path = tmp_path / "cluster.yaml"
    result = bmc("calibrate", "--quick", "-o", str(path),
                 env=fake_load(tmp_path, load))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines()
                if "was busy" in line]
    busy = min(load, os.cpu_count())
    assert warnings == [
        f"bmc calibrate: warning: the machine was busy ({busy:.1f} of {CORES} "
        f"cores busy before measuring); predictions from this file may be "
        f"off"], result.stderr
    assert f"load_average: {{after: {load:g}, before: {load:g}, " \
           f"busy_cores_before: {busy:g}, cores: {CORES}}}" in path.read_text()
    assert str(path) in result.stderr.splitlines()[-1]


def test_a_lingering_load_average_is_not_busy(tmp_path):
    # Work that just finished keeps the 1-minute average up for minutes;
    # the machine is idle now (no CPU busy in the second before): no
    # warning. (The load average after measuring is faked idle too.)
    result = bmc("calibrate", "--quick", "-o", str(tmp_path / "cluster.yaml"),
                 env=fake_load(tmp_path, CORES + 1.5, busy=0.0))
    assert result.returncode == 0, result.stderr
    # The fake serves one load average for before and after: "after" then
    # still reads busy beyond what the ranks add, and says so itself.
    load = CORES + 1.5
    busy_lines = [line for line in result.stderr.splitlines() if "was busy" in line]
    assert busy_lines == [
        f"bmc calibrate: warning: the machine was busy (load average {load:.1f} "
        f"on {CORES} cores after measuring); predictions from this file may be "
        f"off"], result.stderr


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
