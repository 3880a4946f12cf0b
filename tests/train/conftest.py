"""Helpers for the compile-and-train tests: the build's tools, a numpy
safetensors reader and writer, and compiled models cached per session."""

from __future__ import annotations

import json
import os
import struct
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "bin")
MODELS = os.path.join(ROOT, "models", "onnx")

# One thread per process: the tests run beside others on two cores, and a
# fixed thread count keeps reductions in one order.
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

_DTYPES = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "BOOL": np.bool_}


def tool(name: str) -> str:
    path = os.path.join(BIN, name)
    assert os.path.exists(path), f"{path} is missing: build the project first"
    return path


def run(args: list[str], check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, env=ENV, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


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
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


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


def compile_model(model: str, out: str, *extra: str) -> dict:
    run([tool("bmc"), "compile", os.path.join(MODELS, f"{model}.onnx"), "-o", out, *extra])
    with open(os.path.join(out, "trainer.json")) as f:
        return json.load(f)


def read_log(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@pytest.fixture(scope="session")
def compiled(tmp_path_factory):
    """compiled(model, *flags) -> folder, compiling each combination once."""
    cache: dict[tuple, str] = {}

    def get(model: str, *flags: str) -> str:
        key = (model, *flags)
        if key not in cache:
            out = str(tmp_path_factory.mktemp(model.replace(".", "_")))
            compile_model(model, out, *flags)
            cache[key] = out
        return cache[key]

    return get
