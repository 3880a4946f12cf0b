"""Pipeline schedules, predicted against measured (issue 28): for every
schedule bmc runs (1F1B, interleaved, ZB-H1, ZB-V, DualPipe-V), the
planner's bubble and peak activation memory beside what the trainer
measures on 2 and 4 CPU ranks, and the planner's predicted step time for
GPT-3 175B on 1024 GPUs and Llama-2 70B on 256 GPUs under each schedule.

    .venv/bin/python bench/schedule_bench.py [--cluster FILE] [--steps 6]
        [--ranks 2,4] [--json out.json]

Without --cluster it uses (or makes) the calibration benchmark's
build/bench-calibration/cluster.yaml. Each CPU row plans with `bmc plan
--fix`, compiles from that plan and trains under mpirun with one thread
per rank; measured = the slowest rank's median step (after the first),
its bubble (the time the trainer waits in pipeline receives) and the
largest peak of activation memory over the ranks. Ratios are predicted /
measured. The runs of one rank count go round the schedules `--rounds`
times, interleaved, so that the machine's drift touches every schedule
alike; each row reports the median over the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import calibration_bench  # noqa: E402
from benchlib import MODELS, tool  # noqa: E402
from calibration_bench import calibrated_cluster, measure, plan, predicted  # noqa: E402

# Per rank count, the model: V schedules need the layers in 2 pp chunks.
# calibration_bench plans (batch 8, seq 128) and builds (models/zoo.py)
# them as it does its own.
CPU_MODELS = {2: "gpt3-small-cpu-4l", 4: "gpt3-small-cpu-8l"}
for _layers, _model in ((4, CPU_MODELS[2]), (8, CPU_MODELS[4])):
    calibration_bench.MODELS_USED[_model] = (8, 128)
    calibration_bench.GENERATED[_model] = ("gpt3-small-cpu", _layers)
SCHEDULES = ["schedule=1f1b", "schedule=interleaved,v=2", "schedule=zb-h1",
             "schedule=zb-v", "schedule=dualpipe-v"]
GPU_MODELS = [("gpt3-175b", 1024), ("llama2-70b", 256)]


def cpu_rows(args, cluster: str, work: str) -> list[dict]:
    rows = []
    for ranks in args.ranks:
        model = CPU_MODELS[ranks]
        fixes = [f"dp=1,tp=1,pp={ranks},mb=1,{s}" for s in SCHEDULES]
        runs: dict[str, list[dict]] = {fix: [] for fix in fixes}
        preds = {}
        for _ in range(args.rounds):
            for fix in fixes:
                plan_file = os.path.join(work, "plan.json")
                preds[fix] = predicted(plan(model, ranks, fix, cluster, plan_file))
                runs[fix].append(measure(model, ranks, plan_file, args.steps, work))
        for fix in fixes:
            meas = {key: statistics.median(r[key] for r in runs[fix])
                    for key in ("step", "bubble")}
            meas["activations"] = statistics.median(
                r["memory"]["activations"] for r in runs[fix])
            rows.append({"ranks": ranks, "model": model, "fix": fix,
                         "pred": preds[fix], "meas": meas})
            print_cpu(rows[-1])
    return rows


def print_cpu(r: dict) -> None:
    p, m = r["pred"], r["meas"]
    act = p["memory"]["activations"]
    print(f"{r['ranks']} ranks {r['fix']:48} step {p['step'] * 1e3:7.1f}/"
          f"{m['step'] * 1e3:7.1f} ms ({p['step'] / m['step']:.2f})  bubble "
          f"{p['bubble'] * 1e3:6.1f}/{m['bubble'] * 1e3:6.1f} ms  activations "
          f"{act / 2**20:6.1f}/{m['activations'] / 2**20:6.1f} MiB "
          f"({act / max(m['activations'], 1):.2f})", flush=True)


def gpu_rows(work: str) -> list[dict]:
    rows = []
    for model, gpus in GPU_MODELS:
        for schedule in SCHEDULES:
            out = os.path.join(work, "gpu-plan.json")
            result = subprocess.run(
                [tool("bmc"), "plan", os.path.join(MODELS, f"{model}.onnx"),
                 "--gpus", str(gpus), "--fix", schedule, "--json", "-o", out],
                capture_output=True, text=True)
            row = {"model": model, "gpus": gpus, "fix": schedule}
            if result.returncode != 0:
                row["error"] = (result.stderr or result.stdout).strip().splitlines()[-1]
                print(f"{model} on {gpus} GPUs, {schedule}: {row['error']}", flush=True)
            else:
                with open(out) as f:
                    p = json.load(f)
                c = p["config"]
                row.update(step=p["time"]["step_seconds"], bubble=p["time"]["bubble"],
                           config=f"dp={c['dp']} tp={c['tp']} pp={c['pp']} "
                                  f"v={c['chunks']} mb={c['micro_batch']}")
                print(f"{model} on {gpus} GPUs, {schedule:26} step "
                      f"{row['step']:7.3f} s  bubble {row['bubble']:6.3f} s  "
                      f"({row['config']})", flush=True)
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", help="a calibrated cluster file")
    parser.add_argument("--recalibrate", action="store_true")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--ranks", default="2,4",
                        type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--gpu-only", action="store_true")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        rows = {"gpu": gpu_rows(work)}
        if not args.gpu_only:
            cluster = calibrated_cluster(args)
            print(f"cluster {cluster}; {args.steps} steps per run, {args.rounds} "
                  f"rounds, one thread per rank", flush=True)
            rows["cpu"] = cpu_rows(args, cluster, work)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
