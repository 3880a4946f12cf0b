"""Step time of partitioned training on 1, 2 and 4 ranks (MPI, one thread
per rank), split as the trainer measures it: compute, communication by mesh
axis and the pipeline bubble. Prints each plan's step
time and its ratio to the one-rank step, side by side in one run.

    .venv/bin/python bench/parallel_bench.py [--model gpt3-tiny] [--seq 16]
        [--global-batch 8] [--steps 6]

The machine this runs on has two cores: four ranks share them, so their
ratios measure the partitioned program's overheads (collectives, smaller
GEMMs), not a speed-up. The plans are fixed (--fix) over a cluster of slow
devices so that tp splits even small models.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import MODELS, ROOT, run, threads_env, tool  # noqa: E402

CLUSTER = os.path.join(ROOT, "tests", "data", "clusters", "slow-compute.yaml")
PLANS = [(1, None), (2, "dp=2,tp=1,pp=1"), (2, "dp=1,tp=2,pp=1"),
         (2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"), (4, "dp=2,tp=2,pp=1"),
         (4, "dp=1,tp=2,pp=2,mb=2,schedule=1f1b")]


def compile_plan(model: str, ranks: int, fix: str | None, args, out: str) -> None:
    command = [tool("bmc"), "compile", os.path.join(MODELS, f"{model}.onnx"), "-o", out,
               "--init", "random", "--gpus", str(ranks), "--cluster", CLUSTER,
               "--global-batch", str(args.global_batch), "--seq", str(args.seq)]
    if fix:
        command += ["--fix", fix]
    run(command)


def train(out: str, ranks: int, steps: int, *flags: str, name: str = "run") -> list[dict]:
    """Every rank's log records of `steps` steps ("NAME.jsonl", and
    "NAME.rankR.jsonl" for the other ranks; earlier ones removed first)."""
    def logs() -> list[str]:
        return [os.path.join(out, f) for f in sorted(os.listdir(out))
                if f.startswith(name + ".") and f.endswith(".jsonl")]
    for old in logs():
        os.remove(old)
    command = [os.path.join(out, "trainer"), "--steps", str(steps), "--threads", "1",
               "--quiet", "--log", os.path.join(out, f"{name}.jsonl"), *flags]
    if ranks > 1:
        command = [shutil.which("mpirun"), "--allow-run-as-root", "--oversubscribe",
                   "-np", str(ranks), "-x", "OMP_NUM_THREADS=1",
                   "-x", "OPENBLAS_NUM_THREADS=1", *command]
    run(command, env=threads_env(1))
    records = []
    for log in logs():
        with open(log) as f:
            records += [json.loads(line) for line in f if line.strip()]
    return records


def summarise(records: list[dict]) -> dict:
    """Median over steps (the first left out: it warms caches) of the
    slowest rank's step, and that step's split."""
    by_step: dict[int, list[dict]] = {}
    for r in records:
        by_step.setdefault(r["step"], []).append(r)
    steps = sorted(by_step)[1:] or sorted(by_step)
    slowest = [max(by_step[s], key=lambda r: r["step_time_s"]) for s in steps]
    axes = {axis for r in slowest for axis in r.get("communication_time_s", {})}
    comm = {axis: statistics.median(r.get("communication_time_s", {}).get(axis, 0.0)
                                    for r in slowest) for axis in axes}
    return {
        "step": statistics.median(r["step_time_s"] for r in slowest),
        "compute": statistics.median(r["compute_time_s"] for r in slowest),
        "comm": comm,
        "bubble": statistics.median(r.get("bubble_time_s", 0.0) for r in slowest),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="gpt3-tiny")
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    print(f"{args.model}: global batch {args.global_batch} x {args.seq} tokens, "
          f"{args.steps} steps, one thread per rank, median of the slowest rank")
    print(f"{'plan':36} {'ranks':>5} {'step ms':>9} {'compute':>9} "
          f"{'comm by axis (ms)':>24} {'bubble':>7} {'vs 1 rank':>9}")
    base = None
    with tempfile.TemporaryDirectory() as work:
        for ranks, fix in PLANS:
            out = os.path.join(work, f"{ranks}-{fix or 'one'}")
            compile_plan(args.model, ranks, fix, args, out)
            s = summarise(train(out, ranks, args.steps))
            base = base or s["step"]
            comm = ", ".join(f"{a} {t * 1e3:.2f}" for a, t in sorted(s["comm"].items())
                             if t > 0) or "-"
            print(f"{fix or 'one rank':36} {ranks:>5} {s['step'] * 1e3:9.2f} "
                  f"{s['compute'] * 1e3:9.2f} {comm:>24} {s['bubble'] * 1e3:7.2f} "
                  f"{s['step'] / base:9.2f}")


if __name__ == "__main__":
    main()
