"""Predicted against measured (issue 15): the planner's step time and peak
memory for a set of configurations, beside what the trainer measures running
them on this machine, with the planner's ranking of the configurations
against the measured ranking and its pick against the fastest.

    .venv/bin/python bench/calibration_bench.py [--cluster FILE] [--recalibrate]
        [--steps 8] [--only gpt3-small-cpu] [--json out.json]

Without --cluster it calibrates this machine first (`bmc calibrate -np 2`,
about two minutes) into build/bench-calibration/cluster.yaml and reuses that
file on later runs (--recalibrate measures again). Every configuration is
planned with `bmc plan --fix` on that file, compiled from its plan file and
trained under mpirun with one thread per rank; measured = the median over
the steps after the first of the slowest rank's step (the trainer's own
--log), peak memory by kind = the largest over the ranks.

Goals (issue 15): step time within 15% for every configuration, memory by
kind within 10%, Spearman's rho of the rankings >= 0.9, the pick the fastest
or within 5% of it. Ratios are predicted / measured.
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
from benchlib import MODELS, ROOT, WORK, run, tool  # noqa: E402
from parallel_bench import summarise, train  # noqa: E402

DEFAULT_CLUSTER = os.path.join(ROOT, "build", "bench-calibration", "cluster.yaml")

# (model, global batch, sequence length or None)
MODELS_USED = {
    "gpt3-small-cpu": (8, 128),
    "gpt3-tiny": (8, 16),
    "moe-tiny": (8, None),
    "vit-tiny": (8, None),
    "vit-tiny-4l": (8, None),
}

# Made here by models/zoo.py (--layers): the interleaved schedule needs two
# layers per pipeline rank, and GPT's tied embedding cannot interleave yet.
GENERATED = {"vit-tiny-4l": ("vit-tiny", 4)}

# (model, ranks, --fix[, optimizer[, "fused"]]): dp, tp, pp with 1F1B and
# interleaving, ZeRO stages, recomputation, expert parallelism, offload; the
# optimizer is adam unless named (LAMB and LARS: their per-tensor norms and
# second pass, and under ZeRO their norms' sums over dp); "fused" plans
# and runs fused attention (--fuse-attention on).
CONFIGS = [
    ("gpt3-small-cpu", 1, "dp=1,tp=1,pp=1,mb=8"),
    ("gpt3-small-cpu", 1, "dp=1,tp=1,pp=1,mb=8,recompute=full"),
    ("gpt3-small-cpu", 2, "dp=2,tp=1,pp=1,mb=4"),
    ("gpt3-small-cpu", 2, "dp=2,tp=1,pp=1,mb=4,zero=1"),
    ("gpt3-small-cpu", 2, "dp=2,tp=1,pp=1,mb=4,zero=3"),
    ("gpt3-small-cpu", 2, "dp=1,tp=2,pp=1,mb=8"),
    ("gpt3-small-cpu", 2, "dp=1,tp=2,pp=1,mb=8,recompute=selective"),
    ("gpt3-small-cpu", 2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"),
    ("vit-tiny-4l", 2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"),
    ("vit-tiny-4l", 2, "dp=1,tp=1,pp=2,mb=2,schedule=interleaved,v=2"),
    ("vit-tiny-4l", 2, "dp=2,tp=1,pp=1,mb=4"),
    ("gpt3-tiny", 1, "dp=1,tp=1,pp=1,mb=8"),
    ("gpt3-tiny", 2, "dp=2,tp=1,pp=1,mb=4"),
    ("gpt3-tiny", 2, "dp=1,tp=2,pp=1,mb=8"),
    ("gpt3-tiny", 2, "dp=1,tp=1,pp=2,mb=2,schedule=1f1b"),
    ("vit-tiny", 1, "dp=1,tp=1,pp=1,mb=8"),
    ("vit-tiny", 2, "dp=2,tp=1,pp=1,mb=4"),
    ("vit-tiny", 2, "dp=1,tp=2,pp=1,mb=8"),
    ("moe-tiny", 1, "dp=1,tp=1,pp=1,mb=8"),
    ("moe-tiny", 2, "dp=2,tp=1,pp=1,mb=4"),
    ("moe-tiny", 2, "dp=2,tp=1,pp=1,ep=2,mb=4"),
    ("gpt3-tiny", 1, "dp=1,tp=1,pp=1,mb=8", "lamb"),
    ("gpt3-tiny", 2, "dp=2,tp=1,pp=1,mb=4,zero=1", "lamb"),
    ("gpt3-tiny", 2, "dp=1,tp=2,pp=1,mb=8", "lars"),
    # The optimizer offloaded to the host (issue 29): its copies down and
    # up and the host step, one after another.
    ("gpt3-small-cpu", 1, "dp=1,tp=1,pp=1,mb=8,offload=optimizer"),
    ("gpt3-small-cpu", 2, "dp=2,tp=1,pp=1,mb=4,zero=1,offload=optimizer"),
    # Context parallelism (issue 29): the sequence split over cp ranks,
    # keys and values gathered, unfused and fused attention.
    ("gpt3-small-cpu", 2, "dp=1,cp=2,tp=1,pp=1,mb=8"),
    ("gpt3-small-cpu", 2, "dp=1,cp=2,tp=1,pp=1,mb=8", "adam", "fused"),
    # 2-D tensor parallelism (issue 29): a tp=2 x tp2=2 grid, each weight
    # gathered over tp2 before use, beside 1-D tp=4 on the same 4 ranks.
    ("gpt3-small-cpu", 4, "dp=1,tp=2,tp2=2,pp=1,mb=8"),
    ("gpt3-small-cpu", 4, "dp=1,tp=4,pp=1,mb=8"),
]

# The plan's memory kinds and the trainer's names for them.
MEMORY_KINDS = [("params", "parameters"), ("grads", "gradients"),
                ("optimizer", "optimizer_state"), ("activations", "activations"),
                ("buffers", "workspace"), ("host", "host")]


def model_path(model: str) -> str:
    if model not in GENERATED:
        return os.path.join(MODELS, f"{model}.onnx")
    base, layers = GENERATED[model]
    path = os.path.join(WORK, f"{model}.onnx")
    if not os.path.exists(path):
        os.makedirs(WORK, exist_ok=True)
        run([sys.executable, os.path.join(ROOT, "models", "zoo.py"), base,
             "--layers", str(layers), "--out", WORK])
    return path


def model_args(model: str) -> list[str]:
    batch, seq = MODELS_USED[model]
    args = [model_path(model), "--global-batch", str(batch)]
    return args + (["--seq", str(seq)] if seq else [])


def plan(model: str, ranks: int, fix: str | None, cluster: str, out: str,
         optimizer: str = "adam", fused: bool = False) -> dict:
    command = [tool("bmc"), "plan", *model_args(model), "--gpus", str(ranks),
               "--cluster", cluster, "--optimizer", optimizer, "--json", "-o", out]
    if fused:
        command += ["--fuse-attention", "on"]
    run(command + (["--fix", fix] if fix else []))
    with open(out) as f:
        return json.load(f)


def options_of(rest: list) -> tuple[str, bool]:
    """A configuration's optimizer (adam unless named) and whether it runs
    fused attention."""
    return (rest[0] if rest else "adam", len(rest) > 1 and rest[1] == "fused")


def measure(model: str, ranks: int, plan_file: str, steps: int, work: str) -> dict:
    out = os.path.join(work, "compiled")
    shutil.rmtree(out, ignore_errors=True)
    run([tool("bmc"), "compile", model_path(model),
         "--plan", plan_file, "--init", "random", "-o", out])
    records = train(out, ranks, steps)
    summary = summarise(records)
    summary["memory"] = {
        kind: max(r["peak_memory_bytes"].get(kind, 0) for r in records)
        for _, kind in MEMORY_KINDS}
    # The offloaded optimizer's host memory (0 without offload).
    summary["memory"]["host"] = max(r.get("host_peak_memory_bytes", 0) for r in records)
    return summary


def combine(runs: list[dict]) -> dict:
    """One configuration's rounds: the median of each part, the best step
    of any round, and the spread of the rounds' steps ((max - min) /
    median; 0 for one round)."""
    steps = [r["step"] for r in runs]
    middle = statistics.median(steps)
    keys = {k for r in runs for k in r["comm"]}
    return {
        "step": middle,
        "best": min(r["best"] for r in runs),
        "spread": (max(steps) - min(steps)) / middle if len(runs) > 1 else 0.0,
        "compute": statistics.median(r["compute"] for r in runs),
        "bubble": statistics.median(r["bubble"] for r in runs),
        "comm": {k: statistics.median(r["comm"].get(k, 0.0) for r in runs) for k in keys},
        "memory": {kind: statistics.median(r["memory"][kind] for r in runs)
                   for _, kind in MEMORY_KINDS},
        "rounds": len(runs),
    }


def failure_text(exit: SystemExit) -> str:
    """The line that says why a command failed (benchlib.run exits with the
    command, then its output)."""
    lines = [line for line in str(exit.code).splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line]
    return (errors or lines or ["failed"])[-1][:200]


def predicted(p: dict) -> dict:
    time = p["time"]
    return {"step": time["step_seconds"], "compute": time["compute"],
            "comm": time["nvlink"] + time["network"], "bubble": time["bubble"],
            "memory": {kind: p["memory"].get(key, 0) for key, kind in MEMORY_KINDS},
            "config": p["config"]}


def fix_of(config: dict) -> str:
    """The --fix spelling of a plan's configuration, the parts that differ
    from the defaults."""
    parts = [f"dp={config['dp']}"]
    if config.get("cp", 1) > 1:
        parts.append(f"cp={config['cp']}")
    parts.append(f"tp={config['tp']}")
    if config.get("tp2", 1) > 1:
        parts.append(f"tp2={config['tp2']}")
    parts.append(f"pp={config['pp']}")
    if config["ep"] > 1:
        parts.append(f"ep={config['ep']}")
    parts.append(f"mb={config['micro_batch']}")
    if config["zero_stage"]:
        parts.append(f"zero={config['zero_stage']}")
    if config["recompute"] != "none":
        parts.append(f"recompute={config['recompute']}")
    if config["schedule"] != "none":
        parts.append(f"schedule={config['schedule']}")
    if config["chunks"] > 1:
        parts.append(f"v={config['chunks']}")
    if config.get("offload", "none") != "none":
        parts.append(f"offload={config['offload']}")
    return ",".join(parts)


def ranks_of(values: list[float]) -> list[float]:
    """Average ranks (ties share the mean rank), as Spearman's rho needs."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: list[float], y: list[float]) -> float | None:
    """Pearson correlation of the ranks (Spearman 1904)."""
    if len(x) < 3:
        return None
    rx, ry = ranks_of(x), ranks_of(y)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return sxy / (sxx * syy) ** 0.5 if sxx and syy else None


def mark(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def calibrated_cluster(args) -> str:
    if args.cluster:
        return args.cluster
    if args.recalibrate or not os.path.exists(DEFAULT_CLUSTER):
        os.makedirs(os.path.dirname(DEFAULT_CLUSTER), exist_ok=True)
        print("calibrating this machine: bmc calibrate -np 2", flush=True)
        subprocess_run([tool("bmc"), "calibrate", "-np", "2", "-o", DEFAULT_CLUSTER])
    return DEFAULT_CLUSTER


def subprocess_run(command: list[str]) -> None:
    """Runs with the progress lines shown as they come."""
    import subprocess
    if subprocess.run(command).returncode != 0:
        sys.exit(f"{' '.join(command)} failed")


def print_rows(rows: list[dict]) -> None:
    print(f"{'model':15} {'n':>1} {'configuration':42} {'pred ms':>8} {'meas ms':>8} "
          f"{'best':>6} {'spread':>6} {'ratio':>6}  {'compute p/m':>13} {'comm p/m':>11} "
          f"{'bubble p/m':>11}  memory p/m by kind (params grads optimizer activations "
          f"buffers host)")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:15} {r['ranks']:>1} {r['fix']:42} failed: {r['error']}")
            continue
        p, m = r["pred"], r["meas"]
        comm = sum(m["comm"].values())
        mem = " ".join(f"{p['memory'][k] / max(m['memory'][k], 1):.2f}"
                       if m["memory"][k] else
                       f"{p['memory'][k] / 2**20:.1f}M/0" for _, k in MEMORY_KINDS)
        print(f"{r['model']:15} {r['ranks']:>1} {r['fix']:42} {p['step'] * 1e3:8.1f} "
              f"{m['step'] * 1e3:8.1f} {m['best'] * 1e3:6.1f} {m['spread']:6.1%} "
              f"{p['step'] / m['step']:6.2f}  "
              f"{p['compute'] * 1e3:6.1f}/{m['compute'] * 1e3:6.1f} "
              f"{p['comm'] * 1e3:5.1f}/{comm * 1e3:5.1f} "
              f"{p['bubble'] * 1e3:5.1f}/{m['bubble'] * 1e3:5.1f}  {mem}")


def print_goals(rows: list[dict], picks: dict) -> None:
    failed = [r for r in rows if "error" in r]
    if failed:
        print(f"\nfailed: {len(failed)}/{len(rows)} configurations MISSED")
    rows = [r for r in rows if "error" not in r]
    time_ok = [abs(r["pred"]["step"] / r["meas"]["step"] - 1) <= 0.15 for r in rows]
    print(f"\nstep time within 15%: {sum(time_ok)}/{len(rows)} {mark(all(time_ok))}")
    for _, kind in MEMORY_KINDS:
        pairs = [(r["pred"]["memory"][kind], r["meas"]["memory"][kind]) for r in rows]
        # Within 10%, or within 64 KiB where a kind holds next to nothing.
        ok = [abs(p - m) <= max(0.10 * m, 64 * 1024) for p, m in pairs]
        print(f"memory {kind:16} within 10% (or 64 KiB): {sum(ok)}/{len(rows)} "
              f"{mark(all(ok))}")
    # Rankings compare one optimizer's configurations (the planner's picks
    # are Adam's): another optimizer computes another step.
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("optimizer", "adam") == "adam":
            groups.setdefault((r["model"], r["ranks"]), []).append(r)
    for (model, ranks), group in sorted(groups.items()):
        rho = spearman([r["pred"]["step"] for r in group],
                       [r["meas"]["step"] for r in group])
        fastest = min(group, key=lambda r: r["meas"]["step"])
        text = f"{rho:.2f} {mark(rho >= 0.9)}" if rho is not None else "n/a (< 3)"
        line = (f"{model} on {ranks} rank(s): {len(group)} configurations, "
                f"Spearman's rho {text}; fastest measured {fastest['fix']} "
                f"{fastest['meas']['step'] * 1e3:.1f} ms")
        pick = picks.get((model, ranks))
        if pick:
            slower = pick["meas"]["step"] / fastest["meas"]["step"] - 1
            line += (f"; planner's pick {pick['fix']} {pick['meas']['step'] * 1e3:.1f} ms "
                     f"({slower:+.1%}) {mark(slower <= 0.05)}")
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cluster", help="a calibrated cluster file")
    parser.add_argument("--recalibrate", action="store_true")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2,
                        help="runs of every configuration, interleaved: round 1 runs "
                             "each once, then round 2, so that load hits all alike")
    parser.add_argument("--only", help="one model")
    parser.add_argument("--match", help="only the configurations whose --fix "
                                        "contains this (cp= for context parallelism; "
                                        "several separated by |)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    cluster = calibrated_cluster(args)
    print(f"cluster {cluster}; {args.steps} steps per run, one thread per rank")
    configs = [c for c in CONFIGS if (not args.only or c[0] == args.only)
               and (not args.match
                    or any(m in c[2] for m in args.match.split("|")))]
    preds: dict[int, dict] = {}
    runs: dict[int, list[dict]] = {i: [] for i in range(len(configs))}
    errors: dict[int, str] = {}
    picks = {}
    with tempfile.TemporaryDirectory() as work:
        plan_file = os.path.join(work, "plan.json")
        for round_ in range(1, args.rounds + 1):
            for i, (model, ranks, fix, *rest) in enumerate(configs):
                if i in errors:
                    continue
                try:
                    preds[i] = predicted(plan(model, ranks, fix, cluster, plan_file,
                                              *options_of(rest)))
                    runs[i].append(measure(model, ranks, plan_file, args.steps, work))
                except SystemExit as failure:
                    errors[i] = failure_text(failure)
            print(f"round {round_}/{args.rounds}: {len(configs) - len(errors)} "
                  f"configurations measured, {len(errors)} failed", flush=True)
        for model, ranks in sorted({(c[0], c[1]) for c in configs if c[1] > 1}):
            try:
                chosen = plan(model, ranks, None, cluster, plan_file)
                pick = {"model": model, "ranks": ranks, "fix": fix_of(chosen["config"]),
                        "pred": predicted(chosen),
                        "meas": combine([measure(model, ranks, plan_file, args.steps, work)
                                         for _ in range(args.rounds)])}
            except SystemExit as failure:
                print(f"planner's pick for {model} on {ranks} ranks failed: "
                      f"{failure_text(failure)}")
                continue
            picks[(model, ranks)] = pick
            print(f"planner's pick for {model} on {ranks} ranks: {pick['fix']}")
    rows = []
    for i, (model, ranks, fix, *rest) in enumerate(configs):
        optimizer, fused = options_of(rest)
        label = fix if optimizer == "adam" else f"{fix} {optimizer}"
        row = {"model": model, "ranks": ranks,
               "fix": label + (" fused" if fused else ""),
               "optimizer": optimizer}
        if i in errors:
            row["error"] = errors[i]
        else:
            row.update(pred=preds[i], meas=combine(runs[i]))
        rows.append(row)
    print()
    print_rows(rows)
    print_goals(rows, picks)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "picks": list(picks.values())}, f, indent=1)


if __name__ == "__main__":
    main()
