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

from conftest import ROOT, read_log, run
from mesh_programs import read_checkpoint

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")


def train(out: str, ranks: int, tmp_path, name: str, *flags: str):
    log, ckpt = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.ckpt"
    run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
         "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1",
         os.path.join(out, "trainer"), "--threads", "1", "--quiet", "--steps", "4",
         "--log", str(log), "--checkpoint", str(ckpt), *flags])
    records = []
    for rank in range(ranks):
        suffix = f".rank{rank}.jsonl" if rank else ".jsonl"
        records += read_log(str(log).replace(".jsonl", suffix))
    # Every rank's shard of the parameters and the optimizer state, as bytes.
    shards = {}
    for folder, _, files in os.walk(ckpt):
        for name in files:
            if name.endswith(".safetensors"):
                with open(os.path.join(folder, name), "rb") as f:
                    shards[name] = f.read()
    return records, read_checkpoint(str(ckpt)), shards


def assert_same_training(a, b):
    (log_a, weights_a, shards_a), (log_b, weights_b, shards_b) = a, b
    assert [r["loss"] for r in log_a] == [r["loss"] for r in log_b]
    assert [r["grad_norm"] for r in log_a] == [r["grad_norm"] for r in log_b]
    assert weights_a and weights_a.keys() == weights_b.keys()
    for k in weights_a:
        assert np.array_equal(weights_a[k], weights_b[k]), k
    assert shards_a and shards_a.keys() == shards_b.keys()
    for name in shards_a:
        assert shards_a[name] == shards_b[name], f"{name} differs"


GPT = ("gpt3-tiny", "--global-batch", "8", "--gpus", "2")
# Pipelines overlap each chunk's last backward (vit-tiny: no parameter
# shared between stages, whose sum over pp stays blocking).
VIT = ("vit-tiny", "--global-batch", "8", "--gpus", "4", "--init", "random",
       "--cluster", os.path.join(ROOT, "tests", "data", "clusters", "slow-compute.yaml"))
PLANS = [(GPT, "dp=2,tp=1,pp=1"), (GPT, "dp=2,tp=1,pp=1,mb=2"),
         (GPT, "dp=2,tp=1,pp=1,zero=2"), (GPT, "dp=2,tp=1,pp=1,zero=2,mb=2"),
         (GPT, "dp=2,tp=1,pp=1,zero=3"),
         (VIT, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=1"),
         (VIT, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=2")]


@pytest.mark.parametrize("model,fix", PLANS, ids=[f"{m[0]}-{f}" for m, f in PLANS])
def test_overlap_is_bit_identical_to_the_blocking_path(compiled, tmp_path, model, fix):
    out = compiled(*model, "--fix", fix)
    ranks = int(model[model.index("--gpus") + 1])
    overlapped = train(out, ranks, tmp_path, "overlap")
    # Small buckets: many collectives in flight at once.
    small = train(out, ranks, tmp_path, "small", "--bucket-mb", "0.01")
    blocking = train(out, ranks, tmp_path, "blocking", "--no-overlap")
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
