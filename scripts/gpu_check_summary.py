#!/usr/bin/env python3
"""gpu-check.json from what scripts/gpu-check left in its check folder.

The check folder holds stages.tsv (one "name rc seconds limit" line per
stage; rc 124 or 137 is a timeout, "skipped" / "absent" / "missing" say why
a stage did not run), NAME.txt (each stage's output), conformance.json
(GoogleTest's JSON report) and models/NAME.RUN.jsonl (the trainer's --log).

    gpu_check_summary.py --check DIR --mode gpu|cpu-only --second cuda|cpu-repeat
                         --rtol X --models a,b [--manifest M] [--bench-json B]
                         -o gpu-check.json

Prints a few lines for the terminal; exits 0 when every stage ran and every
comparison passed, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

TIMEOUT_CODES = {"124", "137"}


def read_text(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def read_stages(check: str) -> dict[str, dict]:
    stages = {}
    for line in read_text(os.path.join(check, "stages.tsv")).splitlines():
        name, rc, seconds, limit = line.split("\t")
        if rc in ("skipped", "absent", "missing"):
            status = rc
        elif rc in TIMEOUT_CODES:
            status = "timeout"
        else:
            status = "ok" if rc == "0" else "failed"
        stages[name] = {"name": name, "status": status,
                        "rc": int(rc) if rc.lstrip("-").isdigit() else None,
                        "seconds": float(seconds), "limit_s": int(limit)}
    return stages


def machine(check: str) -> dict:
    info = {}
    for line in read_text(os.path.join(check, "machine.txt")).splitlines():
        key, _, value = line.partition(": ")
        if key in ("cores", "cpu", "gpu", "nvcc", "cmake", "ninja", "mpi",
                   "mpirun"):
            info[key] = int(value) if key == "cores" and value.isdigit() else value
    return info


def error_lines(text: str, limit: int = 20) -> list[str]:
    """Compiler and linker errors, the first `limit` of them."""
    keys = ("error", "FAILED:", "undefined reference")
    return [line for line in text.splitlines() if any(k in line for k in keys)][:limit]


def build(check: str, stages: dict) -> dict:
    configure = read_text(os.path.join(check, "configure.txt"))
    prebuilt = read_text(os.path.join(check, "prebuilt.txt"))
    text = read_text(os.path.join(check, "build.txt"))
    built_here = (stages.get("configure", {}).get("status") == "ok"
                  and stages.get("build", {}).get("status") == "ok")
    loaded = stages.get("prebuilt", {}).get("status") == "ok"
    return {
        "ok": built_here or loaded,
        "prebuilt": loaded,
        "cuda_backend": "bmrt: CUDA backend built" in configure + prebuilt,
        "errors": error_lines(configure + "\n" + text),
        "rest": stages.get("build-rest", {}).get("status"),
        "rest_errors": error_lines(read_text(os.path.join(check, "build-rest.txt"))),
    }


def conformance(check: str, stages: dict, mode: str) -> dict:
    stage = stages.get("conformance", {"status": "skipped"})
    result = {"status": stage["status"], "passed": 0, "failed": 0, "skipped": 0,
              "failing": [], "skipped_tests": []}
    try:
        with open(os.path.join(check, "conformance.json")) as f:
            report = json.load(f)
    except (OSError, ValueError):
        text = read_text(os.path.join(check, "conformance.txt")).strip().splitlines()
        result["error"] = ("no report: " + (text[-1] if text else "no output")
                           if stage["status"] != "skipped" else "not run")
        return result
    for suite in report.get("testsuites", []):
        for test in suite.get("testsuite", []):
            name = f"{suite['name']}.{test['name']}"
            if test.get("failures"):
                result["failed"] += 1
                result["failing"].append(name)
            elif test.get("result") == "SKIPPED" or test.get("status") == "NOTRUN":
                result["skipped"] += 1
                result["skipped_tests"].append(name)
            else:
                result["passed"] += 1
    # A crash or timeout after the report was written still fails the stage.
    result["ok"] = stage["status"] == "ok" and result["failed"] == 0
    if mode == "gpu" and result["skipped"]:
        # With a GPU present nothing should skip: a CUDA device that did not
        # come up skips every CUDA case.
        result["note"] = f"{result['skipped']} tests skipped on a GPU machine"
    return result


def trainer_run(check: str, model: str, run: str, stages: dict) -> dict:
    stage = stages.get(f"model.{model}.{run}", {"status": "skipped", "seconds": 0})
    losses = []
    for line in read_text(os.path.join(check, "models", f"{model}.{run}.jsonl")).splitlines():
        if line.strip():
            losses.append(json.loads(line)["loss"])
    out = {"status": stage["status"], "seconds": stage.get("seconds", 0), "losses": losses,
           "error": None}
    if stage["status"] != "ok":
        # The trainer's one-line error ("trainer: error: ..."), else the last line.
        lines = read_text(os.path.join(check, f"model.{model}.{run}.txt")).strip().splitlines()
        errors = [line for line in lines if "error" in line]
        out["error"] = (errors or lines or [f"not run ({stage['status']})"])[-1]
    return out


def compare(cpu: list[float], other: list[float], rtol: float, exact: bool) -> dict:
    """Per-step relative differences |other - cpu| / |cpu| and the verdict."""
    if not cpu or len(cpu) != len(other):
        return {"rel_diff": [], "max_rel_diff": None, "pass": False,
                "reason": f"{len(cpu)} cpu steps, {len(other)} other steps"}
    diffs = [abs(b - a) / max(abs(a), 1e-12) for a, b in zip(cpu, other)]
    worst = max(diffs)
    ok = worst == 0.0 if exact else worst <= rtol
    return {"rel_diff": diffs, "max_rel_diff": worst, "pass": ok, "reason": None}


def bench_result(path: str | None) -> dict | None:
    """gpu_bench.py's JSON, cut to each model's ratios, goals and each
    side's micro-batch, tokens/s, MFU, peak memory and precision (the full
    file lies beside gpu-check.json)."""
    try:
        with open(path) as f:
            result = json.load(f)
    except (TypeError, OSError, ValueError):
        return None
    keep = ("micro_batch", "median_s", "tokens_per_s", "mfu", "peak_bytes", "precision")
    models = {}
    for m in result.get("models", []):
        models[m["model"]] = {
            "ratios": m.get("ratios"), "goals": m.get("goals"), "errors": m.get("errors"),
            "sides": {k: ({f: v.get(f) for f in keep} if v else None)
                      for k, v in m.get("sides", {}).items()}}
    return {"machine": result.get("machine"), "peak_bf16_flops": result.get("peak_bf16_flops"),
            "elapsed_s": result.get("elapsed_s"), "models": models}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", required=True)
    parser.add_argument("--mode", choices=["gpu", "cpu-only"], required=True)
    parser.add_argument("--second", required=True, help="the second run's name")
    parser.add_argument("--rtol", type=float, required=True)
    parser.add_argument("--models", default="")
    parser.add_argument("--manifest", help="gpu-pack's MANIFEST.json")
    parser.add_argument("--bench-json", help="bench/gpu_bench.py's result, where it ran")
    parser.add_argument("-o", "--output", required=True)
    args = parser.parse_args()

    stages = read_stages(args.check)
    exact = args.mode == "cpu-only"   # the same build, threads and seed twice
    models = {}
    for model in filter(None, args.models.split(",")):
        runs = {run: trainer_run(args.check, model, run, stages) for run in ("cpu", args.second)}
        verdict = compare(runs["cpu"]["losses"], runs[args.second]["losses"], args.rtol, exact)
        if any(r["status"] != "ok" for r in runs.values()):
            status = "error"
        else:
            status = "pass" if verdict["pass"] else "fail"
        models[model] = {"status": status, "compared": ["cpu", args.second], **runs,
                         "max_rel_diff": verdict["max_rel_diff"],
                         "rel_diff_per_step": verdict["rel_diff"],
                         **({"reason": verdict["reason"]} if verdict["reason"] and status != "error" else {})}

    counts = {k: sum(m["status"] == k for m in models.values()) for k in ("pass", "fail", "error")}
    bench_stage = stages.get("bench", {"status": "absent"})
    bench_lines = read_text(os.path.join(args.check, "bench.txt")).strip().splitlines()
    summary = {
        "mode": args.mode,
        "machine": machine(args.check),
        "pack": json.loads(read_text(args.manifest) or "null") if args.manifest else None,
        "stages": list(stages.values()),
        "build": build(args.check, stages),
        "conformance": conformance(args.check, stages, args.mode),
        "tolerance": {"rtol": 0.0 if exact else args.rtol,
                      "on": "each step's loss, |other - cpu| / |cpu|"},
        "models": models,
        "models_summary": counts,
        "bench": {"status": bench_stage["status"],
                  "note": {"absent": "bench/gpu_bench.py is absent",
                           "skipped": "not run in this mode or out of time"}.get(bench_stage["status"]),
                  "tail": bench_lines[-30:],
                  "result": bench_result(args.bench_json)},
    }
    summary["ok"] = (summary["build"]["ok"] and summary["conformance"].get("ok", False)
                     and bool(models) and counts["pass"] == len(models))
    with open(args.output, "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")

    conf = summary["conformance"]
    print(f"build: {'ok' if summary['build']['ok'] else 'FAILED'}"
          f" (cuda backend: {summary['build']['cuda_backend']}"
          f"{', prebuilt' if summary['build']['prebuilt'] else ''})")
    print(f"conformance: {conf['passed']} passed, {conf['failed']} failed, {conf['skipped']} skipped"
          + (f" ({conf['error']})" if conf.get("error") else "")
          + (f" ({conf['note']})" if conf.get("note") else ""))
    for name in conf["failing"][:20]:
        print(f"  FAILED {name}")
    for name, m in models.items():
        worst = m["max_rel_diff"]
        detail = m[args.second]["error"] or m["cpu"]["error"] or \
            (f"max rel diff {worst:.2e}" if worst is not None else m.get("reason", ""))
        print(f"model {name}: {m['status']} ({detail})")
    print(f"models: {counts['pass']} pass, {counts['fail']} fail, {counts['error']} error;"
          f" bench: {bench_stage['status']}; overall: {'ok' if summary['ok'] else 'NOT ok'}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
