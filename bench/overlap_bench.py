"""Step time with the data-parallel gradient reduction overlapped with the
backward pass against the blocking path (--no-overlap), side by side in one
run: dp=2 (and dp=2 with ZeRO 2) over MPI, one thread per rank.

    .venv/bin/python bench/overlap_bench.py [--models gpt3-tiny hf-gpt2-tiny]
        [--seq 16] [--global-batch 8] [--steps 20] [--rounds 3]

Each configuration runs --rounds times, the modes alternating so that a
change in the machine's load falls on all of them; the table gives the
median and the best of all measured steps (the first of each run left out)
of the slower rank's step, the median time it was blocked in dp
communication, and the median overlap window (first bucket started to last
wait done). The tiny models'
gradients fit one 4 MiB bucket, which can only start when the backward
ends; the small-bucket mode (--bucket-mb 0.05) starts buckets during it.
On a two-core machine with one thread per rank, MPI progresses only while
a rank is inside MPI (the tests between instructions), and the copies use
the cores the backward needs: expect little to hide here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_bench import compile_plan, train  # noqa: E402

MODES = [("blocking", ("--no-overlap",)), ("overlap 4 MiB", ()),
         ("overlap 0.05 MiB", ("--bucket-mb", "0.05"))]
PLANS = ["dp=2,tp=1,pp=1", "dp=2,tp=1,pp=1,zero=2"]


def slowest_steps(records: list[dict]) -> list[dict]:
    """Per step (the first left out), the slower rank's record."""
    by_step: dict[int, list[dict]] = {}
    for r in records:
        by_step.setdefault(r["step"], []).append(r)
    return [max(by_step[s], key=lambda r: r["step_time_s"]) for s in sorted(by_step)[1:]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["gpt3-tiny", "hf-gpt2-tiny"])
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"global batch {args.global_batch} x {args.seq} tokens, {args.steps} steps "
          f"x {args.rounds} rounds per mode, 2 ranks with one thread each; medians "
          f"of the slower rank")
    print(f"{'model':14} {'plan':24} {'mode':18} {'step ms':>8} {'best ms':>8} "
          f"{'dp comm ms':>10} {'window ms':>9} {'vs blocking':>11}")
    with tempfile.TemporaryDirectory() as work:
        for model in args.models:
            for fix in PLANS:
                out = os.path.join(work, f"{model}-{fix}")
                compile_plan(model, 2, fix, args, out)
                steps: dict[str, list[dict]] = {name: [] for name, _ in MODES}
                for _ in range(args.rounds):
                    for name, flags in MODES:
                        steps[name] += slowest_steps(
                            train(out, 2, args.steps + 1, *flags, name="bench"))
                base = statistics.median(r["step_time_s"] for r in steps["blocking"])
                for name, _ in MODES:
                    rs = steps[name]
                    step = statistics.median(r["step_time_s"] for r in rs)
                    best = min(r["step_time_s"] for r in rs)
                    comm = statistics.median(r["communication_time_s"].get("dp", 0.0)
                                             for r in rs)
                    window = statistics.median(r.get("overlap_window_s", 0.0) for r in rs)
                    print(f"{model:14} {fix:24} {name:18} {step * 1e3:8.2f} "
                          f"{best * 1e3:8.2f} {comm * 1e3:10.3f} {window * 1e3:9.3f} "
                          f"{step / base:11.3f}")


if __name__ == "__main__":
    main()
