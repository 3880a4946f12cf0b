"""Helpers shared by bench/forward_bench.py and bench/train_step_bench.py:
where the build's tools are, compiling a model with `bmc compile`, a numpy
safetensors reader and writer, the step programs' slot table, running
bmrt-step-timer, and printing tables.

Benchmarks measure, tests assert behaviour (DESIGN.md section 7): nothing here
fails on a slow number; the scripts print ratios measured side by side in one
run.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import struct
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "bin")
MODELS = os.path.join(ROOT, "models", "onnx")
# Compiled models and ONNX copies with weights: large, ignored by git.
WORK = os.path.join(ROOT, "build", "bench-models")

_DTYPES = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "BOOL": np.bool_}


def tool(name: str) -> str:
    path = os.path.join(BIN, name)
    if not os.path.exists(path):
        sys.exit(f"{path} is missing: ninja -C build {name}")
    return path


def threads_env(threads: int) -> dict[str, str]:
    """The environment of a process limited to `threads` (OpenMP, OpenBLAS,
    MKL): the pools are sized at start-up, before any setThreads call."""
    count = str(threads)
    return dict(os.environ, OMP_NUM_THREADS=count, OPENBLAS_NUM_THREADS=count,
                MKL_NUM_THREADS=count)


def run(args: list[str], env: dict[str, str] | None = None) -> str:
    result = subprocess.run(args, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({result.returncode}):\n"
                 f"{result.stdout}\n{result.stderr}")
    return result.stdout


def write_safetensors(path: str, tensors: dict[str, np.ndarray]) -> None:
    """The safetensors layout: u64 header length, JSON header, raw data."""
    header, blobs, offset = {}, [], 0
    names = {np.dtype(v): k for k, v in _DTYPES.items()}
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": names[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    base = 8 + length
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(raw[base + begin:base + end],
                                  dtype=_DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


_SLOT = re.compile(r'^slot %(\d+) (\w+) (\w+)\[([\d,]*)\](?: "([^"]*)")?')
_PROGRAM_DTYPES = {"f32": np.float32, "i64": np.int64, "i32": np.int32, "i1": np.bool_}


def program_slots(path: str) -> list[dict]:
    """The slots of a step program file (kind, dtype, shape, name)."""
    slots = []
    with open(path) as f:
        for line in f:
            match = _SLOT.match(line)
            if match:
                _, kind, dtype, dims, name = match.groups()
                slots.append({"kind": kind, "dtype": _PROGRAM_DTYPES[dtype],
                              "shape": [int(d) for d in dims.split(",") if d],
                              "name": name})
    return slots


def compile_model(model: str, out: str, *options: str) -> dict:
    """`bmc compile MODEL -o OUT OPTIONS` (into build/bench-models/OUT); returns
    trainer.json with the folder under "dir"."""
    folder = os.path.join(WORK, out)
    run([tool("bmc"), "compile", os.path.join(MODELS, f"{model}.onnx"), "-o", folder,
         *options])
    with open(os.path.join(folder, "trainer.json")) as f:
        config = json.load(f)
    config["dir"] = folder
    return config


def step_timer(folder: str, threads: int, *options: str) -> dict:
    """Runs bmrt-step-timer on a compiled folder at `threads` threads."""
    out = run([tool("bmrt-step-timer"), folder, "--threads", str(threads), *options],
              env=threads_env(threads))
    return json.loads(out)


def machine_note() -> str:
    """The load on this shared machine before the benchmark starts, and the
    settings of the environment that change every number here."""
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    settings = [f"{k}={os.environ[k]}" for k in ("OPENBLAS_CORETYPE", "OMP_WAIT_POLICY")
                if k in os.environ]
    return (f"machine: {os.cpu_count()} cores, load average {load}; "
            f"environment: {' '.join(settings) or 'no OPENBLAS_CORETYPE, OMP_WAIT_POLICY'}")


def median(values: list[float]) -> float:
    return statistics.median(values)


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(cell).rjust(w) if i else str(cell).ljust(w)
                        for i, (cell, w) in enumerate(zip(row, widths))))
