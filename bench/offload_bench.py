"""The offloaded optimizer behind the next forward against the same phases
after the backward (--offload-after) and against the optimizer on the
device, side by side in one run (issue 29).

    .venv/bin/python bench/offload_bench.py [--models gpt3-small-cpu]
        [--seq 128] [--global-batch 8] [--steps 8] [--rounds 3]

Each model is compiled twice from one plan's mesh (one rank, one thread):
with `offload=optimizer` and without. The modes run --rounds times,
alternating so that a change in the machine's load falls on all of them;
the table gives the median and the best of all measured steps (the first
of each run left out: it has no update behind it), the medians of the
offloaded phases (copies down, host step, copies up: on the CPU backend
copies within host memory) and of the trainer's wait for them, and each
mode's step against the offload run one phase after another. On the CPU
backend (whose default is after: the worker would share the ranks' cores)
the worker thread takes the second core while the trainer's forward runs
on the first.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_bench import compile_plan, train  # noqa: E402

PHASES = ["copy_down", "host_step", "copy_up", "wait"]


def measured(records: list[dict]) -> list[dict]:
    return [r for r in records if r["step"] > 1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["gpt3-small-cpu"])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"global batch {args.global_batch} x {args.seq} tokens, one rank with one "
          f"thread, {args.steps} steps x {args.rounds} rounds per mode; medians")
    print(f"{'model':16} {'mode':22} {'step ms':>8} {'best ms':>8} "
          + " ".join(f"{p + ' ms':>12}" for p in PHASES) + f" {'vs after':>9}")
    fix = "dp=1,tp=1,pp=1,mb={mb}"
    with tempfile.TemporaryDirectory() as work:
        for model in args.models:
            mesh = fix.format(mb=args.global_batch)
            host = os.path.join(work, f"{model}-host")
            device = os.path.join(work, f"{model}-device")
            compile_plan(model, 1, mesh + ",offload=optimizer", args, host)
            compile_plan(model, 1, mesh, args, device)
            modes = [("offload, after", host, ("--offload-after",)),
                     ("offload, behind", host, ("--offload-behind",)),
                     ("optimizer on device", device, ())]
            steps: dict[str, list[dict]] = {name: [] for name, _, _ in modes}
            for _ in range(args.rounds):
                for name, out, flags in modes:
                    steps[name] += measured(train(out, 1, args.steps + 1, *flags,
                                                  name="bench"))
            after = statistics.median(r["step_time_s"] for r in steps["offload, after"])
            for name, _, _ in modes:
                rs = steps[name]
                step = statistics.median(r["step_time_s"] for r in rs)
                best = min(r["step_time_s"] for r in rs)
                phases = [statistics.median(r.get("offload_time_s", {}).get(p, 0.0)
                                            for r in rs) for p in PHASES]
                print(f"{model:16} {name:22} {step * 1e3:8.1f} {best * 1e3:8.1f} "
                      + " ".join(f"{p * 1e3:12.2f}" for p in phases)
                      + f" {step / after:9.3f}")


if __name__ == "__main__":
    main()
