#!/usr/bin/env python3
"""What bmc's cost model predicts for Optimus's setting (issue 29).

Xu et al. 2021 ("An Efficient 2D Method for Training Super-Large Deep
Learning Models") report, on 64 GPUs, 1.48x the training speed of Megatron
and 8x its largest batch, comparing tensor parallelism alone: Megatron's
1-D tp=64 (2021: no sequence parallelism) against an 8 x 8 grid. This runs
`bmc plan` on that setting (a GPT with 64 heads, so that tp=64 splits every
layer) and prints, side by side from one run:

- the step time of 1-D tp=64 without and with sequence parallelism, of the
  8 x 8 grid, and of the best plan bmc finds with every axis free, with
  their ratios to the grid;
- the largest global batch each of the first three fits in one
  micro-batch without recomputation (the paper's "maximum batch size").

Predictions, not measurements: no GPU is touched.

    .venv/bin/python bench/tensor2d_plans.py [--model gpt3-39b]
        [--cluster dgx-a100-80g] [--gpus 64] [--global-batch 64]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BMC = os.path.join(ROOT, "build", "bin", "bmc")

MESHES = [
    ("1-D tp, replicated stream (Megatron 2021)", "dp=1,pp=1,tp={g},stream=replicated"),
    ("1-D tp, sequence parallel", "dp=1,pp=1,tp={g}"),
    ("2-D grid (Optimus)", "dp=1,pp=1,tp={q},tp2={q}"),
]


def plan(model: str, cluster: str, gpus: int, batch: int, fix: str | None) -> dict | None:
    """The plan bmc writes, or None where none fits."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "plan.json")
        args = [BMC, "plan", os.path.join(ROOT, "models", "onnx", f"{model}.onnx"),
                "--gpus", str(gpus), "--cluster", cluster, "--global-batch", str(batch),
                "-o", out]
        if fix:
            args += ["--fix", fix]
        if subprocess.run(args, capture_output=True, text=True).returncode != 0:
            return None
        with open(out) as f:
            return json.load(f)


def largest_batch(model: str, cluster: str, gpus: int, fix: str, unit: int) -> int:
    """The largest multiple of `unit` (doubling, then bisecting) whose one
    micro-batch fits without recomputation."""
    def fits(batch: int) -> bool:
        return plan(model, cluster, gpus, batch,
                    f"{fix},mb={batch},recompute=none,zero=0") is not None
    if not fits(unit):
        return 0
    low = unit
    while fits(2 * low):
        low *= 2
    high = 2 * low
    while high - low > unit:
        mid = (low + high) // 2 // unit * unit
        if fits(mid):
            low = mid
        else:
            high = mid
    return low


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="gpt3-39b")
    parser.add_argument("--cluster", default="dgx-a100-80g")
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--global-batch", type=int, default=64)
    args = parser.parse_args()
    q = int(round(args.gpus ** 0.5))
    assert q * q == args.gpus, "--gpus must be a square"
    rows = [(name, fix.format(g=args.gpus, q=q)) for name, fix in MESHES]
    rows.append(("best plan, every axis free", None))
    print(f"{args.model} on {args.gpus} GPUs of {args.cluster}, "
          f"global batch {args.global_batch}")
    steps = {}
    for name, fix in rows:
        p = plan(args.model, args.cluster, args.gpus, args.global_batch, fix)
        steps[name] = p["time"]["step_seconds"] if p else None
        config = p["config"] if p else {}
        print(f"  {name:44s} {steps[name] or float('nan'):9.3f} s  "
              f"mb={config.get('micro_batch', '-')} "
              f"recompute={config.get('recompute', '-')}")
    grid = steps["2-D grid (Optimus)"]
    for name, _ in rows:
        if steps[name] and grid:
            print(f"  {name:44s} / grid = {steps[name] / grid:.2f}")
    print("largest global batch in one micro-batch, no recomputation")
    batches = {name: largest_batch(args.model, args.cluster, args.gpus, fix, q)
               for name, fix in rows[:3]}
    for name, batch in batches.items():
        print(f"  {name:44s} {batch:6d}")
    baseline = batches[rows[0][0]]
    if baseline:
        print(f"  grid / Megatron 2021 = {batches[rows[2][0]] / baseline:.1f}x")


if __name__ == "__main__":
    main()
