"""Step time of partitioned training on 1, 2 and 4 ranks (MPI, one thread
per rank) for data-, tensor- and pipeline-parallel plans, split as the
trainer measures it: compute, communication by mesh axis and the pipeline
bubble. Prints, per model, each plan's step time, its split, the slowest
rank's peak memory and the scaling ratios against the one-rank step
(speed-up = one-rank step / plan step, of the median steps and of the
best ones; efficiency = speed-up / ranks), every model and plan measured
in one run.

    .venv/bin/python bench/parallel_bench.py [--models gpt3-tiny,hf-gpt2-124m]
        [--global-batch 8] [--seq N] [--steps N]

gpt3-tiny runs at sequence 16 for 41 steps, GPT-2 small (hf-gpt2-124m,
graph-only: random weights) at sequence 64 for 4 steps (about 4 s a step on
one core; the whole run takes about 5 minutes); --seq and --steps set both.
The first step of each run is left out; the table shows the slowest rank's
median step and that step's own split, and the slowest rank's best step
(the spread shows the machine's noise). A plan a model cannot take (pp4 of
a two-layer model) is printed with bmc's reason.

The machine this runs on has two cores: four ranks share them, so their
ratios measure the partitioned program's overheads (collectives, smaller
GEMMs, ranks waiting for a core), not a speed-up. The meshes are fixed
(--fix) over a cluster of slow devices so that tp splits even small models;
what --fix leaves free (ZeRO stage, the stream between tp regions) the
planner chooses, and the table names it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import MODELS, ROOT, machine_note, run, threads_env, tool  # noqa: E402

CLUSTER = os.path.join(ROOT, "tests", "data", "clusters", "slow-compute.yaml")
# 1 rank; dp, tp and pp on 2 and on 4 ranks; two mixed 4-rank meshes.
# Pipelines: micro-batches of 2 sequences (4 per step of 8, per dp replica).
PLANS = [(1, None),
         (2, "dp=2,tp=1,pp=1"), (2, "dp=1,tp=2,pp=1"),
         (2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"),
         (4, "dp=4,tp=1,pp=1"), (4, "dp=1,tp=4,pp=1"),
         (4, "dp=1,tp=1,pp=4,mb=2,schedule=1f1b"),
         (4, "dp=2,tp=2,pp=1"), (4, "dp=1,tp=2,pp=2,mb=2,schedule=1f1b")]
# Per model: sequence length and steps (the first one left out).
SETTINGS = {"gpt3-tiny": (16, 41), "hf-gpt2-124m": (64, 4)}


# main() points this at a copy of bmc and bmrt-trainer taken when the run
# starts: the tree is shared, and a rebuild during a run of several
# minutes would otherwise mix two builds in one table.
BMC: str | None = None


def snapshot_tools(folder: str) -> str:
    """Copies bmc and the trainer it puts beside each step program into
    `folder`; returns a line naming the build's commit."""
    global BMC
    os.makedirs(folder)
    for name in ("bmc", "bmrt-trainer"):
        shutil.copy2(tool(name), folder)
    BMC = os.path.join(folder, "bmc")
    git = ["git", "-C", ROOT]
    head = subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    changed = len(dirty.splitlines())
    built = os.path.getmtime(tool("bmc"))
    return (f"tools: build/bin/bmc of {time.strftime('%Y-%m-%d %H:%M', time.localtime(built))}"
            f", tree at {head or 'unknown'}"
            + (f" with {changed} files changed" if changed else ""))


def compile_plan(model: str, ranks: int, fix: str | None, args, out: str,
                 refusable: bool = False) -> str | None:
    """`bmc compile` of one plan (args: global_batch, seq). With
    `refusable`, a --fix the model cannot take returns bmc's one line
    instead of ending the benchmark."""
    command = [BMC or tool("bmc"), "compile", os.path.join(MODELS, f"{model}.onnx"), "-o", out,
               "--init", "random", "--gpus", str(ranks), "--cluster", CLUSTER,
               "--global-batch", str(args.global_batch), "--seq", str(args.seq)]
    if fix:
        command += ["--fix", fix]
    if refusable:
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0 and result.stderr.startswith("bmc: error: --fix"):
            return result.stderr.strip()
    run(command)
    return None


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
    """The slowest rank's median step (over steps, the first left out: it
    warms caches; of an even count the faster of the middle two) and that
    step's own split, so that the parts add up to the step; the largest
    peak memory of any rank."""
    by_step: dict[int, list[dict]] = {}
    for r in records:
        by_step.setdefault(r["step"], []).append(r)
    steps = sorted(by_step)[1:] or sorted(by_step)
    slowest = sorted((max(by_step[s], key=lambda r: r["step_time_s"]) for s in steps),
                     key=lambda r: r["step_time_s"])
    median = slowest[(len(slowest) - 1) // 2]
    return {
        "step": median["step_time_s"],
        "compute": median["compute_time_s"],
        "comm": dict(median.get("communication_time_s", {})),
        "bubble": median.get("bubble_time_s", 0.0),
        "best": slowest[0]["step_time_s"],
        "peak": max(r.get("peak_memory_bytes", {}).get("total", 0) for r in records),
    }


def chosen(out: str) -> str:
    """What the planner chose where --fix left it free (ZeRO stage, the
    stream between tp regions, recomputation), as " [zero=1]"."""
    with open(os.path.join(out, "plan.json")) as f:
        config = json.load(f)["config"]
    free = [f"zero={config['zero_stage']}"] if config["zero_stage"] else []
    if config["stream"] != "replicated":
        free.append(f"stream={config['stream']}")
    if config["recompute"] != "none":
        free.append(f"recompute={config['recompute']}")
    return f" [{', '.join(free)}]" if free else ""


def measure(model: str, args, work: str) -> None:
    """Every plan of PLANS for `model`, one after the other, printed as
    it finishes; each compiled folder removed after its run (GPT-2's
    weights are 0.5 GB a folder)."""
    seq, steps = SETTINGS.get(model, (16, 41))
    seq, steps = args.seq or seq, args.steps or steps
    settings = argparse.Namespace(global_batch=args.global_batch, seq=seq)
    print(f"\n{model}: global batch {args.global_batch} x {seq} tokens, {steps} steps "
          f"(the first left out), one thread per rank, median of the slowest rank")
    print(f"{'plan [what the planner chose]':50} {'ranks':>5} {'step ms':>9} {'best':>9} {'compute':>9} "
          f"{'comm by axis (ms)':>26} {'bubble':>8} {'peak MiB':>8} "
          f"{'speed-up':>8} {'effic.':>6} {'x best':>6}")
    base = best = None
    for ranks, fix in PLANS:
        out = os.path.join(work, f"{model}-{ranks}-{fix or 'one'}")
        refused = compile_plan(model, ranks, fix, settings, out, refusable=True)
        if refused:
            print(f"{fix:50} {ranks:>5}   {refused}")
            continue
        name = f"{fix or 'one rank'}{chosen(out)}"
        s = summarise(train(out, ranks, steps))
        shutil.rmtree(out)
        base, best = base or s["step"], best or s["best"]
        comm = ", ".join(f"{a} {t * 1e3:.2f}" for a, t in sorted(s["comm"].items())
                         if t > 0) or "-"
        speedup = base / s["step"]
        print(f"{name:50} {ranks:>5} {s['step'] * 1e3:9.2f} "
              f"{s['best'] * 1e3:9.2f} {s['compute'] * 1e3:9.2f} {comm:>26} {s['bubble'] * 1e3:8.2f} "
              f"{s['peak'] / 2**20:8.1f} {speedup:8.2f} {speedup / ranks:6.2f} "
              f"{best / s['best']:6.2f}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="gpt3-tiny,hf-gpt2-124m",
                        help="comma-separated zoo models (models/onnx/NAME.onnx)")
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=0, help="default: per model")
    parser.add_argument("--steps", type=int, default=0, help="default: per model")
    args = parser.parse_args()
    print(machine_note())
    with tempfile.TemporaryDirectory() as work:
        print(snapshot_tools(os.path.join(work, "bin")), flush=True)
        for model in args.models.split(","):
            measure(model, args, work)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average at the end: {load}")


if __name__ == "__main__":
    main()
