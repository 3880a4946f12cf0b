"""Gradient reduction overlapped with the backward pass (issue 15): the
trainer starts each bucket's all-reduce (ZeRO 2 and 3: reduce-scatter) as
soon as its gradients are final. The sums are the same collectives on the
same data as the blocking path (--no-overlap); over two ranks each element
is a + b either way, which fp32 adds exactly alike, so the runs must agree
bit for bit."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from conftest import ENV, read_log, run  # noqa: F401
from mesh_programs import read_checkpoint

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")


def train(out: str, tmp_path, name: str, *flags: str):
    log, ckpt = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.ckpt"
    run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2",
         "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1",
         os.path.join(out, "trainer"), "--threads", "1", "--quiet", "--steps", "4",
         "--log", str(log), "--checkpoint", str(ckpt), *flags])
    records = read_log(str(log)) + read_log(str(log).replace(".jsonl", ".rank1.jsonl"))
    return records, read_checkpoint(str(ckpt)), read_checkpoint(str(ckpt), "optimizer")


def assert_same_training(a, b):
    (log_a, weights_a, state_a), (log_b, weights_b, state_b) = a, b
    assert [r["loss"] for r in log_a] == [r["loss"] for r in log_b]
    assert [r["grad_norm"] for r in log_a] == [r["grad_norm"] for r in log_b]
    for x, y in ((weights_a, weights_b), (state_a, state_b)):
        assert x and x.keys() == y.keys()
        for k in x:
            assert np.array_equal(x[k], y[k]), k


@pytest.mark.parametrize("fix", ["dp=2,tp=1,pp=1", "dp=2,tp=1,pp=1,mb=2",
                                 "dp=2,tp=1,pp=1,zero=2", "dp=2,tp=1,pp=1,zero=2,mb=2",
                                 "dp=2,tp=1,pp=1,zero=3"])
def test_overlap_is_bit_identical_to_the_blocking_path(compiled, tmp_path, fix):
    out = compiled("gpt3-tiny", "--global-batch", "8", "--gpus", "2", "--fix", fix)
    overlapped = train(out, tmp_path, "overlap")
    # Small buckets: many collectives in flight at once.
    small = train(out, tmp_path, "small", "--bucket-mb", "0.01")
    blocking = train(out, tmp_path, "blocking", "--no-overlap")
    assert_same_training(overlapped, blocking)
    assert_same_training(small, blocking)
    # The log says which ran: a window of overlap only when it did.
    assert all(r["overlap_window_s"] > 0 for r in overlapped[0])
    assert all(r["overlap_window_s"] == 0 for r in blocking[0])
    assert all(r["communication_time_s"].get("dp", 0) > 0 for r in overlapped[0])


@pytest.mark.parametrize("value", ["0", "-1", "big"])
def test_a_bad_bucket_size_is_one_line(compiled, value):
    out = compiled("gpt3-tiny", "--global-batch", "8", "--gpus", "2", "--fix",
                   "dp=2,tp=1,pp=1")
    result = run([os.path.join(out, "trainer"), "--steps", "1", "--bucket-mb", value],
                 check=False)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainer: error: --bucket-mb "), lines
