"""Helpers for the compile-and-train tests: the build's tools, a numpy
safetensors reader and writer, and compiled models cached per session."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from safetensors_np import read_safetensors, write_safetensors  # noqa: E402,F401

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "bin")
MODELS = os.path.join(ROOT, "models", "onnx")

# One thread per process: the tests run beside others on two cores, and a
# fixed thread count keeps reductions in one order.
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")



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


def compile_model(model: str, out: str, *extra: str) -> dict:
    run([tool("bmc"), "compile", os.path.join(MODELS, f"{model}.onnx"), "-o", out, *extra])
    with open(os.path.join(out, "trainer.json")) as f:
        return json.load(f)


def latest(ckpt):
    """The version of checkpoint folder `ckpt` that its pointer names: the
    folder of manifest.json and the tensor files (runtime/checkpoint/
    Checkpoint.h). A str for a str, a Path for a Path."""
    with open(os.path.join(ckpt, "latest")) as f:
        name = f.read().strip()
    return ckpt / name if isinstance(ckpt, pathlib.Path) else os.path.join(ckpt, name)


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
