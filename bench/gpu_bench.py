"""GPT-2 small (124M) and GPT-2 medium (350M) training on one GPU: bmc's
trainer (`--device cuda`) against the same model in PyTorch, eager and
torch.compile (bf16 autocast, fused AdamW), sequence 1024, each at the
largest micro-batch that fits; tokens/s, MFU and peak memory, printed as
ratios (bmc/eager, bmc/compile) and written as JSON. Issue 22 section 4.

Two halves, because bmc itself cannot run on the GPU machine (no MLIR):

  # here, with build/bin/bmc: compile every candidate micro-batch of both
  # models (scripts/gpu-pack runs this into .gpu/bench)
  python3 bench/gpu_bench.py --prepare .gpu/bench

  # on the GPU machine (scripts/gpu-check runs this as its bench stage)
  python3 bench/gpu_bench.py --folders .gpu/bench --build BUILD \\
      [--budget 180] [--json OUT/gpu-bench.json]

  # here, without a GPU: the same plumbing on a small model on the CPU
  # (prepare into a temporary folder, bmc's trainer --device cpu, seq 64)
  python3 bench/gpu_bench.py --smoke [--build build]

What the numbers are:
- tokens/s: micro-batch x 1024 / the median step time over the timed steps
  (the warm-up steps left out). bmc's step time is the trainer's own
  `step_time_s` of its --log; PyTorch's is the host clock around one
  whole step (forward, backward, clipping, AdamW) with the device
  synchronised on both ends.
- MFU: model FLOPs per token x tokens/s / the GPU's dense bf16 peak.
  Model FLOPs per token = 6 N + 12 L h s (PaLM, Chowdhery et al. 2022,
  arXiv:2204.02311, Appendix B; Megatron-LM's 72 B s l h^2 (1 + s/6h +
  V/12lh) per step without recomputation, Narayanan et al. 2021,
  arXiv:2104.04473, is the same count up to biases and norms): N the
  parameters that take part in matrix products, i.e. all of them but the
  position table (nanoGPT's estimate_mfu convention; the token table
  counts, since it is the tied output projection), L layers, h the hidden
  size, s = 1024.
  Causal attention is counted whole, as both sources do. The peak is the
  bf16 dense peak of the datasheet for every side (the issue's goal is
  stated against it), also for a side that computed in fp32: the JSON says
  which precision each side ran in.
- peak memory: bmc's trainer's peak of its own device allocations
  (parameters, gradients, optimizer state, activations, workspace);
  PyTorch's torch.cuda.max_memory_allocated. Neither counts the CUDA
  context.
- the micro-batch: each side tries the candidates from the largest down
  (bmc from the largest its plan predicts to fit, with some slack) and
  keeps the first that runs; a try that fails with an out-of-memory error
  goes one smaller. torch.compile starts at eager's micro-batch (each new
  shape is another compilation).

GPT-2 medium is models/onnx/gpt3-350m.onnx: GPT-2 medium's 24 layers,
hidden 1024 and 16 heads with the Megatron-LM vocabulary of 51200 and 2048
position rows (356.8M parameters; GPT-2 medium has 354.8M); the PyTorch
model here has the same dimensions. GPT-2 small is hf-gpt2-124m.onnx
(transformers' GPT2LMHeadModel, 124.4M).

Budget: everything runs under --budget seconds (default 180); each run
(bmc, eager, compile per model, in that order) gets a share of what is
left, weighted by Model.estimate_s, so a run that ends early leaves its
time to the rest; a run cut short keeps the steps it logged. The JSON is
rewritten after every run.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ONNX_DIR = os.path.join(ROOT, "models", "onnx")
SEQ = 1024


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    onnx: str            # models/onnx/<onnx>.onnx
    layers: int
    hidden: int
    heads: int
    vocab: int
    positions: int       # rows of the position table
    micro_batches: tuple[int, ...]   # candidates, largest first
    note: str = ""
    # Seconds of bmc's run, PyTorch eager's and torch.compile's (the
    # compilation dominates the last): the budget's weights. From the H200
    # runs of 2026-11-27: bmc's side took 9-10 s per model; eager timed out
    # on GPT-2 small at 14 and 15 s (PyTorch's start-up is most of it) and
    # ran GPT-2 medium in a 22 s share; torch.compile took 52 s (small) and
    # 94 s (medium). The six add up to the 185 s gpu-check gives the bench.
    estimate_s: tuple[float, float, float] = (12.0, 24.0, 50.0)


MODELS = {
    "gpt2-small": Model("gpt2-small", "hf-gpt2-124m", 12, 768, 12, 50257, 1024,
                        (64, 48, 32, 24, 16, 12, 8, 4, 2, 1),
                        "GPT-2 small, transformers GPT2LMHeadModel (124.4M)"),
    "gpt2-medium": Model("gpt2-medium", "gpt3-350m", 24, 1024, 16, 51200, 2048,
                         (32, 24, 16, 12, 8, 6, 4, 2, 1),
                         "GPT-2 medium dims (24 x 1024, 16 heads) with vocabulary 51200 and "
                         "2048 positions, models/onnx/gpt3-350m (356.8M)",
                         (13.0, 24.0, 62.0)),
}
# --smoke: a model small enough for this machine's CPU (graph-only, so it
# goes through --init random like the two above).
SMOKE = Model("smoke", "gpt3-small-cpu", 4, 256, 8, 8192, 128, (4, 2, 1),
              "gpt3-small-cpu (5.3M), the --smoke model")
SMOKE_SEQ = 64

# Dense bf16 peak (no sparsity) by the vendors' datasheets, FLOP/s, by a
# substring of the device name; the first match wins.
PEAKS_BF16 = [("H200", 989.4e12), ("H100 PCIe", 756.0e12), ("H100", 989.4e12),
              ("A100", 312.0e12)]

# --prepare's exit status when bmc lacks --weights-at-load (scripts/gpu-pack
# then packs no bench folders and says so).
NO_WEIGHTS_AT_LOAD = 3
OOM = re.compile(r"out of memory|CUBLAS_STATUS_ALLOC_FAILED", re.IGNORECASE)
# Goals of issue 22 section 4.
GOAL_VS_COMPILE = 1.0
GOAL_VS_EAGER = 1.3
GOAL_MFU_MEDIUM = 0.45


# --- arithmetic (no torch; tests/gpu/test_gpu_bench.py) ---------------------

def param_count(m: Model) -> int:
    """Every trainable parameter of the GPT-2 layout: token and position
    tables, per layer two layer norms, QKV, projection and the 4h MLP with
    biases, the final layer norm; the output projection tied."""
    h = m.hidden
    return m.vocab * h + m.positions * h + m.layers * (12 * h * h + 13 * h) + 2 * h


def flops_per_token(m: Model, seq: int) -> float:
    """6 N + 12 L h s (PaLM Appendix B), N without the position table."""
    n = param_count(m) - m.positions * m.hidden
    return 6.0 * n + 12.0 * m.layers * m.hidden * seq


def peak_bf16(device_name: str) -> float | None:
    for key, peak in PEAKS_BF16:
        if key.lower() in device_name.lower():
            return peak
    return None


def summarise_steps(times: list[float], warmup: int) -> dict | None:
    """Median and best of the steps after the warm-up (of an even count the
    mean of the middle two); None when no timed step is left."""
    timed = times[warmup:]
    if not timed:
        return None
    return {"median_s": statistics.median(timed), "best_s": min(timed),
            "timed_steps": len(timed)}


def side_metrics(side: dict | None, m: Model, seq: int, peak: float | None) -> dict | None:
    """tokens/s and MFU of one side's measurement ({micro_batch, median_s,
    peak_bytes, ...}); None when it did not measure."""
    if not side or not side.get("median_s"):
        return None
    tokens = side["micro_batch"] * seq / side["median_s"]
    out = dict(side)
    out["tokens_per_s"] = tokens
    out["mfu"] = tokens * flops_per_token(m, seq) / peak if peak else None
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def combine(m: Model, seq: int, peak: float | None, bmc: dict | None,
            eager: dict | None, compiled: dict | None) -> dict:
    """One model's result: each side's metrics, the ratios bmc/eager and
    bmc/compile of tokens/s and peak memory, and the goals met or missed
    (None where a side is missing)."""
    sides = {"bmc": side_metrics(bmc, m, seq, peak),
             "eager": side_metrics(eager, m, seq, peak),
             "compile": side_metrics(compiled, m, seq, peak)}
    tok = {k: (v or {}).get("tokens_per_s") for k, v in sides.items()}
    mem = {k: (v or {}).get("peak_bytes") for k, v in sides.items()}
    ratios = {"tokens_per_s": {"bmc/eager": ratio(tok["bmc"], tok["eager"]),
                               "bmc/compile": ratio(tok["bmc"], tok["compile"])},
              "peak_memory": {"bmc/eager": ratio(mem["bmc"], mem["eager"]),
                              "bmc/compile": ratio(mem["bmc"], mem["compile"])}}

    def goal(value, target):
        return None if value is None else value >= target

    goals = {"tokens_per_s bmc/compile >= 1.0": goal(ratios["tokens_per_s"]["bmc/compile"],
                                                      GOAL_VS_COMPILE),
             "tokens_per_s bmc/eager >= 1.3": goal(ratios["tokens_per_s"]["bmc/eager"],
                                                    GOAL_VS_EAGER)}
    if m.name == "gpt2-medium":
        goals["bmc MFU >= 45%"] = goal((sides["bmc"] or {}).get("mfu"), GOAL_MFU_MEDIUM)
    return {"model": m.name, "onnx": m.onnx, "note": m.note, "seq": seq,
            "parameters": param_count(m), "flops_per_token": flops_per_token(m, seq),
            "sides": sides, "errors": {k: (v or {}).get("error") for k, v in
                                       {"bmc": bmc, "eager": eager, "compile": compiled}.items()
                                       if (v or {}).get("error")},
            "ratios": ratios, "goals": goals}


def _fmt(value, spec: str, unit: str = "") -> str:
    """`value` in `spec` with `unit` after it, or a dash as wide."""
    if value is None:
        width = int("".join(c for c in spec.split(".")[0] if c.isdigit()) or 1) + len(unit)
        return "-".rjust(width)
    return format(value, spec) + unit


def table_lines(results: list[dict]) -> list[str]:
    """The printed table: per model one row per side, then the ratios."""
    lines = [f"{'model':12} {'side':8} {'precision':22} {'mb':>4} {'step ms':>9} "
             f"{'tokens/s':>10} {'MFU':>7} {'peak GiB':>9}"]
    for r in results:
        for side in ("bmc", "eager", "compile"):
            s = r["sides"][side]
            if s is None:
                err = r["errors"].get(side, "not measured")
                lines.append(f"{r['model']:12} {side:8} {err}")
                continue
            mfu = s["mfu"] * 100 if s.get("mfu") is not None else None
            peak = s["peak_bytes"] / 2**30 if s.get("peak_bytes") is not None else None
            lines.append(
                f"{r['model']:12} {side:8} {s.get('precision', '?')[:22]:22} "
                f"{s['micro_batch']:>4} {s['median_s'] * 1e3:9.1f} "
                f"{s['tokens_per_s']:10.0f} {_fmt(mfu, '6.1f', '%')} {_fmt(peak, '9.2f')}")
    lines.append("")
    lines.append(f"{'model':12} {'tokens/s bmc/eager':>19} {'bmc/compile':>12} "
                 f"{'memory bmc/eager':>17} {'bmc/compile':>12}  goals")
    for r in results:
        t, mem = r["ratios"]["tokens_per_s"], r["ratios"]["peak_memory"]
        goals = ", ".join(f"{k}: {'-' if v is None else 'ok' if v else 'MISSED'}"
                          for k, v in r["goals"].items())
        lines.append(f"{r['model']:12} {_fmt(t['bmc/eager'], '18.2f', 'x')} "
                     f"{_fmt(t['bmc/compile'], '11.2f', 'x')} {_fmt(mem['bmc/eager'], '16.2f', 'x')} "
                     f"{_fmt(mem['bmc/compile'], '11.2f', 'x')}  {goals}")
    return lines


# --- budget -------------------------------------------------------------------

class Budget:
    """Shares what is left of the run's seconds among the tasks still to
    come, by weight: a task that ends early leaves its time to the rest."""

    def __init__(self, seconds: float, weights: list[float]):
        self.end = time.monotonic() + seconds
        self.weights = list(weights)

    def left(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def next_share(self) -> float:
        weight = self.weights.pop(0) if self.weights else 1.0
        return self.left() * weight / (weight + sum(self.weights))


# --- prepare (here, with bmc) --------------------------------------------------

def bmc_help(bmc: str) -> str:
    return subprocess.run([bmc, "compile", "--help"], capture_output=True, text=True).stdout


def step_program_params(path: str) -> tuple[int, str]:
    """Parameters in a step program's param slots (buffers left out) and the
    element type of the first one."""
    total, dtype = 0, "?"
    with open(path) as f:
        for line in f:
            match = re.match(r'^slot %\d+ param (\w+)\[([\d,]*)\] "([^"]*)"', line)
            if match and not match.group(3).startswith("buffer."):
                n = 1
                for d in filter(None, match.group(2).split(",")):
                    n *= int(d)
                total += n
                dtype = match.group(1)
    return total, dtype


def predicted_peak(bmc: str, m: Model, seq: int, mb: int, precision: str,
                   cluster: str) -> int | None:
    """The plan's predicted peak bytes on one device at `precision`."""
    out = subprocess.run([bmc, "plan", os.path.join(ONNX_DIR, m.onnx + ".onnx"), "--gpus", "1",
                          "--cluster", cluster, "--seq", str(seq), "--global-batch", str(mb),
                          "--precision", precision, "--fix", f"dp=1,tp=1,pp=1,mb={mb},recompute=none",
                          "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        # Over the cluster's memory the plan is refused with its need.
        need = re.search(r"needs ([\d.]+) GiB per GPU", out.stderr)
        return int(float(need.group(1)) * 2**30) if need else None
    try:
        return int(json.loads(out.stdout)["memory"]["total"])
    except (ValueError, KeyError):
        return None


def prepare(folder: str, models: list[Model], seq: int, bmc: str, cluster: str,
            keep_weights: bool, device: str, drop_weights: bool = False) -> dict:
    """Compiles every candidate micro-batch of `models` into
    folder/<model>/mb<B>/ (no trainer binary: the GPU machine builds its
    own) and writes folder/manifest.json. Weights travel as init specs
    (`--weights-at-load`) where bmc has the flag; without it the folders
    hold params.safetensors, which only --keep-weights allows (too large
    to travel: a local test), or --drop-weights deletes (a test of the
    compile path and of the size that travels; such folders cannot run)."""
    at_load = "--weights-at-load" in bmc_help(bmc)
    if not at_load and not keep_weights and not drop_weights:
        print("gpu_bench: bmc compile has no --weights-at-load yet (the trainer generating "
              "the weights at load time), and folders with params.safetensors are too large "
              "to travel; rebuild bmc with it, or --keep-weights for a local test",
              file=sys.stderr)
        sys.exit(NO_WEIGHTS_AT_LOAD)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)
    weights = "at-load" if at_load else "dropped (cannot run)" if drop_weights else "file"
    manifest = {"seq": seq, "cluster": cluster, "weights": weights,
                "bmc": bmc, "commit": git_head(), "models": {}}
    for m in models:
        entries = []
        for mb in m.micro_batches:
            out = os.path.join(folder, m.name, f"mb{mb}")
            command = [bmc, "compile", os.path.join(ONNX_DIR, m.onnx + ".onnx"), "-o", out,
                       "--gpus", "1", "--seq", str(seq), "--global-batch", str(mb),
                       "--fix", f"mb={mb},recompute=none", "--cluster", cluster,
                       "--precision", "bf16",
                       "--device", device, "--init", "random", "--seed", "1"]
            if at_load:
                command.append("--weights-at-load")
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0 and "no plan fits in memory" in done.stderr:
                print(f"gpu_bench: {m.name} micro-batch {mb} left out: "
                      f"{done.stderr.strip().splitlines()[-1]}", file=sys.stderr)
                continue
            if done.returncode != 0:
                sys.exit(f"gpu_bench: {' '.join(command)} failed:\n{done.stdout}{done.stderr}")
            for name in ["trainer"] + (["params.safetensors"] if drop_weights and not at_load
                                       else []):
                if os.path.exists(os.path.join(out, name)):
                    os.remove(os.path.join(out, name))
            params, dtype = step_program_params(os.path.join(out, "step.bmp"))
            if params != param_count(m):
                sys.exit(f"gpu_bench: {m.onnx} has {params} parameters, the table here says "
                         f"{param_count(m)}: fix MODELS")
            entries.append({"micro_batch": mb, "dir": f"{m.name}/mb{mb}",
                            "program_dtype": dtype,
                            "predicted_peak_bytes": {
                                p: predicted_peak(bmc, m, seq, mb, p, cluster)
                                for p in ("bf16", "fp32")}})
        manifest["models"][m.name] = {"onnx": m.onnx, "parameters": param_count(m),
                                      "candidates": entries}
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(folder)
               for n in names)
    print(f"gpu_bench: prepared {', '.join(m.name for m in models)} at seq {seq} in {folder} "
          f"({size / 2**20:.1f} MiB, weights {manifest['weights']})")
    return manifest


def git_head() -> str:
    out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


# --- bmc's side (on the GPU machine; --smoke on the CPU) ------------------------

def read_log(path: str) -> list[dict]:
    records = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except ValueError:
                    pass   # a line cut by a timeout
    except OSError:
        pass
    return records


def precision_of(output: str, folder: str) -> str:
    """What bmc's trainer computed in: the trainer's own start-up note
    ("the plan trains in bf16 mixed precision; the CPU runtime computes in
    fp32", or on CUDA "...; the CUDA runtime's GEMMs take bf16 inputs with
    fp32 accumulation; weights, activations and optimizer state are fp32",
    reported as "bf16 GEMMs"), else the plan's precision (a backend that
    computes as planned has nothing to note)."""
    gemms = re.search(r"GEMMs take (\w+) inputs", output)
    match = re.search(r"computes in (\w+)", output)
    plan = ""
    try:
        with open(os.path.join(folder, "trainer.json")) as f:
            plan = json.load(f).get("precision", "")
    except (OSError, ValueError):
        pass
    if gemms:
        return f"{gemms.group(1)} GEMMs (plan {plan or '?'})"
    computed = match.group(1) if match else (plan or "fp32")
    return f"{computed} (plan {plan})" if plan and plan != computed else computed


def run_trainer(trainer: str, folder: str, device: str, steps: int, timeout: float,
                threads: int | None) -> dict:
    """One trainer run of `steps` steps; its log's step times and peak
    memory (what was logged before a timeout counts), or its error."""
    log = os.path.join(tempfile.mkdtemp(prefix="gpu-bench-"), "run.jsonl")
    command = [trainer, "--dir", folder, "--device", device, "--steps", str(steps),
               "--seed", "1", "--log", log]
    if threads:
        command += ["--threads", str(threads)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        output, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as e:
        output, rc = text_of(e.stdout) + text_of(e.stderr), "timeout"
    records = read_log(log)
    shutil.rmtree(os.path.dirname(log), ignore_errors=True)
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    return {"rc": rc, "records": records, "output": output,
            "error": None if rc == 0 else (errors[-1] if errors else f"exit {rc}"),
            "oom": bool(OOM.search(output)) and rc != 0}


def text_of(data) -> str:
    """A TimeoutExpired's captured output (bytes, str or None) as text."""
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def device_memory_bytes() -> int | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        return int(out.split()[0]) * 2**20
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def start_index(candidates: list[dict], memory: int | None, precision: str,
                slack: float = 1.3) -> int:
    """The first candidate whose predicted peak at `precision` is within
    `slack` x the device's memory (predictions are off by up to a third;
    an out-of-memory try costs only a load)."""
    if not memory:
        return 0
    for i, c in enumerate(candidates):
        predicted = (c.get("predicted_peak_bytes") or {}).get(precision)
        if predicted is None or predicted <= slack * memory:
            return i
    return len(candidates) - 1


def bmc_side(folders: str, manifest: dict, m: Model, trainer: str, device: str,
             warmup: int, steps: int, seconds: float, threads: int | None = None) -> dict:
    """bmc's trainer at the largest micro-batch that fits: candidates from
    the largest predicted to fit down, the next smaller after an
    out-of-memory error (or after any other error, at most twice running);
    then the timed run."""
    end = time.monotonic() + seconds
    candidates = manifest["models"][m.name]["candidates"]
    memory = device_memory_bytes() if device == "cuda" else None
    tries = []
    failures = 0
    for c in candidates[start_index(candidates, memory, "fp32"):]:
        left = end - time.monotonic()
        if left < 5:
            tries.append({"micro_batch": c["micro_batch"], "result": "no time left"})
            break
        folder = os.path.join(folders, c["dir"])
        run = run_trainer(trainer, folder, device, warmup + steps, left, threads)
        times = [r["step_time_s"] for r in run["records"]]
        timed = summarise_steps(times, warmup)
        if timed:
            peak = max(run["records"], key=lambda r: r["peak_memory_bytes"]["total"])
            return {"micro_batch": c["micro_batch"], **timed, "steps_logged": len(times),
                    "step_times_s": times, "peak_bytes": peak["peak_memory_bytes"]["total"],
                    "peak_by_kind": peak["peak_memory_bytes"],
                    "precision": precision_of(run["output"], folder),
                    "completed": run["rc"] == 0, "tries": tries,
                    "predicted_peak_bytes": c.get("predicted_peak_bytes")}
        tries.append({"micro_batch": c["micro_batch"],
                      "result": "out of memory" if run["oom"] else "timeout"
                      if run["rc"] == "timeout" else "error", "error": run["error"]})
        if run["rc"] == "timeout":
            break
        failures = 0 if run["oom"] else failures + 1
        if failures >= 2:
            break
    last = tries[-1] if tries else {}
    return {"error": f"no micro-batch ran: {last.get('error') or last.get('result', 'none')}",
            "tries": tries}


# --- PyTorch's side (on the GPU machine, in a subprocess) ------------------------

def torch_side(m: Model, seq: int, variant: str, candidates: list[int], warmup: int,
               steps: int, seconds: float, device: str = "cuda") -> dict:
    """The same GPT in PyTorch (bf16 autocast on CUDA, fused AdamW, clipping
    at 1, as bmc's trainer: lr 3e-4, weight decay 0.01), `variant` eager or
    compile, at the first of `candidates` that does not run out of memory;
    median step time of `steps` after `warmup`, max_memory_allocated."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    end = time.monotonic() + seconds
    cuda = device == "cuda"

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            h = m.hidden
            self.ln_1 = nn.LayerNorm(h)
            self.qkv = nn.Linear(h, 3 * h)
            self.attn_proj = nn.Linear(h, h)
            self.ln_2 = nn.LayerNorm(h)
            self.fc = nn.Linear(h, 4 * h)
            self.mlp_proj = nn.Linear(4 * h, h)

        def forward(self, x):
            b, t, h = x.shape
            q, k, v = self.qkv(self.ln_1(x)).split(h, dim=2)
            q, k, v = (z.view(b, t, m.heads, h // m.heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, h))
            return x + self.mlp_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(m.vocab, m.hidden)
            self.wpe = nn.Embedding(m.positions, m.hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(m.layers))
            self.ln_f = nn.LayerNorm(m.hidden)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)
                elif "ln" in name:
                    nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
                else:
                    nn.init.zeros_(p)

        def forward(self, ids, targets):
            pos = torch.arange(ids.shape[1], device=ids.device)
            x = self.wte(ids) + self.wpe(pos)
            for block in self.blocks:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)   # tied
            return F.cross_entropy(logits.view(-1, m.vocab), targets.view(-1))

    torch.manual_seed(1)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = GPT().to(device)
    count = sum(p.numel() for p in model.parameters())
    if count != param_count(m):
        return {"error": f"the PyTorch model has {count} parameters, not {param_count(m)}"}
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01,
                                  fused=cuda)
    step_model = torch.compile(model, dynamic=False) if variant == "compile" else model
    autocast = torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=cuda)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    def one_step(ids, targets):
        with autocast:
            loss = step_model(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    tries = []
    for mb in candidates:
        if end - time.monotonic() < 3:
            tries.append({"micro_batch": mb, "result": "no time left"})
            break
        ids = torch.randint(m.vocab, (mb, seq), device=device)
        targets = torch.randint(m.vocab, (mb, seq), device=device)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        times: list[float] = []
        failed = None
        try:
            while len(times) < warmup + steps and end - time.monotonic() > 0:
                sync()
                t0 = time.perf_counter()
                one_step(ids, targets)
                sync()
                times.append(time.perf_counter() - t0)
                # No more timed steps than the time left allows.
                if len(times) > warmup and times[-1] > end - time.monotonic():
                    break
        except Exception as e:  # noqa: BLE001 - torch.compile wraps some
            if not isinstance(e, torch.cuda.OutOfMemoryError) and not OOM.search(str(e)):
                raise
            failed = str(e).splitlines()[0] if str(e) else "out of memory"
        if failed:
            # Outside the handler: its traceback held the step's tensors.
            tries.append({"micro_batch": mb, "result": "out of memory", "error": failed})
            optimizer.zero_grad(set_to_none=True)
            del ids, targets
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
            continue
        timed = summarise_steps(times, warmup)
        if not timed:
            return {"error": f"micro-batch {mb}: {len(times)} steps in the time left "
                             f"(warm-up {warmup}, first {times[0] if times else 0:.1f} s)",
                    "tries": tries}
        return {"micro_batch": mb, **timed, "step_times_s": times,
                "compile_s": times[0] - timed["median_s"] if variant == "compile" else None,
                "peak_bytes": torch.cuda.max_memory_allocated() if cuda else None,
                "precision": "bf16 autocast" if cuda else "fp32",
                "torch": torch.__version__, "tries": tries}
    return {"error": "no micro-batch ran", "tries": tries}


def torch_worker(args) -> None:
    """--torch-worker: one torch_side call; its result as the last line."""
    m = SMOKE if args.model == "smoke" else MODELS[args.model]
    try:
        result = torch_side(m, args.seq, args.variant,
                            [int(x) for x in args.micro_batches.split(",")],
                            args.warmup, args.steps, args.seconds, args.device)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        result = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    print("RESULT " + json.dumps(result), flush=True)


def run_torch(m: Model, seq: int, variant: str, candidates: list[int], warmup: int,
              steps: int, seconds: float, device: str) -> dict:
    """torch_side in a subprocess of its own (an out-of-memory state or a
    compilation that hangs cannot touch the rest), killed after `seconds`."""
    command = [sys.executable, os.path.abspath(__file__), "--torch-worker", "--model", m.name,
               "--variant", variant, "--micro-batches", ",".join(map(str, candidates)),
               "--warmup", str(warmup), "--steps", str(steps), "--seq", str(seq),
               "--seconds", str(max(1.0, seconds - 8)), "--device", device]
    # A session of its own, so that a timeout ends torch.compile's worker
    # processes with it (the group is the worker's own id).
    worker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    try:
        output, _ = worker.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(worker.pid, signal.SIGKILL)
        output, _ = worker.communicate()
        return {"error": f"timed out after {seconds:.0f} s", "output_tail": output[-500:]}
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    for line in reversed(output.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = [line for line in output.strip().splitlines() if line.strip()]
    return {"error": (tail[-1] if tail else f"exit {worker.returncode}")[:300]}


def torch_available() -> str | None:
    """Why PyTorch cannot run here, or None."""
    done = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True)
    return None if done.returncode == 0 else "torch is not importable here"


# --- the run ------------------------------------------------------------------

def machine(device: str) -> dict:
    info = {"device": device}
    if device == "cuda":
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                                  "--format=csv,noheader"], capture_output=True, text=True,
                                 timeout=20).stdout.strip().splitlines()
            info["gpu"] = out[0] if out else "unknown"
        except (OSError, subprocess.SubprocessError):
            info["gpu"] = "unknown (no nvidia-smi)"
    return info


def write_json(path: str | None, payload: dict) -> None:
    if not path:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def bench(args, models: list[Model], seq: int, folders: str, device: str) -> list[dict]:
    start = time.monotonic()
    with open(os.path.join(folders, "manifest.json")) as f:
        manifest = json.load(f)
    trainer = os.path.join(args.build, "bin", "bmrt-trainer")
    gpu = machine(device)
    peak = args.peak_tflops * 1e12 if args.peak_tflops else peak_bf16(gpu.get("gpu", ""))
    no_torch = "not run (--no-torch)" if args.no_torch else torch_available()
    # Shares of the budget: per model bmc, eager, compile, by their guesses.
    budget = Budget(args.budget, [w for m in models for w in m.estimate_s])
    print(f"gpu_bench: {gpu}, bf16 peak {peak / 1e12 if peak else '?'} TFLOP/s, budget "
          f"{args.budget:.0f} s, warm-up {args.warmup} + {args.steps} timed steps, seq {seq}; "
          f"folders of {manifest.get('commit')} (weights {manifest.get('weights')})", flush=True)
    payload = {"machine": gpu, "peak_bf16_flops": peak, "seq": seq, "warmup": args.warmup,
               "steps": args.steps, "budget_s": args.budget, "folders_commit": manifest.get("commit"),
               "mfu_formula": "(6 N + 12 L h s) x tokens/s / dense bf16 peak; N without the "
                              "position table (PaLM arXiv:2204.02311 Appendix B)",
               "precision": {"bmc": "as the trainer reports it (under the plan's bf16 the CUDA "
                                    "backend's GEMMs take bf16 inputs; the rest is fp32)",
                             "torch": "bf16 autocast, fp32 weights, fused AdamW"},
               "models": []}
    results: list[dict] = []

    def save(m: Model, *sides) -> None:
        """The JSON as far as the run got: `m`'s sides so far."""
        payload["models"] = results + [combine(m, seq, peak, *sides)]
        payload["elapsed_s"] = time.monotonic() - start
        write_json(args.json, payload)

    for m in models:
        if m.name not in manifest["models"]:
            print(f"gpu_bench: {m.name} is not in {folders}", flush=True)
            continue
        share = budget.next_share()
        print(f"-- {m.name}: bmc ({share:.0f} s)", flush=True)
        bmc = bmc_side(folders, manifest, m, trainer, device, args.warmup, args.steps, share,
                       threads=args.threads)
        print(f"   {summary_line(bmc)}", flush=True)
        save(m, bmc, None, None)
        share = budget.next_share()
        if no_torch:
            eager = compiled = {"error": no_torch}
            budget.next_share()
        else:
            print(f"-- {m.name}: torch eager ({share:.0f} s)", flush=True)
            eager = run_torch(m, seq, "eager", list(m.micro_batches), args.warmup, args.steps,
                              share, device)
            print(f"   {summary_line(eager)}", flush=True)
            save(m, bmc, eager, None)
            share = budget.next_share()
            if device != "cuda":
                compiled = {"error": "torch.compile measured on CUDA only"}
            else:
                print(f"-- {m.name}: torch.compile ({share:.0f} s)", flush=True)
                start_at = [b for b in m.micro_batches
                            if not eager.get("micro_batch") or b <= eager["micro_batch"]]
                compiled = run_torch(m, seq, "compile", start_at, args.warmup, args.steps,
                                     share, device)
                print(f"   {summary_line(compiled)}", flush=True)
        save(m, bmc, eager, compiled)
        results.append(payload["models"][-1])
    print()
    for line in table_lines(results):
        print(line)
    print(f"\ngpu_bench: done in {time.monotonic() - start:.0f} s"
          + (f"; {args.json}" if args.json else ""), flush=True)
    return results


def summary_line(side: dict) -> str:
    if side.get("error"):
        return f"error: {side['error']}"
    tries = ", ".join(f"mb {t['micro_batch']}: {t['result']}" for t in side.get("tries", []))
    return (f"micro-batch {side['micro_batch']}: median {side['median_s'] * 1e3:.1f} ms of "
            f"{side['timed_steps']} steps" + (f" (before: {tries})" if tries else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepare", metavar="DIR", help="compile the folders into DIR (here)")
    parser.add_argument("--keep-weights", action="store_true",
                        help="--prepare without --weights-at-load: params.safetensors stays "
                             "(a local test; too large to travel)")
    parser.add_argument("--drop-weights", action="store_true",
                        help="--prepare without --weights-at-load: delete params.safetensors "
                             "(tests the compile path and the size; the folders cannot run)")
    parser.add_argument("--smoke", action="store_true",
                        help="the whole plumbing on the CPU: the small model, seq 64, 2 steps")
    parser.add_argument("--folders", default=os.environ.get("BMC_GPU_BENCH_DIR")
                        or (os.path.join(os.path.dirname(os.environ["BMC_GPU_MODELS"]), "bench")
                            if os.environ.get("BMC_GPU_MODELS") else os.path.join(ROOT, ".gpu", "bench")),
                        help="the prepared folders (default .gpu/bench)")
    parser.add_argument("--build", default=os.environ.get("BMC_BUILD_DIR", os.path.join(ROOT, "build")),
                        help="the build whose bin/bmrt-trainer runs bmc's side")
    parser.add_argument("--models", default="gpt2-small,gpt2-medium")
    parser.add_argument("--budget", type=float, default=180.0, help="seconds for everything")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5, help="timed steps")
    parser.add_argument("--peak-tflops", type=float, default=0.0,
                        help="the bf16 peak for MFU (default: by the GPU's name)")
    parser.add_argument("--threads", type=int, default=0, help="bmc's --threads (CPU runs)")
    parser.add_argument("--no-torch", action="store_true", help="bmc's side only")
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--cluster", default="dgx-h100-80g", help="--prepare: the plan's cluster")
    # The PyTorch worker (run_torch starts it).
    parser.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--variant", help=argparse.SUPPRESS)
    parser.add_argument("--micro-batches", help=argparse.SUPPRESS)
    parser.add_argument("--seq", type=int, default=SEQ, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=60.0, help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cuda", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.torch_worker:
        torch_worker(args)
        return
    bmc = os.environ.get("BMC") or os.path.join(ROOT, "build", "bin", "bmc")
    if args.smoke:
        args.warmup, args.steps = 1, 1
        with tempfile.TemporaryDirectory() as work:
            prepare(work, [SMOKE], SMOKE_SEQ, bmc, args.cluster, keep_weights=True, device="cpu")
            bench(args, [SMOKE], SMOKE_SEQ, work, device="cpu")
        return
    models = [MODELS[n] for n in args.models.split(",")]
    if args.prepare:
        prepare(args.prepare, models, SEQ, bmc, args.cluster, args.keep_weights, device="cuda",
                drop_weights=args.drop_weights)
        return
    if not os.path.exists(os.path.join(args.folders, "manifest.json")):
        sys.exit(f"gpu_bench: no prepared folders in {args.folders}: run "
                 f"`python3 bench/gpu_bench.py --prepare {args.folders}` where bmc is built "
                 f"(scripts/gpu-pack does)")
    bench(args, models, SEQ, args.folders, device="cuda")


if __name__ == "__main__":
    main()
