"""A run that diverges never leaves its diverged weights as the state to go
on from (issue 27, item 4): weights that are not finite are never saved, a
checkpoint whose weights give a NaN loss at the next step is withdrawn (the
pointer goes back to the version before), and `bmc export` refuses
non-finite weights however they got into a checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import zlib

import numpy as np

from conftest import latest, read_log, read_safetensors, run, tool, write_safetensors
from test_mesh import train as train_on_mesh
from test_trainer import error_line, train


def start(compiled, tmp_path):
    """gpt3-tiny and its step-0 checkpoint (the compiled weights)."""
    out = compiled("gpt3-tiny")
    ckpt = str(tmp_path / "ckpt")
    train(out, "--steps", "0", "--checkpoint", ckpt)
    return out, ckpt


def test_checkpoint_that_gave_a_nan_loss_is_withdrawn(compiled, tmp_path):
    out, ckpt = start(compiled, tmp_path)
    # AdamW moves every weight by about lr: step 1's weights are finite
    # (1e30) and saved, and step 2's loss of them is NaN.
    line = error_line(train(out, "--steps", "10", "--resume", "--checkpoint", ckpt,
                            "--save-every", "1", "--lr", "1e30", "--warmup", "0",
                            check=False))
    assert line == (f"trainer: error: the loss is NaN at step 2; stopping (the "
                    f"checkpoint of step 1 in '{ckpt}' holds the weights that gave "
                    f"it, so it was withdrawn: the folder is back at step 0)")
    assert open(os.path.join(ckpt, "latest")).read() == "step-00000000\n"
    assert sorted(os.listdir(ckpt)) == [".lock", "latest", "step-00000000"]
    # What is left is a state to go on from: it exports, and resumes with a
    # sane learning rate from step 0.
    run([tool("bmc"), "export", ckpt, "-o", str(tmp_path / "model.onnx")])
    log = str(tmp_path / "log.jsonl")
    train(out, "--steps", "2", "--resume", "--checkpoint", ckpt, "--log", log)
    assert [r["step"] for r in read_log(log)] == [1, 2]


def test_sharded_checkpoint_is_withdrawn_on_every_rank(compiled, tmp_path):
    # Two tp ranks, each saving its shards: rank 0 withdraws the version
    # while the other waits, and the job still ends with rank 0's line.
    folder = compiled("gpt3-tiny", "--global-batch", "8", "--gpus", "2",
                      "--fix", "dp=1,tp=2,pp=1")
    ckpt = str(tmp_path / "ckpt")
    train_on_mesh(folder, 2, "--steps", "0", "--checkpoint", ckpt)
    result = train_on_mesh(folder, 2, "--steps", "10", "--resume", "--checkpoint", ckpt,
                           "--save-every", "1", "--lr", "1e30", "--warmup", "0",
                           check=False)
    assert result.returncode != 0
    assert ("trainer: error: rank 0: the loss is NaN at step 2; stopping (the "
            f"checkpoint of step 1 in '{ckpt}' holds the weights that gave it, so "
            "it was withdrawn: the folder is back at step 0)") in result.stderr
    assert open(os.path.join(ckpt, "latest")).read() == "step-00000000\n"
    train_on_mesh(folder, 2, "--steps", "1", "--resume", "--checkpoint", ckpt)


def test_without_an_older_version_the_bad_one_is_named(compiled, tmp_path):
    out = compiled("gpt3-tiny")
    ckpt = str(tmp_path / "ckpt")
    line = error_line(train(out, "--steps", "10", "--checkpoint", ckpt, "--save-every",
                            "1", "--lr", "1e30", "--warmup", "0", check=False))
    assert line.endswith(f"(the checkpoint of step 1 in '{ckpt}' holds the weights "
                         f"that gave it, and there is no older one: resuming from "
                         f"it fails the same way)")


def test_weights_that_are_not_finite_are_never_saved(compiled, tmp_path):
    out, ckpt = start(compiled, tmp_path)
    # lr x weight decay = 1e40 overflows fp32: step 1 leaves infinities and
    # NaNs in the weights, with step 1's loss (of the weights before) finite.
    line = error_line(train(out, "--steps", "10", "--resume", "--checkpoint", ckpt,
                            "--save-every", "1", "--lr", "1e38", "--warmup", "0",
                            "--weight-decay", "100", check=False))
    assert line.startswith("trainer: error: after step 1 parameter '")
    assert line.endswith(f"' holds a NaN or infinity; not saving it (the checkpoint "
                         f"of step 0 in '{ckpt}' is kept)")
    assert open(os.path.join(ckpt, "latest")).read() == "step-00000000\n"


def test_learning_rate_must_be_finite(compiled):
    line = error_line(train(compiled("gpt3-tiny"), "--steps", "1", "--lr", "inf",
                            check=False))
    assert line == "trainer: error: --lr expects a finite non-negative number, got 'inf'"


def test_export_refuses_non_finite_weights(compiled, tmp_path):
    _, ckpt = start(compiled, tmp_path)
    # A checkpoint with a NaN that its CRCs vouch for (written by another
    # tool, or before this check existed).
    version = latest(ckpt)
    model = os.path.join(version, "model.safetensors")
    tensors = read_safetensors(model)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].copy()
    tensors[name].flat[3] = np.nan
    write_safetensors(model, tensors)
    manifest_path = os.path.join(version, "manifest.json")
    with open(manifest_path) as f:
        manifest = json.load(f)
    data = open(model, "rb").read()
    manifest["files"]["model.safetensors"] = {"bytes": len(data),
                                              "crc32": zlib.crc32(data)}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f)
    result = run([tool("bmc"), "export", ckpt, "-o", str(tmp_path / "model.onnx")],
                 check=False)
    assert result.returncode != 0
    assert (f"checkpoint parameter '{name}' holds a non-finite value (element 3); "
            f"not exporting it") in result.stderr
    assert not os.path.exists(tmp_path / "model.onnx")
    shutil.rmtree(ckpt)
