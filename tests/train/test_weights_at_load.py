"""Step-0 weights generated at load time: `bmc compile --init random
--weights-at-load` writes each parameter's scheme and the seed (init.json)
instead of the values, and the trainer and bmrt-forward generate them
(runtime/core/Init.cpp). They are the bits `--init random` writes into
params.safetensors, on one rank and on each rank's shard, so the two
folders train alike; the folder stays a few KiB whatever the model's size.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import onnx
import pytest

from conftest import MODELS, read_log, read_safetensors, run, tool, write_safetensors
from mesh_programs import read_checkpoint
from test_forward import inputs_for

MPIRUN = shutil.which("mpirun")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(ROOT, "tests", "data", "clusters", "slow-compute.yaml")

# Matrices, norm scales and biases (gpt3-tiny); a causal mask buffer
# (hf-gpt2-tiny); He-initialised convolutions and batch norms
# (wresnet-tiny).
MODELS_UNDER_TEST = ["gpt3-tiny", "hf-gpt2-tiny", "wresnet-tiny"]


def compile_both(model: str, tmp_path, *flags: str) -> tuple[str, str]:
    """The model compiled with --init random, and again generating at load."""
    folders = []
    for name, extra in (("values", []), ("at-load", ["--weights-at-load"])):
        out = str(tmp_path / name)
        run([tool("bmc"), "compile", os.path.join(MODELS, f"{model}.onnx"), "-o", out,
             "--init", "random", "--seed", "5", *flags, *extra])
        folders.append(out)
    return folders[0], folders[1]


def trainer(folder: str, ranks: int, *flags: str, check: bool = True):
    args = [os.path.join(folder, "trainer"), "--threads", "1", "--quiet", *flags]
    if ranks > 1:
        args = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1", *args]
    return run(args, check=check)


def losses(folder: str, ranks: int = 1) -> list[float]:
    log = os.path.join(folder, "run.jsonl")
    trainer(folder, ranks, "--steps", "3", "--lr", "1e-2", "--log", log)
    return [r["loss"] for r in read_log(log) if r.get("rank", 0) == 0]


@pytest.mark.parametrize("model", MODELS_UNDER_TEST)
def test_weights_made_at_load_train_as_the_written_ones(model, tmp_path):
    values, at_load = compile_both(model, tmp_path, "--global-batch", "2")
    with open(os.path.join(at_load, "trainer.json")) as f:
        config = json.load(f)
    assert config["init"] == "init.json" and "parameters" not in config
    assert not os.path.exists(os.path.join(at_load, "params.safetensors"))
    assert os.path.getsize(os.path.join(at_load, "init.json")) < 64 * 1024

    first = losses(values)
    assert len(first) == 3
    assert losses(at_load) == first

    # The step-0 checkpoint holds the generated weights: the bits
    # params.safetensors holds, and `bmc export` merges them as before.
    ckpt = os.path.join(at_load, "ckpt")
    trainer(at_load, 1, "--steps", "0", "--checkpoint", ckpt)
    written = read_safetensors(os.path.join(values, "params.safetensors"))
    generated = read_checkpoint(ckpt)
    assert written.keys() == generated.keys()
    for name, value in written.items():
        assert np.array_equal(generated[name], value), name
    run([tool("bmc"), "export", ckpt, "-o", str(tmp_path / "m.onnx")])
    assert {i.name for i in onnx.load(str(tmp_path / "m.onnx")).graph.initializer} >= set(written)


def test_bmrt_forward_generates_them_too(tmp_path):
    values, at_load = compile_both("hf-gpt2-tiny", tmp_path, "--global-batch", "2")
    model = onnx.load(os.path.join(MODELS, "hf-gpt2-tiny.onnx"))
    with open(os.path.join(values, "trainer.json")) as f:
        batch = json.load(f)["micro_batch"]
    write_safetensors(str(tmp_path / "in.safetensors"), inputs_for(model, batch, 16))
    outputs = []
    for folder in (values, at_load):
        out = str(tmp_path / f"{os.path.basename(folder)}.safetensors")
        run([tool("bmrt-forward"), folder, str(tmp_path / "in.safetensors"), out])
        outputs.append(read_safetensors(out))
    assert outputs[0].keys() == outputs[1].keys()
    for name in outputs[0]:
        assert np.array_equal(outputs[0][name], outputs[1][name]), name


@pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")
@pytest.mark.parametrize("fix", ["dp=1,tp=2,pp=1", "dp=2,tp=1,pp=1,zero=3", "dp=1,tp=1,pp=2"])
def test_each_rank_generates_its_shard_of_the_same_weights(fix, tmp_path):
    # Under tp each rank generates only its box of a split weight (the fused
    # QKV one in its factored view); under ZeRO 3 its flat shard follows;
    # under pp each rank its own stage's parameters.
    values, at_load = compile_both("gpt3-tiny", tmp_path, "--gpus", "2",
                                   "--cluster", CLUSTER, "--fix", fix)
    first = losses(values, ranks=2)
    assert len(first) == 3
    assert losses(at_load, ranks=2) == first


@pytest.fixture(scope="module")
def at_load(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("at-load"))
    run([tool("bmc"), "compile", os.path.join(MODELS, "gpt3-tiny.onnx"), "-o", out,
         "--init", "random", "--weights-at-load", "--global-batch", "2"])
    return out


def edited(folder: str, tmp_path, change) -> str:
    out = str(tmp_path / "bad")
    shutil.copytree(folder, out)
    path = os.path.join(out, "init.json")
    with open(path) as f:
        plan = json.load(f)
    spec = next(t for t in plan["tensors"] if t["name"] == "wte.weight")
    change(spec)
    with open(path, "w") as f:
        json.dump(plan, f)
    return out


@pytest.mark.parametrize("change, message", [
    (lambda t: t.update(kind="uniform"),
     "'wte.weight' has kind 'uniform'; expected ones, zeros, normal or causal_mask"),
    (lambda t: t.update(shape=[512, 32]),
     "'wte.weight' is f32[512,32], the program needs f32[512,64]"),
    (lambda t: t.update(dtype="i64"),
     "'wte.weight' is i64 but 'normal' fills f32 tensors"),
], ids=["unknown-kind", "wrong-shape", "wrong-dtype"])
def test_a_bad_spec_is_one_line(at_load, tmp_path, change, message):
    bad = edited(at_load, tmp_path, change)
    for args in ([os.path.join(bad, "trainer"), "--steps", "1", "--quiet"],
                 [tool("bmrt-forward"), bad, os.path.join(bad, "none.safetensors"),
                  os.path.join(bad, "out.safetensors")]):
        result = run(args, check=False)
        assert result.returncode != 0
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert message in lines[0] and "init.json" in lines[0], lines[0]


def test_weights_at_load_needs_init_random(tmp_path):
    result = run([tool("bmc"), "compile", os.path.join(MODELS, "gpt3-tiny.onnx"), "-o",
                  str(tmp_path / "out"), "--weights-at-load"], check=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "bmc: error: --weights-at-load goes with --init random (a model's own weights "
        "are values, not a scheme)"]


def test_a_recompile_leaves_one_source_of_weights(at_load, tmp_path):
    out = str(tmp_path / "again")
    shutil.copytree(at_load, out)
    run([tool("bmc"), "compile", os.path.join(MODELS, "gpt3-tiny.onnx"), "-o", out,
         "--init", "random", "--global-batch", "2"])
    assert sorted(f for f in os.listdir(out) if f in ("init.json", "params.safetensors")) == [
        "params.safetensors"]
