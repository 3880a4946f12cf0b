#!/usr/bin/env python3
"""Writes the committed seed inputs of the fuzz targets (fuzz/corpus/TARGET).

    .venv/bin/python fuzz/make_seeds.py [--bmc build/bin/bmc]

Seeds are small valid inputs (and a few near misses) from which libFuzzer
mutates: graph-only copies of the tiny zoo models (their weights become
external data, so an input is kilobytes, not the 600 KB of the embedded
weights), cluster files, safetensors files, a checkpoint manifest that
matches the fuzz target's tensor files, token files, and, with --bmc, a plan
and a step program written by bmc itself. Inputs of fixed crashes
(crash-*) live beside them and are never rewritten. scripts/fuzz adds the
ONNX backend node tests and tests/data at run time.
"""
import argparse
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
from safetensors_np import write_safetensors  # noqa: E402


def corpus(target):
    path = os.path.join(HERE, "corpus", target)
    os.makedirs(path, exist_ok=True)
    return path


def write(target, name, data):
    with open(os.path.join(corpus(target), name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def graph_only(model):
    """Moves every float initializer's data out of the model (external data
    that is absent, as `bmc plan` accepts)."""
    for tensor in model.graph.initializer:
        if tensor.data_type != onnx.TensorProto.FLOAT or len(tensor.raw_data) <= 64:
            continue
        tensor.ClearField("raw_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
        entry = tensor.external_data.add()
        entry.key, entry.value = "location", "weights.bin"
    return model


def onnx_seeds():
    for path in sorted(glob.glob(os.path.join(ROOT, "models", "onnx", "*-tiny.onnx"))):
        model = graph_only(onnx.load(path, load_external_data=False))
        write("onnx", os.path.basename(path), model.SerializeToString())


CLUSTER = {"name": "seed", "gpu": "A100-SXM4-80GB", "gpus_per_node": 8,
           "memory_gib": 80, "hbm_gbps": 2039, "peak_tflops_16bit": 312,
           "peak_tflops_fp32": 19.5, "intra_node_gbps": 240, "inter_node_gbps": 25,
           "intra_node_latency_us": 5, "inter_node_latency_us": 10,
           "gemm_efficiency": 0.8, "memory_efficiency": 0.9, "max_nodes": 4,
           "reserved_gib": 2, "peak_tflops_bf16": 312}


# What `bmc calibrate` adds (issue 15, section B): small curves of each kind.
CALIBRATION = {
    "precision": "fp32", "grad_reduce_overlap": 0.15,
    "calibration": {"machine": "seed (cpu)", "date": "2026-11-23T18:00:00Z", "ranks": 2,
                    "threads_per_rank": 1, "versions": {"openblas": "0.3.21", "mpi": "Open MPI"}},
    "gemm_tflops": [[m, n, k, round(0.001 * (m + n + k) / 16, 6)]
                    for m in (16, 256) for n in (16, 256) for k in (16, 256)],
    "memory_kernel_gbps": {"data_movement": 4.1, "elementwise": 3.2, "normalization": 2.5,
                           "optimizer": 6.0, "reduction": 5.0, "softmax": 1.1},
    "collectives": [{"op": op, "link": "intra_node", "ranks": 2, "bytes": 4 ** i,
                     "time_us": round(2.0 + 4 ** i / 4e3, 3), "busbw_gbps": 4.0}
                    for op in ("all_reduce", "send_recv") for i in (1, 5, 9)],
}


def calibrated_cluster_seeds():
    write("cluster-json", "calibrated.json", json.dumps({**CLUSTER, **CALIBRATION}, indent=1))
    yaml = "".join(f"{k}: {v}\n" for k, v in CLUSTER.items())
    yaml += "precision: fp32\ngrad_reduce_overlap: 0.15\ncalibration:\n"
    yaml += "".join(f"  {k}: {json.dumps(v)}\n" for k, v in CALIBRATION["calibration"].items())
    yaml += "gemm_tflops:\n" + "".join(f"  - {row}\n" for row in CALIBRATION["gemm_tflops"])
    yaml += "memory_kernel_gbps:\n" + "".join(
        f"  {k}: {v}\n" for k, v in CALIBRATION["memory_kernel_gbps"].items())
    yaml += "collectives:\n" + "".join(
        "  - {" + ", ".join(f"{k}: {v}" for k, v in entry.items()) + "}\n"
        for entry in CALIBRATION["collectives"])
    write("cluster-yaml", "calibrated.yaml", "# a calibrated cluster file\n" + yaml)


def cluster_seeds():
    calibrated_cluster_seeds()
    write("cluster-json", "full.json", json.dumps(CLUSTER, indent=1))
    required = {k: CLUSTER[k] for k in ("gpus_per_node", "memory_gib", "hbm_gbps",
                                        "peak_tflops_16bit", "peak_tflops_fp32",
                                        "intra_node_gbps", "inter_node_gbps")}
    write("cluster-json", "required.json", json.dumps(required))
    yaml = "".join(f"{k}: {v}\n" for k, v in CLUSTER.items())
    write("cluster-yaml", "full.yaml", "# a full cluster file\n" + yaml)
    write("cluster-yaml", "flow.yaml", "{" + ", ".join(f"{k}: {v}" for k, v in required.items()) + "}\n")


def safetensors_seeds(tmp):
    files = {
        "one.safetensors": ({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, None),
        "mixed.safetensors": ({"a": np.zeros((2,), np.int64), "b": np.ones((1, 2), np.int32),
                               "c": np.array([True, False]), "s": np.float32(3.0)},
                              {"format": "pt"}),
        "empty.safetensors": ({"e": np.zeros((0, 4), np.float32)}, None),
    }
    for name, (tensors, metadata) in files.items():
        path = os.path.join(tmp, name)
        write_safetensors(path, tensors, metadata)
        with open(path, "rb") as f:
            write("safetensors", name, f.read())


def bmrt_safetensors(tensors):
    """The bytes bmrt's writer gives `tensors` (name -> float32 values, in
    order): compact JSON with sorted keys, padded to 8 bytes, unlike
    safetensors_np's header."""
    header, offset, data = {}, 0, b""
    for name, values in tensors.items():
        raw = np.asarray(values, "<f4").tobytes()
        header[name] = {"data_offsets": [offset, offset + len(raw)], "dtype": "F32",
                        "shape": [len(values)]}
        offset += len(raw)
        data += raw
    text = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def manifest_seed():
    tensors = [{"name": "w", "kind": "parameter", "dtype": "f32", "shape": [2]}]
    for state in ("exp_avg", "exp_avg_sq"):
        tensors.append({"name": f"{state}.w", "kind": "optimizer_state",
                        "dtype": "f32", "shape": [2]})
    # The fuzz target's two files, whose sizes and CRCs the manifest records
    # so that mutations reach the tensor checks behind the CRC check.
    files = {"model.safetensors": bmrt_safetensors({"w": [1.0, 2.0]}),
             "optimizer.safetensors": bmrt_safetensors(
                 {"exp_avg.w": [1.0, 2.0], "exp_avg_sq.w": [1.0, 2.0]})}
    manifest = {"format": 2, "model": "seed", "model_hash": "0123abcd",
                "model_path": "model.onnx", "plan": {"dp": 1, "tp": 1, "pp": 1},
                "step": 3, "data": {"position": 12, "rng_state": "0x00000000000000ff"},
                "optimizer": {"name": "adamw", "config": {"lr": 0.001}},
                "tensors": tensors,
                "files": {name: {"bytes": len(data), "crc32": zlib.crc32(data)}
                          for name, data in files.items()}}
    write("checkpoint-manifest", "manifest.json", json.dumps(manifest, indent=1))


def token_seeds():
    u16 = struct.pack("<8H", 1, 2, 3, 50256, 0, 7, 65535, 9)
    i32 = struct.pack("<4i", 5, -1, 50257, 3)
    write("token-file", "u16-checked", bytes([0x06]) + u16)
    write("token-file", "u16", bytes([0x00]) + u16)
    write("token-file", "i32-checked", bytes([0x03]) + i32)
    write("token-file", "i32-odd-size", bytes([0x01]) + i32[:7])


def bmc_seeds(bmc, tmp):
    model = os.path.join(ROOT, "tests", "data", "import", "mlp.onnx")
    plan = os.path.join(tmp, "plan.json")
    subprocess.run([bmc, "plan", model, "--gpus", "2", "--json", "-o", plan], check=True,
                   stdout=subprocess.DEVNULL)
    shutil.copy(plan, os.path.join(corpus("plan"), "mlp-plan.json"))
    out = os.path.join(tmp, "compiled")
    subprocess.run([bmc, "compile", model, "--gpus", "1", "--init", "random", "-o", out],
                   check=True, stdout=subprocess.DEVNULL)
    for path in sorted(glob.glob(os.path.join(out, "*.bmp"))):
        shutil.copy(path, os.path.join(corpus("program"), "mlp-" + os.path.basename(path)))
    shutil.copy(os.path.join(out, "params.safetensors"),
                os.path.join(corpus("safetensors"), "mlp-params.safetensors"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bmc", help="bmc binary, for the plan and program seeds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        onnx_seeds()
        cluster_seeds()
        safetensors_seeds(tmp)
        manifest_seed()
        token_seeds()
        if args.bmc:
            bmc_seeds(args.bmc, tmp)


if __name__ == "__main__":
    main()
