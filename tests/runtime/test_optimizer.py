"""The trainer's optimizer step against an independent numpy reference.

build/bin/bmrt-optimizer-check (runtime/trainer/test/OptimizerCheck.cpp)
runs a few optimizer steps exactly as the trainer takes them: the global
gradient norm (cpu::sumOfSquares), the clipping factor, the warm-up + cosine
learning rate (LrSchedule) and the AdamW, SGD-momentum, LAMB or LARS
kernels (the last two through LayerwiseUpdate, as the trainer). This file
feeds it parameters and per-step gradients and compares what comes back
with the same algorithm written here from the papers' formulas in float64:
AdamW (Loshchilov & Hutter 2019, decoupled weight decay, PyTorch's
torch.optim.AdamW), SGD with momentum as torch.optim.SGD, clipping as
torch.nn.utils.clip_grad_norm_, the schedule as Megatron-LM's cosine decay,
LAMB as Algorithm 2 of You et al. 2020 ("Large Batch Optimization for Deep
Learning: Training BERT in 76 minutes", phi the identity) and LARS as
Algorithm 1 of You, Gitman & Ginsburg 2017 ("Large Batch Training of
Convolutional Networks"), each tensor a layer; a ratio whose norms include
a zero is 1.

Inputs and outputs are safetensors files written and read by the code
below (from the format's description, not the C++ code), so the C++ reader
and writer are checked against an independent implementation too.

Needs only numpy and pytest: .venv/bin/python -m pytest tests/runtime
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from safetensors_np import read_safetensors, write_safetensors  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECKER = os.path.join(ROOT, "build", "bin", "bmrt-optimizer-check")

# The C++ side computes in float32, the reference in float64. Each float32
# operation rounds to a relative 2^-24 (6e-8); a step is ~15 operations per
# element and the test runs 6 steps, so the accumulated relative error
# stays below ~1e-6. rtol 1e-5 leaves a 10x margin; the absolute floor (a
# millionth of the array's largest magnitude) covers elements that pass
# near 0, where a relative bound means nothing. A wrong formula (coupled
# weight decay, missing bias correction, clipping off) moves results by
# 1e-3 or more: test_tolerance_separates_formulas checks that it fails.
RTOL = 1e-5
ATOL_FRACTION = 1e-6

def learning_rate(step: int, c: dict) -> float:
    """Linear warm-up to lr, then cosine decay to min_lr at the last step."""
    if step <= c["warmup"]:
        return c["lr"] * step / c["warmup"]
    progress = min(1.0, (step - c["warmup"]) / (c["steps"] - c["warmup"]))
    return c["min_lr"] + (c["lr"] - c["min_lr"]) * 0.5 * (1 + math.cos(math.pi * progress))


def clip_factor(norm: float, max_norm: float) -> float:
    """torch.nn.utils.clip_grad_norm_'s factor (0 turns clipping off)."""
    if max_norm <= 0 or norm <= max_norm:
        return 1.0
    return max_norm / (norm + 1e-6)


# Hyperparameters the C++ API holds as float32 (AdamWConfig, SgdConfig,
# LrSchedule). They are rounded the same way here: beta2 = 0.999 is really
# 0.99900001287 in float32, so 1 - beta2 differs from 0.001 by 1.3e-5
# relative, more than the rounding this test bounds.
FLOAT32_SETTINGS = ("lr", "min_lr", "beta1", "beta2", "epsilon", "weight_decay", "momentum",
                    "trust_coefficient")


def as_float32(c: dict) -> dict:
    return {k: float(np.float32(v)) if k in FLOAT32_SETTINGS else v for k, v in c.items()}


def reference(c: dict, params: dict, grads: list[dict], coupled_decay: bool = False):
    """Runs c["steps"] steps; returns the parameters, state, lrs and norms."""
    c = as_float32(c)
    p = {k: v.astype(np.float64) for k, v in params.items()}
    first = {k: np.zeros_like(v) for k, v in p.items()}
    second = {k: np.zeros_like(v) for k, v in p.items()}
    lrs, norms = [], []
    for t in range(1, c["steps"] + 1):
        g_raw = {k: grads[t - 1][k].astype(np.float64) for k in p}
        norm = math.sqrt(sum(float(np.sum(g * g)) for g in g_raw.values()))
        scale = clip_factor(norm, c["clip"])
        lr = learning_rate(t, c)
        lrs.append(lr)
        norms.append(norm)
        for k in p:
            g = g_raw[k] * scale
            if c["optimizer"] == "adamw":
                if coupled_decay:  # Adam with L2 regularisation: not AdamW
                    g = g + c["weight_decay"] * p[k]
                first[k] = c["beta1"] * first[k] + (1 - c["beta1"]) * g
                second[k] = c["beta2"] * second[k] + (1 - c["beta2"]) * g * g
                m_hat = first[k] / (1 - c["beta1"] ** t)
                v_hat = second[k] / (1 - c["beta2"] ** t)
                decay = 0.0 if coupled_decay else c["weight_decay"] * p[k]
                p[k] = p[k] - lr * (m_hat / (np.sqrt(v_hat) + c["epsilon"]) + decay)
            elif c["optimizer"] == "lamb":
                first[k] = c["beta1"] * first[k] + (1 - c["beta1"]) * g
                second[k] = c["beta2"] * second[k] + (1 - c["beta2"]) * g * g
                m_hat = first[k] / (1 - c["beta1"] ** t)
                v_hat = second[k] / (1 - c["beta2"] ** t)
                u = m_hat / (np.sqrt(v_hat) + c["epsilon"]) + c["weight_decay"] * p[k]
                w_norm, u_norm = np.linalg.norm(p[k]), np.linalg.norm(u)
                ratio = w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0
                p[k] = p[k] - lr * ratio * u
            elif c["optimizer"] == "lars":
                w_norm, g_norm = np.linalg.norm(p[k]), np.linalg.norm(g)
                local = (c["trust_coefficient"] * w_norm / (g_norm + c["weight_decay"] * w_norm)
                         if w_norm > 0 and g_norm > 0 else 1.0)
                first[k] = c["momentum"] * first[k] + lr * local * (g + c["weight_decay"] * p[k])
                p[k] = p[k] - first[k]
            else:
                g = g + c["weight_decay"] * p[k]
                first[k] = g if t == 1 else c["momentum"] * first[k] + g
                p[k] = p[k] - lr * first[k]
    state = {}
    for k in p:
        if c["optimizer"] in ("adamw", "lamb"):
            state[f"exp_avg.{k}"] = first[k]
            state[f"exp_avg_sq.{k}"] = second[k]
        else:
            state[f"momentum_buffer.{k}"] = first[k]
    return p, state, np.array(lrs), np.array(norms)


# --------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------

BASE = {
    "lr": 0.01,
    "min_lr": 0.001,
    "warmup": 2,
    "steps": 6,
    "beta1": 0.9,
    "beta2": 0.999,
    "epsilon": 1e-8,
    "momentum": 0.9,
}

CASES = {
    "adamw": dict(BASE, optimizer="adamw", weight_decay=0.1, clip=1.0),
    "adamw-no-clip": dict(BASE, optimizer="adamw", weight_decay=0.0, clip=0.0),
    "sgd": dict(BASE, optimizer="sgd", weight_decay=0.01, clip=1.0, lr=0.1, min_lr=0.01),
    "sgd-no-momentum": dict(BASE, optimizer="sgd", weight_decay=0.05, clip=2.0, momentum=0.0),
    "lamb": dict(BASE, optimizer="lamb", weight_decay=0.01, clip=1.0, epsilon=1e-6),
    "lamb-no-decay": dict(BASE, optimizer="lamb", weight_decay=0.0, clip=0.0, epsilon=1e-6),
    # lr 1 with the paper's trust coefficient: each tensor moves by about
    # 0.1% of its norm per step, far more than the tolerance.
    "lars": dict(BASE, optimizer="lars", weight_decay=5e-4, clip=1.0, lr=1.0, min_lr=0.1,
                 trust_coefficient=0.001),
    "lars-high-trust": dict(BASE, optimizer="lars", weight_decay=1e-4, clip=2.0, lr=1.0,
                            min_lr=0.1, trust_coefficient=0.02),
}

# Per-step gradient scales: the global norm crosses the clipping threshold
# both ways, so both branches of clipping are exercised.
GRAD_SCALES = [3.0, 0.05, 2.0, 0.1, 5.0, 0.02]


def make_inputs(seed: int):
    rng = np.random.default_rng(seed)
    params = {
        "fc.weight": rng.standard_normal((4, 3)).astype(np.float32),
        "fc.bias": rng.standard_normal(3).astype(np.float32),
        # Above the kernels' parallel threshold, so OpenMP's split runs too.
        "embed": rng.standard_normal((40000,)).astype(np.float32) * 0.1,
    }
    grads = []
    for s in GRAD_SCALES:
        g = {k: rng.standard_normal(v.shape) for k, v in params.items()}
        total = math.sqrt(sum(float(np.sum(x * x)) for x in g.values()))
        grads.append({k: (x * s / total).astype(np.float32) for k, x in g.items()})
    return params, grads


def run_checker(tmp_path, c: dict, params: dict, grads: list[dict]) -> dict[str, np.ndarray]:
    assert os.path.exists(CHECKER), (
        f"{CHECKER} is missing: build it with 'ninja -C build bmrt-optimizer-check'"
    )
    tensors = {f"param.{k}": v for k, v in params.items()}
    for t, g in enumerate(grads, start=1):
        tensors.update({f"grad.{t}.{k}": v for k, v in g.items()})
    metadata = {k: repr(v) if not isinstance(v, str) else v for k, v in c.items()}
    inp, out = str(tmp_path / "in.safetensors"), str(tmp_path / "out.safetensors")
    write_safetensors(inp, tensors, metadata)
    done = subprocess.run([CHECKER, inp, out], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return read_safetensors(out)


def assert_close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    atol = ATOL_FRACTION * float(np.max(np.abs(want)))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=RTOL, atol=atol, err_msg=what)


@pytest.mark.parametrize("case", sorted(CASES))
def test_optimizer_matches_numpy(tmp_path, case):
    c = CASES[case]
    params, grads = make_inputs(seed=len(case))
    got = run_checker(tmp_path, c, params, grads)
    want_p, want_state, want_lr, want_norm = reference(c, params, grads)

    assert_close(got["lr"], want_lr, "learning rates")
    assert_close(got["grad_norm"], want_norm, "global gradient norms")
    if c["clip"] > 0:
        clipped = want_norm > c["clip"]
        assert clipped.any() and (~clipped).any(), "both clipping branches should run"
    for k, v in want_p.items():
        assert got[f"param.{k}"].dtype == np.float32
        assert got[f"param.{k}"].shape == v.shape
        assert_close(got[f"param.{k}"], v, f"parameter {k}")
        # The parameters moved by far more than the tolerance: the
        # comparison is not of (nearly) untouched inputs.
        bound = RTOL * np.max(np.abs(v)) + ATOL_FRACTION * np.max(np.abs(v))
        assert np.max(np.abs(v - params[k])) > 10 * bound, k
    for k, v in want_state.items():
        assert_close(got[k], v, f"optimizer state {k}")
    expected_names = {f"param.{k}" for k in params} | set(want_state) | {"lr", "grad_norm"}
    assert set(got) == expected_names


def test_layerwise_ratio_of_a_zero_tensor_is_one(tmp_path):
    # A bias that starts at zero: LAMB's |p| / |u| and LARS's local rate
    # would be 0 (the tensor never moves); both fall back to 1.
    for case in ("lamb", "lars"):
        c = dict(CASES[case], steps=1, warmup=1)
        params, grads = make_inputs(seed=3)
        params["fc.bias"] = np.zeros(3, dtype=np.float32)
        got = run_checker(tmp_path, c, params, grads[:1])
        want_p, _, _, _ = reference(c, params, grads[:1])
        assert np.any(got["param.fc.bias"] != 0), case
        assert_close(got["param.fc.bias"], want_p["fc.bias"], f"{case} bias")


def test_layerwise_ratio_matters(tmp_path):
    # Per-tensor ratios, not one global one: LAMB without them is Adam with
    # L2-free decay, which the tolerance must tell apart.
    c = CASES["lamb"]
    params, grads = make_inputs(seed=1)
    got = run_checker(tmp_path, c, params, grads)
    adamw, _, _, _ = reference(dict(c, optimizer="adamw"), params, grads)
    with pytest.raises(AssertionError):
        for k, v in adamw.items():
            assert_close(got[f"param.{k}"], v, f"parameter {k}")


def test_tolerance_separates_formulas(tmp_path):
    """AdamW's decoupled decay vs Adam + L2: the tolerance must tell them apart."""
    c = CASES["adamw"]
    params, grads = make_inputs(seed=1)
    got = run_checker(tmp_path, c, params, grads)
    wrong_p, _, _, _ = reference(c, params, grads, coupled_decay=True)
    with pytest.raises(AssertionError):
        for k, v in wrong_p.items():
            assert_close(got[f"param.{k}"], v, f"parameter {k}")
