#!/usr/bin/env python3
"""One training step of GPT-2 small (124M) compiled by `bmc compile` against
PyTorch eager on the CPU, same batch, sequence, threads and optimizer.

Ours: OUT/trainer --steps W+N --log (the trainer's own step time: feeding the
batch, the step program, the global-norm clipping and AdamW), median of the
last N steps. PyTorch: a GPT-2 written here (transformers' GPT2LMHeadModel in
its default configuration: 12 layers, hidden 768, 12 heads, vocabulary 50257,
tied embedding, tanh GELU, scaled_dot_product_attention as transformers uses
by default; --attention math for the explicit softmax that the exported ONNX
graph, and so our step, computes), forward + backward + clip_grad_norm_(1.0) +
AdamW (lr 3e-4, weight decay 0.01, PyTorch's default implementation), median
of N steps after W. Both run at each thread count side by side, and the script
prints the ratio ours/PyTorch (the goal: <= 1, at least as fast) and a per-op
profile of our step (bmrt-step-timer --profile: instructions one at a time,
summed by op).

PyTorch is installed for this benchmark only, in its own venv
(bench/.venv-torch, created on first use from PyPI: PyPI's Linux wheel is the
CUDA build, several GB with its libraries; it runs on the CPU here).

  .venv/bin/python bench/train_step_bench.py [--threads 1 2] [--runs 3]
      [--warmup 1] [--attention sdpa|math] [--torch-profile]

Needs build/bin/bmc and build/bin/bmrt-step-timer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402  (numpy only: both venvs have it)

TORCH_VENV = os.path.join(HERE, ".venv-torch")
TORCH_PYTHON = os.path.join(TORCH_VENV, "bin", "python")

# The model and its compile: the same as bench/forward_bench.py's GPT-2.
MODEL = "hf-gpt2-124m"
BATCH, SEQ = 4, 256
COMPILE_OPTIONS = ["--global-batch", str(BATCH), "--seq", str(SEQ), "--init", "random"]
GPT2_SMALL = dict(layers=12, hidden=768, heads=12, vocab=50257, positions=1024)

# Instructions and ops listed from our profile.
PROFILE_ROWS = 12


#===------------------------------------------------------------------------===#
# The PyTorch side: runs in bench/.venv-torch as `--torch-worker`.
#===------------------------------------------------------------------------===#

def torch_worker(args) -> None:
    """Times PyTorch's GPT-2 steps; prints one JSON object."""
    import time

    import torch
    import torch.nn.functional as F
    from torch import nn

    torch.set_num_threads(args.threads[0])  # the driver passes one count
    torch.manual_seed(1)

    class Block(nn.Module):
        def __init__(self, hidden: int, heads: int):
            super().__init__()
            self.heads = heads
            self.ln_1 = nn.LayerNorm(hidden)
            self.c_attn = nn.Linear(hidden, 3 * hidden)
            self.c_proj = nn.Linear(hidden, hidden)
            self.ln_2 = nn.LayerNorm(hidden)
            self.c_fc = nn.Linear(hidden, 4 * hidden)
            self.mlp_proj = nn.Linear(4 * hidden, hidden)

        def attention(self, x):
            b, t, c = x.shape
            q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                       for y in self.c_attn(x).split(c, dim=2))
            if args.attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = (q @ k.transpose(-2, -1)) / (k.shape[-1] ** 0.5)
                causal = torch.ones(t, t, dtype=torch.bool).tril()
                y = scores.masked_fill(~causal, float("-inf")).softmax(-1) @ v
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

        def forward(self, x):
            x = x + self.attention(self.ln_1(x))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self, layers, hidden, heads, vocab, positions):
            super().__init__()
            self.wte = nn.Embedding(vocab, hidden)
            self.wpe = nn.Embedding(positions, hidden)
            self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, ids, labels):
            x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
            for block in self.blocks:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied, as GPT-2
            return F.cross_entropy(logits.flatten(0, 1), labels.flatten())

    model = GPT2(**GPT2_SMALL)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    ids = torch.randint(0, GPT2_SMALL["vocab"], (BATCH, SEQ))
    labels = torch.randint(0, GPT2_SMALL["vocab"], (BATCH, SEQ))

    def step():
        loss = model(ids, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.runs):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    result = {"times_s": times, "torch": torch.__version__,
              "parameters": sum(p.numel() for p in model.parameters())}
    if args.torch_profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            step()
        result["profile"] = prof.key_averages().table(sort_by="self_cpu_time_total",
                                                      row_limit=PROFILE_ROWS)
    print(json.dumps(result))


#===------------------------------------------------------------------------===#
# The driver: runs in the project venv.
#===------------------------------------------------------------------------===#

def ensure_torch_venv() -> None:
    """bench/.venv-torch with torch from PyPI, made on first use."""
    if os.path.exists(TORCH_PYTHON):
        return
    print(f"creating {TORCH_VENV} with torch from PyPI (several GB, once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", TORCH_VENV], check=True)
    subprocess.run([TORCH_PYTHON, "-m", "pip", "install", "--quiet", "torch", "numpy"],
                   check=True)


def time_ours(compiled: str, threads: int, warmup: int, runs: int) -> list[float]:
    """The trainer's logged step times of its last `runs` steps."""
    log = os.path.join(compiled, f"bench-{threads}t.jsonl")
    if os.path.exists(log):
        os.remove(log)
    benchlib.run([os.path.join(compiled, "trainer"), "--steps", str(warmup + runs),
                  "--threads", str(threads), "--log", log, "--quiet"],
                 env=benchlib.threads_env(threads))
    with open(log) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    return [s["step_time_s"] for s in steps[-runs:]]


def time_torch(threads: int, args) -> dict:
    command = [TORCH_PYTHON, os.path.abspath(__file__), "--torch-worker",
               "--threads", str(threads), "--warmup", str(args.warmup),
               "--runs", str(args.runs), "--attention", args.attention]
    if args.torch_profile and threads == max(args.threads):
        command.append("--torch-profile")
    env = benchlib.threads_env(threads)
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CUDA wheel stays on the CPU
    return json.loads(benchlib.run(command, env=env))


def fmt_times(times: list[float]) -> str:
    return "[" + ", ".join(f"{t:.3f}" for t in times) + "] s"


def print_profile(timed: dict, step_seconds: float) -> None:
    profile = timed["profile"]
    print(f"\nour step at {timed['threads']} threads, instruction by instruction: "
          f"{profile['seconds']:.3f} s (the trainer's step above: {step_seconds:.3f} s; "
          f"OpenBLAS core {timed['openblas_core']})")
    for row in profile["by_phase"]:
        print(f"  {row['phase']:<10} {row['seconds']:8.3f} s  {100 * row['share']:5.1f}%  "
              f"({row['instructions']} instructions)")
    print("by op:")
    for row in profile["by_op"][:PROFILE_ROWS]:
        print(f"  {row['op']:<28} {row['seconds']:8.3f} s  {100 * row['share']:5.1f}%  "
              f"({row['instructions']} instructions)")
    print("slowest instructions:")
    for row in profile["slowest"][:PROFILE_ROWS]:
        print(f"  {row['seconds']:8.3f} s  #{row['index']:<5} {row['instruction']}")


def compare_steps(compiled: str, args) -> dict[int, float]:
    """Ours then PyTorch at each thread count; prints the table and returns
    our median step time per thread count."""
    rows, ours_by_threads, torch_version = [], {}, ""
    for threads in args.threads:
        ours_times = time_ours(compiled, threads, args.warmup, args.runs)
        theirs = time_torch(threads, args)
        ours, torch_seconds = benchlib.median(ours_times), benchlib.median(theirs["times_s"])
        torch_version = theirs["torch"]
        ours_by_threads[threads] = ours
        # The best steps too: on a shared machine a burst of load slows
        # some steps of one side only.
        best = min(ours_times) / min(theirs["times_s"])
        rows.append([str(threads), f"{ours:.3f}", f"{torch_seconds:.3f}",
                     f"{ours / torch_seconds:.2f}", f"{best:.2f}",
                     "ok" if ours <= torch_seconds else "MISSED"])
        print(f"{threads} thread(s): ours {fmt_times(ours_times)}, "
              f"PyTorch {fmt_times(theirs['times_s'])}", flush=True)
        if "profile" in theirs:
            print(f"PyTorch's profile of one step at {threads} threads:\n"
                  f"{theirs['profile']}")
    print(f"\nGPT-2 124M training step, batch {BATCH} x {SEQ} tokens, AdamW, median of "
          f"{args.runs} steps after {args.warmup} (PyTorch {torch_version}, "
          f"attention {args.attention}):")
    benchlib.print_table(["threads", "ours s", "PyTorch s", "ours/PyTorch",
                          "best/best", "goal <= 1"], rows)
    return ours_by_threads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--attention", choices=["sdpa", "math"], default="sdpa")
    parser.add_argument("--torch-profile", action="store_true",
                        help="also print PyTorch's own op profile of one step")
    parser.add_argument("--no-profile", action="store_true",
                        help="skip the per-op profile of our step")
    parser.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_worker:
        torch_worker(args)
        return

    ensure_torch_venv()
    print(benchlib.machine_note(), flush=True)
    compiled = benchlib.compile_model(MODEL, "gpt2-124m-train", *COMPILE_OPTIONS)["dir"]
    ours_by_threads = compare_steps(compiled, args)
    if not args.no_profile:
        threads = max(args.threads)
        timed = benchlib.step_timer(compiled, threads, "--program", "step",
                                    "--optimizer", "--profile", "--warmup", "1",
                                    "--runs", "1")
        print_profile(timed, ours_by_threads[threads])


if __name__ == "__main__":
    main()
