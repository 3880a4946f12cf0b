"""CPU offload of the optimizer (issue 29; ZeRO-Offload, Ren et al. 2021):
the optimizer state and an fp32 copy of every updated range in host
memory, the step on the host's cores, the gradients copied down and the
parameters copied up each step (runtime/trainer/OptimizerOffload.h). With
AdamW and SGD and --offload-behind (a GPU's default) a worker thread does
that behind the next forward, each parameter's first reader waiting for
its range; otherwise, and for LAMB and LARS, the phases run after the
backward. Every test here runs the phases behind the forward where the
optimizer allows.

The host runs the CPU backend's optimizer kernels on the same ranges in the
same order as a run without offload does on the CPU device, so the losses
must be equal bit for bit, not within a tolerance: any difference is a
range copied wrongly (a stale parameter, a shard's offset, a checkpoint
loaded into the wrong place)."""

from __future__ import annotations

import os

import pytest

from conftest import read_log, run, tool
from test_bad_input import copy_of, edit_config
from test_layerwise_optimizers import MESHES, losses, mpirun
from test_partitioned import model_path
from test_trainer import error_line, train

OFFLOAD = "offload=optimizer"


def single(compiled, *flags: str, offload: bool) -> str:
    fix = ["--fix", OFFLOAD] if offload else []
    return compiled("gpt3-tiny", "--global-batch", "8", *flags, *fix)


def meshed(compiled, mesh: str, *flags: str, offload: bool) -> str:
    fix = MESHES[mesh] + ("," + OFFLOAD if offload else "")
    return compiled("gpt3-tiny", "--global-batch", "8", *flags, "--gpus", "2",
                    "--fix", fix)


BEHIND = "--offload-behind"


def train_log(folder: str, log, *flags: str) -> tuple[list[dict], str]:
    out = run([os.path.join(folder, "trainer"), "--threads", "1", "--steps", "4",
               "--log", str(log), *flags]).stdout
    return read_log(str(log)), out


@pytest.mark.parametrize("optimizer", ["adam", "sgd", "lamb", "lars"])
def test_one_rank_is_bit_for_bit(compiled, tmp_path, optimizer):
    flags = ("--optimizer", optimizer)
    on_host = single(compiled, *flags, offload=True)
    on_device = single(compiled, *flags, offload=False)
    with open(os.path.join(on_host, "trainer.json")) as f:
        assert '"offload": "optimizer"' in f.read()
    a, said = train_log(on_host, tmp_path / "host.jsonl", BEHIND)
    after, said_after = train_log(on_host, tmp_path / "after.jsonl")
    b, _ = train_log(on_device, tmp_path / "device.jsonl")
    for run_ in (a, after):
        assert [r["loss"] for r in run_] == [r["loss"] for r in b]
        assert [r["grad_norm"] for r in run_] == [r["grad_norm"] for r in b]
    # The device holds no optimizer state; the host holds the state and
    # the parameter and gradient copies: with Adam's two moments four
    # fp32 words per parameter, with SGD's and LARS's one buffer three.
    assert a[-1]["peak_memory_bytes"]["optimizer_state"] == 0
    state = b[-1]["peak_memory_bytes"]["optimizer_state"]
    words = 4 if optimizer in ("adam", "lamb") else 3
    moments = words - 2
    assert a[-1]["host_peak_memory_bytes"] == pytest.approx(
        state * words / moments, rel=0.01)
    phases = {"copy_down", "host_step", "copy_up"}
    behind = optimizer in ("adam", "sgd")
    # Behind the forward, the trainer's waits for the ranges are timed too,
    # and a step reports the update that ran behind its forward: the first
    # has none.
    assert set(a[-1]["offload_time_s"]) == phases | ({"wait"} if behind else set())
    assert ("host_step" in a[0].get("offload_time_s", {})) == (not behind)
    assert ("the host steps behind the next forward" in said) == behind
    # The CPU backend's default: after the backward, saying why.
    assert "the host steps after the backward (" in said_after
    assert set(after[-1]["offload_time_s"]) == phases
    assert "offload_time_s" not in b[-1]


@pytest.mark.parametrize("mesh,optimizer", [("zero1", "adam"), ("zero3", "sgd"),
                                            ("tp2", "lamb")])
def test_two_ranks_are_bit_for_bit(compiled, tmp_path, mesh, optimizer):
    # Each rank offloads its own range (under ZeRO its dp shard): the same
    # losses as the same mesh with the optimizer on the device.
    flags = ("--optimizer", optimizer)
    for name, offload in (("host", True), ("device", False)):
        mpirun(2, meshed(compiled, mesh, *flags, offload=offload), "--steps", "4",
               BEHIND, "--log", str(tmp_path / f"{name}.jsonl"))
    for log in ("{}.jsonl", "{}.rank1.jsonl"):
        assert losses(tmp_path / log.format("host")) == losses(
            tmp_path / log.format("device"))


def test_resume_is_bit_for_bit_and_moves_state(compiled, tmp_path):
    # Stopping at 2 and resuming gives the straight run's losses exactly,
    # also when the resumed run keeps its optimizer state on the device
    # (and back): the checkpoint does not say where the state lived.
    host = meshed(compiled, "zero1", offload=True)
    device = meshed(compiled, "zero1", offload=False)
    straight = tmp_path / "straight"
    mpirun(2, host, "--steps", "5", "--checkpoint", str(straight),
           "--log", str(tmp_path / "a.jsonl"))
    for name, first, second in (("b", host, host), ("c", host, device),
                                ("d", device, host)):
        ckpt = tmp_path / name
        log = str(tmp_path / f"{name}.jsonl")
        mpirun(2, first, "--steps", "5", "--stop-at", "2", "--checkpoint", str(ckpt),
               BEHIND, "--log", log)
        mpirun(2, second, "--steps", "5", "--resume", "--checkpoint", str(ckpt),
               BEHIND, "--log", log)
        assert losses(tmp_path / "a.jsonl") == losses(tmp_path / f"{name}.jsonl"), name


def test_unknown_offload_is_refused(compiled, tmp_path):
    folder = copy_of(compiled, tmp_path, "offload")
    edit_config(folder, offload="parameters")
    line = error_line(train(folder, "--steps", "1", check=False))
    assert "offload is 'parameters'; this trainer offloads none or optimizer" in line


def test_v_pipeline_is_bit_for_bit(tmp_path_factory, tmp_path):
    # ZB-V's two chunks per rank in a V: rank 0 holds the first and the last
    # virtual stage, and with them both copies of the tied embedding. The
    # host's steps follow the chunks' first readers, and each chunk's copy
    # of the table waits for its one range.
    model = model_path(tmp_path_factory, "gpt3-tiny-4l")
    fix = "dp=1,tp=1,pp=2,v=2,schedule=zb-v,mb=2"
    for name, offload in (("host", True), ("device", False)):
        out = str(tmp_path / name)
        run([tool("bmc"), "compile", model, "-o", out, "--global-batch", "8",
             "--gpus", "2", "--fix", fix + ("," + OFFLOAD if offload else "")])
        mpirun(2, out, "--steps", "4", BEHIND, "--log", str(tmp_path / f"{name}.jsonl"))
    for log in ("{}.jsonl", "{}.rank1.jsonl"):
        assert losses(tmp_path / log.format("host")) == losses(
            tmp_path / log.format("device"))
