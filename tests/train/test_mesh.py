"""The runtime half of parallel training, on hand-written step programs
(mesh_programs.py): tensor, sequence and data parallelism, ZeRO 1 and 2,
and checkpoints that resume bit for bit and reshard between meshes, each
compared with the same model unsharded on one rank.

Tolerance: fp32, 1e-5 relative plus 1e-6 absolute, over 10 AdamW steps.
The sharded step adds the same products in another grouping (a dot
product over the hidden dim as two half sums joined by the all-reduce, a
batch as dp partial sums), each a rounding of about 1e-7 relative; Adam's
update m / sqrt(v) is scale-free, so these stay at rounding level over a
few steps. Measured (tp2, tp2 x dp2, dp2, sequence-parallel tp2, ZeRO 2
against 1 rank or ZeRO 0): losses within 3.1e-7 relative, weights (of size
about 0.3) within 2.1e-7 absolute; ZeRO 1 is bitwise ZeRO 0.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from conftest import ENV, latest, read_log, read_safetensors, run, tool, write_safetensors
from mesh_programs import (expert_weights, megatron_mlp, mixture_of_experts,
                           pipeline_folder, pipeline_stages, read_checkpoint,
                           sequence_parallel_mlp, trainer_folder)

MPIRUN = shutil.which("mpirun")
RTOL, ATOL = 1e-5, 1e-6


def train(folder: str, ranks: int, *flags: str, check: bool = True):
    trainer = tool("bmrt-trainer")
    # A learning rate at which ten steps visibly train; clipping at 1 is
    # active in the first steps (gradient norms up to 2.6).
    args = [trainer, "--dir", folder, "--threads", "1", "--quiet", "--lr", "0.05",
            *flags]
    if ranks > 1:
        args = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
                "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1", *args]
    return run(args, check=check)


def losses(log: str) -> list[float]:
    return [r["loss"] for r in read_log(log) if r.get("rank", 0) == 0]


def run_plan(tmp_path, name, program, ranks, *flags, steps=10, **config):
    folder = trainer_folder(str(tmp_path / name), program, ranks, **config)
    log, ckpt = str(tmp_path / f"{name}.jsonl"), str(tmp_path / f"{name}.ckpt")
    train(folder, ranks, "--steps", str(steps), "--log", log, "--checkpoint", ckpt, *flags)
    return losses(log), read_checkpoint(ckpt), log


def assert_same_run(a, b, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(a[0], b[0], rtol=rtol, atol=atol)
    for name in a[1]:
        np.testing.assert_allclose(a[1][name], b[1][name], rtol=rtol, atol=atol,
                                   err_msg=name)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one")
    return run_plan(tmp, "tp1", megatron_mlp(1, 1), 1)


def test_tensor_parallel_matches_one_rank(one_rank, tmp_path):
    two = run_plan(tmp_path, "tp2", megatron_mlp(2, 1), 2)
    assert_same_run(two, one_rank)
    assert two[0][-1] < two[0][0] / 2  # it trains
    # Every rank logs; the tp collectives are timed by axis.
    ranks = read_log(two[2])
    assert {r["rank"] for r in ranks} == {0}
    other = read_log(two[2].replace(".jsonl", ".rank1.jsonl"))
    assert other[-1]["rank"] == 1 and other[-1]["communication_time_s"]["tp"] > 0
    assert other[-1]["bubble_time_s"] == 0


def test_tensor_and_data_parallel_on_four_ranks(one_rank, tmp_path):
    assert_same_run(run_plan(tmp_path, "tp2dp2", megatron_mlp(2, 2), 4), one_rank)


def test_sequence_parallel_matches_one_rank(tmp_path):
    one = run_plan(tmp_path, "sp1", sequence_parallel_mlp(1, 1), 1)
    assert_same_run(run_plan(tmp_path, "sp2", sequence_parallel_mlp(2, 1), 2), one)


def test_expert_parallel_matches_one_rank(tmp_path):
    # Two experts, one per rank, tokens sent to them and back by all_to_all
    # over ep; one rank holding both experts permutes the batch the same way.
    weights = expert_weights()
    one = run_plan(tmp_path, "ep1", mixture_of_experts(1), 1, weights=weights)
    two = run_plan(tmp_path, "ep2", mixture_of_experts(2), 2, weights=weights)
    assert_same_run(two, one)
    assert two[0][-1] < two[0][0] / 2
    assert read_log(two[2])[-1]["communication_time_s"]["ep"] > 0


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_zero_shards_optimizer_state(tmp_path, zero):
    # dp = 2: ZeRO halves each rank's optimizer state (AdamW's two moments),
    # at stage 2 also its gradient buffers beside the program's, at stage 3
    # also its parameters (each gathered only for the instructions reading
    # it); the losses and weights stay those of ZeRO 0 (the update is
    # elementwise).
    plain = run_plan(tmp_path, "z0", megatron_mlp(1, 2), 2, micro_batches=2)
    sharded = run_plan(tmp_path, f"z{zero}", megatron_mlp(1, 2), 2, zero=zero,
                       micro_batches=2)
    assert_same_run(sharded, plain)
    memory = [read_log(run[2])[-1]["peak_memory_bytes"] for run in (plain, sharded)]
    assert memory[1]["optimizer_state"] * 2 <= memory[0]["optimizer_state"] + 256
    if zero >= 2:
        assert memory[1]["gradients"] < memory[0]["gradients"]
    if zero == 3:
        assert memory[1]["parameters"] < memory[0]["parameters"]


@pytest.mark.parametrize("tp,dp,zero", [(2, 1, 0), (1, 2, 3)])
def test_resume_is_bit_for_bit(tmp_path, tp, dp, zero):
    program, ranks = megatron_mlp(tp, dp), tp * dp
    straight = run_plan(tmp_path, "straight", program, ranks, zero=zero)
    folder = trainer_folder(str(tmp_path / "split"), program, ranks, zero=zero)
    log, ckpt = str(tmp_path / "split.jsonl"), str(tmp_path / "split.ckpt")
    train(folder, ranks, "--steps", "10", "--stop-at", "5", "--log", log, "--checkpoint", ckpt)
    train(folder, ranks, "--steps", "10", "--resume", "--log", log, "--checkpoint", ckpt)
    assert losses(log) == straight[0]
    resumed = read_checkpoint(ckpt)
    assert all(np.array_equal(resumed[k], straight[1][k]) for k in resumed)
    state = read_checkpoint(ckpt, "optimizer_state")
    assert all(np.array_equal(state[k], read_checkpoint(str(tmp_path / "straight.ckpt"),
                                                        "optimizer_state")[k])
               for k in state)


@pytest.mark.parametrize("target", [(1, 1, 0), (2, 2, 0), (1, 2, 1), (1, 2, 3)])
def test_checkpoint_reshards_on_load(one_rank, tmp_path, target):
    # Five steps on tp = 2, then five more on another mesh (one rank,
    # tp2 x dp2, dp2 under ZeRO 1 and 3): the losses and weights of one run
    # on one rank, within the tolerance above.
    first = trainer_folder(str(tmp_path / "first"), megatron_mlp(2, 1), 2)
    ckpt = str(tmp_path / "ckpt")
    train(first, 2, "--steps", "10", "--stop-at", "5", "--checkpoint", ckpt)
    tp, dp, zero = target
    ranks = tp * dp
    second = trainer_folder(str(tmp_path / "second"), megatron_mlp(tp, dp), ranks,
                            zero=zero)
    log = str(tmp_path / "second.jsonl")
    train(second, ranks, "--steps", "10", "--resume", "--checkpoint", ckpt, "--log", log)
    np.testing.assert_allclose(losses(log), one_rank[0][5:], rtol=RTOL, atol=ATOL)
    weights = read_checkpoint(ckpt)
    for name, value in weights.items():
        np.testing.assert_allclose(value, one_rank[1][name], rtol=RTOL, atol=ATOL)


def test_wrong_rank_count_names_both(tmp_path):
    folder = trainer_folder(str(tmp_path / "tp2"), megatron_mlp(2, 2), 4)
    result = train(folder, 2, "--steps", "1", check=False)
    assert result.returncode != 0
    lines = [l for l in result.stderr.splitlines() if l.startswith("trainer: error")]
    assert lines == ["trainer: error: rank 0: the step program's mesh "
                     "tp=2,ep=1,dp=2,pp=1 has 4 ranks; the trainer was started on 2"]


def test_a_program_the_runtime_cannot_run_is_one_line(tmp_path):
    program = megatron_mlp(2, 1).replace('"w2" sharding=[["tp"],[]] partial',
                                         '"w2" sharding=[[],["tp"]] partial')
    folder = trainer_folder(str(tmp_path / "bad"), program, 2)
    result = train(folder, 2, "--steps", "1", check=False)
    assert result.returncode != 0
    assert "the gradient of 'w2' is sharded unlike the parameter" in result.stderr


def test_print_schedule_shows_each_ranks_instructions(tmp_path):
    folder = trainer_folder(str(tmp_path / "pp"), megatron_mlp(1, 1), 1,
                            micro_batches=4, pp=2, schedule="1f1b")
    out = run([tool("bmrt-trainer"), "--dir", folder, "--print-schedule"]).stdout
    assert out.startswith("schedule 1f1b: pp=2 v=1 m=4 (no deadlock)\n")
    assert "rank 0 | F0 F1" in out and "rank 1: recvA0<0 F0" in out
    plain = trainer_folder(str(tmp_path / "none"), megatron_mlp(1, 1), 1)
    out = run([tool("bmrt-trainer"), "--dir", plain, "--print-schedule"]).stdout
    assert out == ("mlp: no pipeline (pp 1, schedule none): every rank runs the whole "
                   "step, 1 micro-batch per step\n")
    bad = trainer_folder(str(tmp_path / "bad"), megatron_mlp(1, 1), 1, micro_batches=3,
                         pp=2, schedule="interleaved", chunks=2)
    result = run([tool("bmrt-trainer"), "--dir", bad, "--print-schedule"], check=False)
    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        "trainer: error: the interleaved schedule needs the micro-batches (m=3) to be a "
        "multiple of pp=2, as Megatron-LM does"]
    # A schedule bmrt does not have, and a V with one chunk per rank.
    for name, schedule, chunks, line in [
            ("unknown", "zb-h2", 1, "trainer: error: trainer.json lists pipeline stages "
             "but its schedule is 'zb-h2'; expected one of gpipe, 1f1b, interleaved, zb-h1, "
             "zb-v, dualpipe-v"),
            ("onechunk", "zb-v", 1, "trainer: error: the zb-v schedule needs v=2 model "
             "chunks per rank (a V), got v=1")]:
        wrong = trainer_folder(str(tmp_path / name), megatron_mlp(1, 1), 1, micro_batches=4,
                               pp=2, schedule=schedule, chunks=chunks)
        result = run([tool("bmrt-trainer"), "--dir", wrong, "--print-schedule"], check=False)
        assert result.returncode != 0
        assert result.stderr.splitlines() == [line]
    # The plan's stage times must fit the pipeline: one per virtual stage.
    times = trainer_folder(str(tmp_path / "times"), megatron_mlp(1, 1), 1, micro_batches=4,
                           pp=2, schedule="zb-v", chunks=2,
                           stage_times={"forward": [1, 1, 1], "backward": [2, 2, 2],
                                        "weight": [1, 1, 1]})
    result = run([tool("bmrt-trainer"), "--dir", times, "--print-schedule"], check=False)
    assert result.returncode != 0
    assert result.stderr.splitlines() == [
        "trainer: error: trainer.json's stage_times: the schedule costs give forward "
        "times for 3 stages, the pipeline has 4 virtual stages"]
    zb = trainer_folder(str(tmp_path / "zb"), megatron_mlp(1, 1), 1, micro_batches=4, pp=2,
                        schedule="zb-h1")
    out = run([tool("bmrt-trainer"), "--dir", zb, "--print-schedule"]).stdout
    assert out.startswith("schedule zb-h1: pp=2 v=1 m=4 (no deadlock)\n")
    assert "rank 0 | F0 F1 .  B0 W0" in out


def test_an_error_on_one_rank_ends_the_job(tmp_path):
    # Rank 1 cannot open its log (a folder has its name) while rank 0 goes
    # on into the step's collectives: the job ends with one line naming
    # rank 1, never a hang.
    folder = trainer_folder(str(tmp_path / "tp2"), megatron_mlp(2, 1), 2)
    log = tmp_path / "run.jsonl"
    (tmp_path / "run.rank1.jsonl").mkdir()
    result = train(folder, 2, "--steps", "5", "--log", str(log), check=False)
    assert result.returncode != 0
    errors = [l for l in result.stderr.splitlines() if l.startswith("trainer: error")]
    assert errors == [f"trainer: error: rank 1: cannot write the log "
                      f"'{tmp_path / 'run.rank1.jsonl'}': Is a directory"]


def _rank_pid(launcher: int, rank: int):
    """The pid of `rank` among the launcher's children, from /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if parent == launcher and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
            return int(entry)
    return None


def test_a_killed_rank_ends_the_job(tmp_path):
    # SIGKILL to rank 1 mid-run: mpirun ends the job and says which rank
    # died. (The wait's limit only keeps a hang from blocking CI; measured:
    # the job ends within a second of the kill.)
    folder = trainer_folder(str(tmp_path / "tp2"), megatron_mlp(2, 1), 2)
    log = tmp_path / "run.jsonl"
    args = [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2",
            "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1",
            tool("bmrt-trainer"), "--dir", folder, "--threads", "1", "--quiet",
            "--steps", "10000000", "--log", str(log)]
    job = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=ENV)
    rank1 = tmp_path / "run.rank1.jsonl"
    while not (rank1.exists() and rank1.stat().st_size > 0):
        assert job.poll() is None, job.communicate()
        time.sleep(0.05)
    pid = _rank_pid(job.pid, 1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _, stderr = job.communicate(timeout=300)
    assert job.returncode != 0
    assert re.search(r"rank 1 .*exited on signal 9", stderr, re.S), stderr


def test_sharded_checkpoint_layout(tmp_path):
    # tp2 x dp2: w1 and w2 are split over tp and written by the dp = 0
    # replica of each tp rank; the replicated w0 by rank 0 alone; the
    # optimizer state beside them; rank 0 writes the manifest.
    folder = trainer_folder(str(tmp_path / "tp2dp2"), megatron_mlp(2, 2), 4)
    ckpt = tmp_path / "ckpt"
    train(folder, 4, "--steps", "2", "--checkpoint", str(ckpt))
    version = latest(ckpt)
    manifest = json.loads((version / "manifest.json").read_text())
    assert manifest["sharded"] and manifest["mesh"] == {"tp": 2, "ep": 1, "dp": 2, "pp": 1}
    shards = {t["name"]: t["shards"] for t in manifest["tensors"]}
    assert [s["rank"] for s in shards["w0"]] == [0]
    assert [(s["rank"], s["offsets"], s["coordinates"]["tp"]) for s in shards["w2"]] == [
        (0, [0, 0], 0), (1, [8, 0], 1)]
    assert [s["rank"] for s in shards["exp_avg.w1"]] == [0, 1]
    assert sorted(os.listdir(version / "shards")) == ["rank00000.safetensors",
                                                      "rank00001.safetensors"]
    assert sorted(manifest["files"]) == ["shards/rank00000.safetensors",
                                         "shards/rank00001.safetensors"]
    assert set(read_safetensors(str(version / "shards" / "rank00001.safetensors"))) == {
        "w1", "w2", "exp_avg.w1", "exp_avg.w2", "exp_avg_sq.w1", "exp_avg_sq.w2"}
    assert read_checkpoint(str(ckpt))["w2"].shape == (16, 8)


@pytest.mark.parametrize("zero", [1, 3])
def test_zero_checkpoints_record_flat_ranges(tmp_path, zero):
    # dp = 2 under ZeRO: each dp rank writes its flat range of AdamW's
    # moments (under ZeRO 3 of the parameters too), as Megatron's
    # flattened_range; the manifest says which elements each holds.
    folder = trainer_folder(str(tmp_path / "dp2"), megatron_mlp(1, 2), 2, zero=zero)
    ckpt = tmp_path / "ckpt"
    train(folder, 2, "--steps", "2", "--checkpoint", str(ckpt))
    manifest = json.loads((latest(ckpt) / "manifest.json").read_text())
    shards = {t["name"]: t["shards"] for t in manifest["tensors"]}
    assert [(s["rank"], s["flat_range"]) for s in shards["exp_avg.w1"]] == [
        (0, [0, 64]), (1, [64, 128])]
    assert ("flat_range" in shards["w1"][0]) == (zero == 3)
    held = read_safetensors(str(latest(ckpt) / "shards" / "rank00001.safetensors"))
    assert held["exp_avg.w1"].shape == (64,)


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_damaged_shard_file_is_named(tmp_path, damage):
    folder = trainer_folder(str(tmp_path / "tp2"), megatron_mlp(2, 1), 2)
    ckpt = tmp_path / "ckpt"
    train(folder, 2, "--steps", "4", "--stop-at", "2", "--checkpoint", str(ckpt))
    shard = latest(ckpt) / "shards" / "rank00001.safetensors"
    if damage == "missing":
        shard.unlink()
    else:
        shard.write_bytes(shard.read_bytes()[:-40])
    result = train(folder, 2, "--steps", "4", "--resume", "--checkpoint", str(ckpt),
                   check=False)
    assert result.returncode != 0
    errors = [l for l in result.stderr.splitlines() if l.startswith("trainer: error")]
    assert len(errors) == 1 and str(shard) in errors[0], result.stderr


def _over_dp(step: str) -> str:
    """A compiled one-rank step program as the local step of a dp = 2 mesh:
    the batch split over dp, gradients and loss partial sums over it."""
    lines = []
    for line in step.splitlines():
        fields = line.split()
        if line.startswith("model "):
            line += "\nmesh tp=1 dp=2"
        elif fields[:1] == ["slot"] and fields[2] in ("input", "label"):
            rank = fields[3].count(",") + 1
            line += ' sharding=[["dp"]' + ",[]" * (rank - 1) + "]"
        elif fields[:1] == ["slot"] and fields[2] == "grad":
            line += ' partial=["dp"]'
        elif fields[:1] == ["loss"]:
            line += ' partial=["dp"]'
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_export_merges_a_sharded_checkpoint(compiled, tmp_path):
    import onnx
    from onnx import numpy_helper

    out = tmp_path / "gpt"
    shutil.copytree(compiled("gpt3-tiny", "--global-batch", "4"), out)
    step = out / "step.bmp"
    step.write_text(_over_dp(step.read_text()))
    config = json.loads((out / "trainer.json").read_text())
    (out / "trainer.json").write_text(json.dumps({**config, "ranks": 2}))
    ckpt = tmp_path / "ckpt"
    train(str(out), 2, "--steps", "2", "--checkpoint", str(ckpt))
    assert json.loads((latest(ckpt) / "manifest.json").read_text())["sharded"]
    run([tool("bmc"), "export", str(ckpt), "-o", str(tmp_path / "m.onnx")])
    trained = read_checkpoint(str(ckpt))
    model = onnx.load(str(tmp_path / "m.onnx"))
    exported = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    assert trained and all(np.array_equal(exported[k], v) for k, v in trained.items())


@pytest.fixture(scope="module")
def one_rank_four_micro_batches(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("one_m4")
    return run_plan(tmp, "m4", megatron_mlp(1, 1), 1, micro_batches=4)


def run_pipeline(tmp_path, name, stages, pp, schedule, chunks=1, *flags, dp=1, **extra):
    folder = pipeline_folder(str(tmp_path / name), stages, pp, schedule, 4, chunks,
                             ranks=pp * dp, **extra)
    log, ckpt = str(tmp_path / f"{name}.jsonl"), str(tmp_path / f"{name}.ckpt")
    train(folder, pp * dp, "--steps", "10", "--log", log, "--checkpoint", ckpt, *flags)
    return losses(log), read_checkpoint(ckpt), log


@pytest.mark.parametrize("schedule,stages,pp,chunks", [
    ("gpipe", 2, 2, 1), ("1f1b", 2, 2, 1), ("interleaved", 4, 2, 2), ("1f1b", 4, 4, 1),
    # B and W of each backward apart (the stage programs' backward split by
    # their dataflow when loaded), and two chunks per rank in a V.
    ("zb-h1", 2, 2, 1), ("zb-h1", 4, 4, 1), ("zb-v", 4, 2, 2), ("dualpipe-v", 4, 2, 2)])
def test_pipeline_matches_one_rank(one_rank_four_micro_batches, tmp_path, schedule, stages,
                                   pp, chunks):
    # The step cut into stages run in the schedule's order over four
    # micro-batches: one rank's losses and weights (each stage computes the
    # same sums as the whole step; only where they run changes).
    run = run_pipeline(tmp_path, "pipe", pipeline_stages(stages, pp), pp, schedule, chunks)
    assert_same_run(run, one_rank_four_micro_batches)
    assert run[0][-1] < run[0][0] / 2


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_pipeline_and_data_parallel_on_four_ranks(one_rank_four_micro_batches, tmp_path,
                                                  zero):
    # 1F1B over pp = 2 with the batch over dp = 2 (ZeRO 1 and 3 over dp
    # too): the dp reduction and the global norm see each stage's
    # parameters once.
    run = run_pipeline(tmp_path, "ppdp", pipeline_stages(2, 2, 2), 2, "1f1b", dp=2,
                       zero=zero)
    assert_same_run(run, one_rank_four_micro_batches)


def test_pipeline_resumes_bit_for_bit_and_reshards(one_rank_four_micro_batches, tmp_path):
    # Interleaved over two ranks: 10 straight = 5 + resume + 5, bit for
    # bit; its checkpoint (each rank its own stages' tensors) then goes on
    # under one rank with the whole step, as one rank's run does.
    stages = pipeline_stages(4, 2)
    straight = run_pipeline(tmp_path, "straight", stages, 2, "interleaved", 2)
    assert read_log(straight[2].replace(".jsonl", ".rank1.jsonl"))[-1]["bubble_time_s"] > 0
    folder = pipeline_folder(str(tmp_path / "split"), stages, 2, "interleaved", 4, 2)
    log, ckpt = str(tmp_path / "split.jsonl"), str(tmp_path / "split.ckpt")
    train(folder, 2, "--steps", "10", "--stop-at", "5", "--log", log, "--checkpoint", ckpt)
    manifest = json.loads((latest(tmp_path / "split.ckpt") / "manifest.json").read_text())
    assert {t["name"]: t["shards"][0]["rank"] for t in manifest["tensors"]
            if t["kind"] == "parameter"} == {"w0": 0, "w1": 1, "w2": 0}
    whole = trainer_folder(str(tmp_path / "whole"), megatron_mlp(1, 1), 1, micro_batches=4)
    moved = str(tmp_path / "moved.ckpt")
    shutil.copytree(ckpt, moved)
    train(folder, 2, "--steps", "10", "--resume", "--log", log, "--checkpoint", ckpt)
    assert losses(log) == straight[0]
    assert all(np.array_equal(v, straight[1][k]) for k, v in read_checkpoint(ckpt).items())
    log1 = str(tmp_path / "whole.jsonl")
    train(whole, 1, "--steps", "10", "--resume", "--log", log1, "--checkpoint", moved)
    np.testing.assert_allclose(losses(log1), one_rank_four_micro_batches[0][5:],
                               rtol=RTOL, atol=ATOL)


def test_pipeline_with_too_few_stage_programs_is_one_line(tmp_path):
    folder = pipeline_folder(str(tmp_path / "p"), pipeline_stages(2, 2), 2, "interleaved",
                             4, 2)
    result = train(folder, 2, "--steps", "1", check=False)
    assert result.returncode != 0
    assert [l for l in result.stderr.splitlines() if l.startswith("trainer: error")] == [
        "trainer: error: rank 0: trainer.json lists 2 stages; pp 2 x chunks 2 needs 4"]


def test_a_pipeline_mesh_without_stage_programs_is_one_line(tmp_path):
    program = megatron_mlp(1, 1).replace("mesh tp=1 dp=1", "mesh tp=1 dp=1 pp=2")
    folder = trainer_folder(str(tmp_path / "p"), program, 2)
    result = train(folder, 2, "--steps", "1", check=False)
    assert result.returncode != 0
    assert [l for l in result.stderr.splitlines() if l.startswith("trainer: error")] == [
        "trainer: error: rank 0: the step program's mesh has pp=2 but trainer.json lists "
        'no pipeline stages ("stages"): this runtime runs a pipeline from one program '
        "per stage"]


def test_one_f_one_b_keeps_fewer_micro_batches_than_gpipe(tmp_path):
    # Two stages, four micro-batches: GPipe's first stage holds all four
    # forwards' values before the first backward, 1F1B's at most two (pp);
    # the stashes count as activations in the logged peak.
    peaks = {}
    for schedule in ("gpipe", "1f1b"):
        run = run_pipeline(tmp_path, schedule, pipeline_stages(2, 2), 2, schedule)
        peaks[schedule] = read_log(run[2])[-1]["peak_memory_bytes"]["activations"]
    assert peaks["1f1b"] < peaks["gpipe"]
