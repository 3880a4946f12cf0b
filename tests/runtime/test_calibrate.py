"""bmrt-calibrate (runtime/calibrate): what it writes, alone and under mpirun.

The JSON is the format "bmrt-calibration-1" that `bmc calibrate` reads
(issue 15). Numbers are measured on whatever machine runs the tests, so
they are checked for being measurements (positive, finite, consistent with
one another by their definitions), never for their values.

Needs only pytest and an MPI launcher: .venv/bin/python -m pytest tests/runtime
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CALIBRATE = os.path.join(ROOT, "build", "bin", "bmrt-calibrate")
MPIRUN = shutil.which("mpirun")
# One thread per rank: the tests run beside others on two cores.
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

KERNEL_CLASSES = ["data_movement", "elementwise", "normalization", "optimizer",
                  "reduction", "softmax"]
# nccl-tests' bus-bandwidth factors for n ranks (doc/PERFORMANCE.md).
BUS_FACTOR = {
    "all_gather": lambda n: (n - 1) / n,
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}
# Derived numbers are computed in double from the stored ones: equal up to
# a few roundings of a double (2^-52 each).
REL = 1e-12


def calibrate(*args: str, ranks: int = 1, check: bool = True) -> subprocess.CompletedProcess:
    assert os.path.exists(CALIBRATE), f"{CALIBRATE} is missing: build the project first"
    command = [CALIBRATE, *args]
    if ranks > 1:
        command = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                   "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1", *command]
    result = subprocess.run(command, capture_output=True, text=True, env=ENV, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("calibrate") / "one.json"
    result = calibrate("--quick", "-o", str(out))
    with open(out) as f:
        return json.load(f), result.stderr


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("calibrate") / "two.json"
    result = calibrate("--quick", "-o", str(out), ranks=2)
    with open(out) as f:
        return json.load(f), result.stderr


def positive(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def check_common(data: dict, ranks: int):
    assert data["format"] == "bmrt-calibration-1"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["date"])
    machine = data["machine"]
    assert machine["host"] and machine["cpu"]
    assert positive(machine["cores"]) and positive(machine["memory_bytes"])
    assert machine["hosts"] == 1  # mpirun here starts every rank on this host
    assert set(data["versions"]) == {"openblas", "mpi", "compiler", "bmrt"}
    assert all(isinstance(v, str) and v for v in data["versions"].values())
    assert data["ranks"] == ranks and data["threads_per_rank"] == 1


def steady_or_not(spread) -> bool:
    """A spread (the relative interquartile range of a point's samples) is
    a number >= 0; how large depends on the machine's load, not tested."""
    return isinstance(spread, (int, float)) and spread >= 0


def check_gemm(points: list[dict]):
    sizes = sorted({p["m"] for p in points})
    assert len(sizes) >= 2
    grid = sorted((p["m"], p["n"], p["k"]) for p in points)
    assert grid == sorted(itertools.product(sizes, repeat=3))  # full, no repeats
    for p in points:
        assert positive(p["seconds"]) and positive(p["flops_per_second"])
        flops = 2 * p["m"] * p["n"] * p["k"]
        assert p["flops_per_second"] == pytest.approx(flops / p["seconds"], rel=REL)
        assert steady_or_not(p["spread"])


def check_kernels(kernels: list[dict]):
    assert [k["class"] for k in kernels] == KERNEL_CLASSES
    for k in kernels:
        assert k["kernel"]
        assert positive(k["bytes"]) and positive(k["seconds"])
        assert k["bytes_per_second"] == pytest.approx(k["bytes"] / k["seconds"], rel=REL)
        assert steady_or_not(k["spread"])


def check_collectives(entries: list[dict], ranks: int, max_bytes: int):
    assert sorted({e["kind"] for e in entries}) == sorted(BUS_FACTOR)
    for kind, factor in BUS_FACTOR.items():
        mine = [e for e in entries if e["kind"] == kind]
        sizes = [e["bytes"] for e in mine]
        assert sizes == sorted(set(sizes)) and sizes[-1] <= max_bytes
        for e in mine:
            assert e["ranks"] == ranks
            assert positive(e["seconds"]) and steady_or_not(e["spread"])
            assert e["algbw_bytes_per_second"] == pytest.approx(e["bytes"] / e["seconds"], rel=REL)
            assert e["busbw_bytes_per_second"] == pytest.approx(
                e["algbw_bytes_per_second"] * factor(ranks), rel=REL)
    # Sizes are powers of 4 bytes, rounded down to whole fp32 elements per
    # rank: the all-reduce and point-to-point ones exactly.
    for kind in ("all_reduce", "send_recv"):
        assert [e["bytes"] for e in entries if e["kind"] == kind] == [
            4 ** i for i in range(1, 9)]


def check_host(data: dict, stderr: str):
    # What offloading the optimizer costs: the host link (on the CPU backend
    # a copy within host memory) and AdamW's step on a CPU-backend device;
    # the CPU's device memory is host memory, so no host memory apart.
    assert positive(data["host_link_gbps"]) and positive(data["host_optimizer_gbps"])
    assert data["host_memory_gib"] == 0
    assert re.search(r"^calibrate: host link [\d.]+ GB/s, optimizer step on the host "
                     r"[\d.]+ GB/s$", stderr, re.M)


def test_one_rank_measures_compute_and_memory(one_rank):
    data, stderr = one_rank
    check_common(data, ranks=1)
    check_gemm(data["gemm"])
    assert positive(data["memory"]["stream_copy_bytes_per_second"])
    check_kernels(data["kernels"])
    check_host(data, stderr)
    # Nothing to communicate with.
    assert "collectives" not in data and "overlap" not in data
    assert re.search(r"^calibrate: gemm 1/\d+ \(m=\d+ n=\d+ k=\d+: [\d.]+ GFLOP/s\)$",
                     stderr, re.M)


def test_two_ranks_measure_collectives_and_overlap(two_ranks):
    data, stderr = two_ranks
    check_common(data, ranks=2)
    check_gemm(data["gemm"])
    check_kernels(data["kernels"])
    check_collectives(data["collectives"], ranks=2, max_bytes=64 * 1024)
    check_host(data, stderr)
    assert 0 <= data["overlap"]["grad_reduce"] <= 1
    # Progress comes from rank 0 alone.
    assert stderr.count("calibrate: gemm 1/") == 1
    assert "calibrate: all_reduce 2 ranks 1 KiB: busbw" in stderr


def test_json_goes_to_stdout_without_o():
    result = calibrate("--quick")
    check_common(json.loads(result.stdout), ranks=1)


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unknown option '--bogus'; see 'bmrt-calibrate --help'"),
    (["--threads", "0"], "--threads must be at least 1, got 0"),
    (["--threads", "2000"], "--threads must be at most 1024, got 2000"),
    (["--max-bytes", "lots"], "--max-bytes expects an integer, got 'lots'"),
    (["-o"], "option '-o' needs a value"),
])
def test_bad_flags_are_one_line(args, message):
    result = calibrate(*args, check=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [f"bmrt-calibrate: error: {message}"]


def test_unwritable_output_is_one_line_before_measuring(tmp_path):
    path = tmp_path / "missing" / "cal.json"
    for ranks in (1, 2):
        result = calibrate("--quick", "-o", str(path), ranks=ranks, check=False)
        assert result.returncode != 0
        lines = [line for line in result.stderr.splitlines() if "bmrt-calibrate" in line]
        assert lines == [f"bmrt-calibrate: error: cannot write '{path}': "
                         "No such file or directory"]
        assert "calibrate: gemm" not in result.stderr
