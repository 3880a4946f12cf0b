"""bench/gpu_bench.py without a GPU and without torch: the FLOP count and
parameter table, the result combining (tokens/s, MFU, ratios, goals, the
printed table) on canned numbers, the budget's shares, and bmc's side's
micro-batch search against a fake trainer that runs out of memory above a
size. The measurements themselves run on a GPU machine (scripts/gpu-check)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import gpu_bench  # noqa: E402

SMALL = gpu_bench.MODELS["gpt2-small"]
MEDIUM = gpu_bench.MODELS["gpt2-medium"]


def test_parameter_counts_match_the_zoo():
    # models/README.md: hf-gpt2-124m 124,439,808; gpt3-350m 356,837,376.
    assert gpu_bench.param_count(SMALL) == 124_439_808
    assert gpu_bench.param_count(MEDIUM) == 356_837_376
    assert gpu_bench.param_count(gpu_bench.SMOKE) == 5_289_472


def test_flops_per_token_is_6n_plus_attention():
    n = 124_439_808 - 1024 * 768          # the position table does no matmul
    assert gpu_bench.flops_per_token(SMALL, 1024) == 6 * n + 12 * 12 * 768 * 1024
    # About 0.86 GFLOP per token for GPT-2 small at 1024 (nanoGPT's number).
    assert 0.85e9 < gpu_bench.flops_per_token(SMALL, 1024) < 0.87e9


def test_peak_by_device_name():
    assert gpu_bench.peak_bf16("NVIDIA H100 80GB HBM3, 81559 MiB, 580.159.04") == 989.4e12
    assert gpu_bench.peak_bf16("NVIDIA H100 PCIe") == 756.0e12
    assert gpu_bench.peak_bf16("NVIDIA H200, 143771 MiB") == 989.4e12
    assert gpu_bench.peak_bf16("Tesla T4") is None


def test_summarise_steps_leaves_out_the_warmup():
    s = gpu_bench.summarise_steps([9.0, 5.0, 1.0, 2.0, 3.0], warmup=2)
    assert s == {"median_s": 2.0, "best_s": 1.0, "timed_steps": 3}
    assert gpu_bench.summarise_steps([9.0, 5.0], warmup=2) is None


def side(mb, median, peak, precision="bf16 autocast"):
    return {"micro_batch": mb, "median_s": median, "best_s": median, "timed_steps": 5,
            "peak_bytes": peak, "precision": precision}


def test_combine_ratios_mfu_and_goals():
    peak = 989.4e12
    bmc = side(16, 0.5, 40 * 2**30, "fp32 (plan bf16)")
    eager = side(32, 0.25, 30 * 2**30)
    compiled = side(32, 0.2, 20 * 2**30)
    r = gpu_bench.combine(MEDIUM, 1024, peak, bmc, eager, compiled)
    tok = {k: r["sides"][k]["tokens_per_s"] for k in ("bmc", "eager", "compile")}
    assert tok == pytest.approx({"bmc": 16 * 1024 / 0.5, "eager": 32 * 1024 / 0.25,
                                 "compile": 32 * 1024 / 0.2})
    assert r["ratios"]["tokens_per_s"]["bmc/eager"] == pytest.approx(0.25)
    assert r["ratios"]["tokens_per_s"]["bmc/compile"] == pytest.approx(0.2)
    assert r["ratios"]["peak_memory"]["bmc/compile"] == pytest.approx(2.0)
    mfu = tok["bmc"] * gpu_bench.flops_per_token(MEDIUM, 1024) / peak
    assert r["sides"]["bmc"]["mfu"] == pytest.approx(mfu)
    assert r["goals"] == {"tokens_per_s bmc/compile >= 1.0": False,
                          "tokens_per_s bmc/eager >= 1.3": False,
                          "bmc MFU >= 45%": False}
    assert r["errors"] == {}
    lines = gpu_bench.table_lines([r])
    assert any("fp32 (plan bf16)" in line and line.startswith("gpt2-medium  bmc") for line in lines)
    assert "0.25x" in lines[-1] and "0.20x" in lines[-1] and "MISSED" in lines[-1]
    json.dumps(r)   # the result is JSON as it stands


def test_combine_goals_met():
    bmc = side(16, 0.1, 1)
    r = gpu_bench.combine(SMALL, 1024, 989.4e12, bmc, side(16, 0.13, 1), side(16, 0.1, 1))
    assert r["goals"] == {"tokens_per_s bmc/compile >= 1.0": True,
                          "tokens_per_s bmc/eager >= 1.3": True}
    assert "ok" in gpu_bench.table_lines([r])[-1]


def test_combine_with_a_side_missing():
    err = {"error": "no micro-batch ran: trainer: error: out of memory on cuda", "tries": []}
    r = gpu_bench.combine(SMALL, 1024, None, err, side(8, 0.1, 1), None)
    assert r["sides"]["bmc"] is None and r["sides"]["compile"] is None
    assert r["sides"]["eager"]["mfu"] is None          # no peak known
    assert r["ratios"]["tokens_per_s"] == {"bmc/eager": None, "bmc/compile": None}
    assert r["goals"]["tokens_per_s bmc/eager >= 1.3"] is None
    assert r["errors"] == {"bmc": err["error"]}
    lines = gpu_bench.table_lines([r])
    assert any("out of memory on cuda" in line for line in lines)
    assert any(line.startswith("gpt2-small   compile  not measured") for line in lines)


def test_budget_shares_what_is_left():
    budget = gpu_bench.Budget(100.0, [1.0, 3.0])
    assert budget.next_share() == pytest.approx(25.0, abs=0.5)
    assert budget.next_share() == pytest.approx(100.0, abs=0.5)   # the rest


def test_start_index_from_predictions():
    c = [{"predicted_peak_bytes": {"fp32": 200e9}}, {"predicted_peak_bytes": {"fp32": 100e9}},
         {"predicted_peak_bytes": {"fp32": 50e9}}]
    assert gpu_bench.start_index(c, int(80e9), "fp32") == 1     # 100 <= 1.3 x 80
    assert gpu_bench.start_index(c, int(30e9), "fp32") == 2
    assert gpu_bench.start_index(c, None, "fp32") == 0


FAKE_TRAINER = r'''#!/usr/bin/env python3
"""A trainer that runs out of memory above micro-batch LIMIT."""
import json, sys
args = sys.argv[1:]
folder = args[args.index("--dir") + 1]
steps = int(args[args.index("--steps") + 1])
log = args[args.index("--log") + 1]
mb = json.load(open(folder + "/trainer.json"))["micro_batch"]
if mb > LIMIT:
    print("trainer: error: out of memory on cuda: cannot allocate 123 bytes of activations",
          file=sys.stderr)
    sys.exit(1)
print("note: the plan trains in bf16 mixed precision; the CPU runtime computes in fp32")
with open(log, "w") as f:
    for step in range(1, steps + 1):
        f.write(json.dumps({"step": step, "loss": 1.0, "step_time_s": 0.1 * step * mb,
                            "peak_memory_bytes": {"total": 1000 * mb + step,
                                                  "activations": 10}}) + "\n")
'''


def fake_setup(tmp_path, limit):
    trainer = tmp_path / "trainer"
    trainer.write_text(FAKE_TRAINER.replace("LIMIT", str(limit)))
    trainer.chmod(trainer.stat().st_mode | stat.S_IEXEC)
    candidates = []
    for mb in (8, 4, 2, 1):
        folder = tmp_path / "smoke" / f"mb{mb}"
        folder.mkdir(parents=True)
        (folder / "trainer.json").write_text(json.dumps({"micro_batch": mb, "precision": "bf16"}))
        candidates.append({"micro_batch": mb, "dir": f"smoke/mb{mb}"})
    return str(trainer), {"models": {"smoke": {"candidates": candidates}}}


def test_bmc_side_goes_smaller_after_out_of_memory(tmp_path):
    trainer, manifest = fake_setup(tmp_path, limit=2)
    r = gpu_bench.bmc_side(str(tmp_path), manifest, gpu_bench.SMOKE, trainer, "cpu",
                           warmup=2, steps=3, seconds=60)
    assert r["micro_batch"] == 2
    assert [t["result"] for t in r["tries"]] == ["out of memory", "out of memory"]
    assert "out of memory on cuda" in r["tries"][0]["error"]
    assert r["median_s"] == pytest.approx(0.1 * 4 * 2)       # steps 3..5, median step 4
    assert r["peak_bytes"] == 2000 + 5
    assert r["precision"] == "fp32 (plan bf16)"
    m = gpu_bench.side_metrics(r, gpu_bench.SMOKE, 64, None)
    assert m["tokens_per_s"] == pytest.approx(2 * 64 / 0.8)


def test_precision_of_reads_the_trainers_note(tmp_path):
    (tmp_path / "trainer.json").write_text(json.dumps({"precision": "bf16"}))
    cpu = "note: the plan trains in bf16 mixed precision; the CPU runtime computes in fp32"
    cuda = ("note: the plan trains in bf16 mixed precision; the CUDA runtime's GEMMs take "
            "bf16 inputs with fp32 accumulation; weights, activations and optimizer state "
            "are fp32")
    assert gpu_bench.precision_of(cpu, str(tmp_path)) == "fp32 (plan bf16)"
    assert gpu_bench.precision_of(cuda, str(tmp_path)) == "bf16 GEMMs (plan bf16)"
    assert gpu_bench.precision_of("", str(tmp_path)) == "bf16"


def test_bmc_side_reports_when_nothing_fits(tmp_path):
    trainer, manifest = fake_setup(tmp_path, limit=0)
    r = gpu_bench.bmc_side(str(tmp_path), manifest, gpu_bench.SMOKE, trainer, "cpu",
                           warmup=1, steps=1, seconds=60)
    assert "out of memory" in r["error"] and len(r["tries"]) == 4


def test_summary_carries_the_bench_result(tmp_path):
    r = gpu_bench.combine(SMALL, 1024, 989.4e12, side(16, 0.1, 1), side(16, 0.13, 1), None)
    bench = tmp_path / "gpu-bench.json"
    bench.write_text(json.dumps({"machine": {"gpu": "NVIDIA H100"}, "models": [r]}))
    check = tmp_path / "check"
    check.mkdir()
    (check / "stages.tsv").write_text("bench\t0\t100.0\t200\n")
    out = tmp_path / "gpu-check.json"
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gpu_check_summary.py"),
                    "--check", str(check), "--mode", "gpu", "--second", "cuda", "--rtol", "1e-4",
                    "--bench-json", str(bench), "-o", str(out)], capture_output=True, check=False)
    result = json.loads(out.read_text())["bench"]["result"]
    assert result["models"]["gpt2-small"]["ratios"]["tokens_per_s"]["bmc/eager"] == \
        pytest.approx(1.3)
    assert result["models"]["gpt2-small"]["sides"]["compile"] is None


def test_torch_worker_protocol_without_torch():
    """The PyTorch side runs in a subprocess that answers with one RESULT
    line; where torch is missing (here), that line carries the error."""
    try:
        import torch  # noqa: F401
        pytest.skip("torch is importable: the GPU session measures it")
    except ImportError:
        pass
    r = gpu_bench.run_torch(gpu_bench.SMOKE, 64, "eager", [2, 1], 1, 1, 30.0, "cpu")
    assert r == {"error": "ModuleNotFoundError: No module named 'torch'"}


def test_torch_worker_timeout_is_reported(monkeypatch, tmp_path):
    """A worker that outlives its seconds is killed, with what it started
    (torch.compile's workers), and reported."""
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\necho compiling\nsleep 30 &\nwait\n")
    slow.chmod(0o755)
    monkeypatch.setattr(gpu_bench.sys, "executable", str(slow))
    r = gpu_bench.run_torch(gpu_bench.SMOKE, 64, "eager", [1], 1, 1, 1.0, "cpu")
    assert r == {"error": "timed out after 1 s", "output_tail": "compiling\n"}
