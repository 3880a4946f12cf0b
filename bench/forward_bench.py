#!/usr/bin/env python3
"""The compiled forward pass against onnxruntime on the same model, batch,
weights and thread count.

For each model: `bmc compile` it (build/bench-models/), time OUT/forward.bmp
with bmrt-step-timer, then the ONNX model in onnxruntime, side by side at each
thread count (ORT's intra_op_num_threads; our OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS), and print the median seconds of both and the ratio
ours/onnxruntime (below 1: we are faster).

onnxruntime runs a copy of the ONNX file whose initializers are the compiled
OUT/params.safetensors (for a graph-only model, the --init random weights),
and one forward of each on the same ids checks that both compute the same
logits before anything is timed.

  .venv/bin/python bench/forward_bench.py [--threads 1 2] [--runs 3] [--warmup 1]

Needs build/bin/bmc and build/bin/bmrt-step-timer, bmrt-forward
(ninja -C build bmc bmrt-step-timer bmrt-forward) and the project venv.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

# (label, ONNX model, bmc compile options, runs per --runs). GPT-2 small
# (124M, 12 x 768, vocabulary 50257; transformers' openai-community/gpt2
# config) is graph-only: random weights. 4 sequences of 256 tokens keep one
# training step of it within a few seconds and a few GB on this machine. The
# tiny model's forward takes about a millisecond: it runs 100 times as often.
MODELS = [
    ("gpt3-tiny", "gpt3-tiny", ["--global-batch", "8"], 100),
    ("gpt2-124m", "hf-gpt2-124m",
     ["--global-batch", "4", "--seq", "256", "--init", "random"], 1),
]

# Logits of ours and onnxruntime agree to this (fp32, different summation
# orders over K = 768 and 3072).
LOGITS_TOLERANCE = 1e-3


def onnx_with_weights(model: str, compiled: str) -> str:
    """A copy of models/onnx/MODEL.onnx whose initializers are the compiled
    parameters (cast to the initializer's type: GPT-2's boolean mask buffers),
    with its weights as external data beside it."""
    params = benchlib.read_safetensors(os.path.join(compiled, "params.safetensors"))
    proto = onnx.load(os.path.join(benchlib.MODELS, f"{model}.onnx"),
                      load_external_data=False)
    for i, init in enumerate(proto.graph.initializer):
        if init.name in params:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(init.data_type)
            value = params[init.name].astype(dtype).reshape(tuple(init.dims))
            proto.graph.initializer[i].CopyFrom(numpy_helper.from_array(value, init.name))
    path = os.path.join(compiled, "with-weights.onnx")
    for stale in (path, path + ".data"):
        if os.path.exists(stale):
            os.remove(stale)
    onnx.save_model(proto, path, save_as_external_data=True,
                    all_tensors_to_one_file=True,
                    location="with-weights.onnx.data", size_threshold=1024)
    return path


def input_ids(compiled: str, seed: int = 1) -> dict[str, np.ndarray]:
    """Ids for every integer input of the forward program, below the
    vocabulary (the first dim of the embedding the model gathers from is at
    least that)."""
    slots = benchlib.program_slots(os.path.join(compiled, "forward.bmp"))
    vocab = min(s["shape"][0] for s in slots
                if s["kind"] == "param" and len(s["shape"]) == 2)
    rng = np.random.default_rng(seed)
    feeds = {}
    for s in slots:
        if s["kind"] != "input":
            continue
        if s["dtype"] != np.int64:
            sys.exit(f"input '{s['name']}' is {s['dtype'].__name__}; "
                     "the forward benchmark feeds token ids")
        feeds[s["name"]] = rng.integers(0, vocab, size=s["shape"], dtype=np.int64)
    return feeds


def ort_session(path: str, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def check_same_logits(compiled: str, session: ort.InferenceSession,
                      feeds: dict[str, np.ndarray]) -> float:
    """Runs both once on the same ids; returns max |ours - onnxruntime|."""
    inputs = os.path.join(compiled, "ids.safetensors")
    outputs = os.path.join(compiled, "logits.safetensors")
    benchlib.write_safetensors(inputs, feeds)
    benchlib.run([benchlib.tool("bmrt-forward"), compiled, inputs, outputs],
                 env=benchlib.threads_env(2))
    ours = benchlib.read_safetensors(outputs)["output0"]
    theirs = session.run(None, feeds)[0]
    error = float(np.max(np.abs(ours - theirs)))
    if not error <= LOGITS_TOLERANCE:
        sys.exit(f"{compiled}: our logits differ from onnxruntime's by {error:.3g}; "
                 "not timing different computations")
    return error


def time_ort(session: ort.InferenceSession, feeds: dict[str, np.ndarray],
             warmup: int, runs: int) -> list[float]:
    for _ in range(warmup):
        session.run(None, feeds)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return times


def bench_model(label: str, model: str, options: list[str], scale: int,
                args) -> list[list[str]]:
    config = benchlib.compile_model(model, f"{label}-forward", *options)
    compiled = config["dir"]
    feeds = input_ids(compiled)
    weights = onnx_with_weights(model, compiled)
    shape = "x".join(str(d) for d in next(iter(feeds.values())).shape)
    error = check_same_logits(compiled, ort_session(weights, 2), feeds)
    print(f"{label}: ids {shape}, max |ours - onnxruntime| logits {error:.2e}",
          flush=True)
    rows, warmup, runs = [], args.warmup * scale, args.runs * scale
    for threads in args.threads:
        timed = benchlib.step_timer(compiled, threads, "--program", "forward",
                                    "--warmup", str(warmup), "--runs", str(runs))
        ours = timed["median_s"]
        ort_times = time_ort(ort_session(weights, threads), feeds, warmup, runs)
        theirs = benchlib.median(ort_times)
        # The best runs too: on a shared machine a burst of load slows some
        # runs of one side only.
        best = timed["min_s"] / min(ort_times)
        rows.append([label, shape, str(threads), f"{ours:.4f}", f"{theirs:.4f}",
                     f"{ours / theirs:.2f}", f"{best:.2f}"])
        print(f"  {threads} thread(s): ours {ours:.4f} s (OpenBLAS core "
              f"{timed['openblas_core']}), onnxruntime {theirs:.4f} s", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=[m[0] for m in MODELS],
                        choices=[m[0] for m in MODELS])
    args = parser.parse_args()
    rows = []
    print(benchlib.machine_note())
    for label, model, options, scale in MODELS:
        if label in args.models:
            rows += bench_model(label, model, options, scale, args)
    print(f"\nforward pass, median of {args.runs} runs after {args.warmup} warm-up "
          f"(x100 for gpt3-tiny; onnxruntime {ort.__version__}):")
    benchlib.print_table(["model", "ids", "threads", "ours s", "onnxruntime s",
                          "ours/ort", "best/best"], rows)


if __name__ == "__main__":
    main()
