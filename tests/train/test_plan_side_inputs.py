"""The planner prices T5's encoder output, which every decoder stage receives
beside the decoder's own stream, as the trainer moves and keeps it.

t5-tiny on pp2 puts the encoder on rank 0 and the decoder on rank 1: rank 1
receives two values per micro-batch (the decoder stream [2, 12, 64] and the
encoder output [2, 16, 64]) and keeps both for its backward (Executor's
stash, one per micro-batch in flight). The plan's "side inputs" transfer is
the encoder output's slot, sent and its gradient returned once per
micro-batch; the bias table the decoder makes from its own parameter crosses
no boundary. What a stage keeps per micro-batch in flight is measured as
test_plan_memory.py measures memory (the trainer's --log peak), from two
schedules: GPipe keeps all m micro-batches in flight, 1F1B pp - stage, so
the difference of the two peaks over the difference of the in-flight counts
is the stash of one micro-batch, and the plan's is the difference of its
predicted activations.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys

import pytest

from conftest import MODELS, run, tool
from test_plan_memory import ROOT, cluster, rank_log  # noqa: F401 (fixture)

MPIRUN = shutil.which("mpirun")
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")

FIX = "dp=1,tp=1,pp=2,mb=2,schedule={}"
MICRO_BATCHES = 4  # 8 samples (the default batch of t5-tiny on 2 GPUs) / 2
# Measured on the calibrated CPU cluster: rank 0 keeps 266368 bytes per
# micro-batch, predicted 270208 (1.01; the planner keeps the decoder's
# embedding where it is made, the trainer where it is received); rank 1
# 498148, predicted 539616 (1.08: the planner keeps the fp32 logits'
# gradient, 49152 bytes, with the saved values; the trainer makes it in
# its arena).
STASH_TOLERANCE = 0.10
DTYPE_BYTES = {"f32": 4, "f16": 2, "bf16": 2}


def in_flight(schedule, stage, pp=2, m=MICRO_BATCHES):
    """Micro-batches a stage holds at once (cost::inFlightMicroBatches)."""
    return m if schedule == "gpipe" else min(m, pp - stage)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, cluster):  # noqa: F811
    """Per schedule: the plan, each rank's measured peak activations, and
    the output directory."""
    result = {}
    for schedule in ("1f1b", "gpipe"):
        out = str(tmp_path_factory.mktemp(f"t5-{schedule}"))
        plan, log = compile_and_train(out, os.path.join(MODELS, "t5-tiny.onnx"), cluster,
                                      FIX.format(schedule))
        assert plan["config"]["num_micro_batches"] == MICRO_BATCHES
        measured = [rank_log(log, rank)[-1]["peak_memory_bytes"]["activations"]
                    for rank in range(2)]
        result[schedule] = (plan, measured, out)
    return result


def predicted_activations(plan, stage):
    return [g for g in plan["stage_memory"] if g["stage"] <= stage][-1]["activations"]


def compile_and_train(out, model, cluster, fix):
    """Compiles `model` with `fix`, trains one step on two ranks, and returns
    the plan and each rank's log path."""
    run([tool("bmc"), "compile", model, "-o", out, "--init", "random", "--gpus", "2",
         "--cluster", cluster, "--fix", fix])
    log = os.path.join(out, "run.jsonl")
    run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "2",
         "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1",
         os.path.join(out, "trainer"), "--steps", "1", "--threads", "1", "--quiet",
         "--log", log])
    with open(os.path.join(out, "plan.json")) as f:
        return json.load(f), log


def received_slots(program):
    """Bytes of each value a stage program receives (its activation slots)."""
    sizes = []
    with open(program) as f:
        for line in f:
            m = re.match(r"slot %\d+ activation (\w+)\[([\d,]*)\]", line)
            if m:
                n = 1
                for d in filter(None, m.group(2).split(",")):
                    n *= int(d)
                sizes.append(n * DTYPE_BYTES[m.group(1)])
    return sizes


def side_transfers(plan):
    """The side inputs' point-to-point items, by pipeline rank."""
    return {i["stage"]: i for i in plan["items"]
            if i["where"] == "side inputs" and i["what"] == "send_recv"}


ENCODER_OUTPUT = 2 * 16 * 64 * 4  # [micro-batch, source tokens, hidden] fp32


@pytest.mark.parametrize("stage", [0, 1])
def test_stash_per_micro_batch_is_what_the_trainer_keeps(runs, stage):
    (plan_1f1b, measured_1f1b, _), (plan_gpipe, measured_gpipe, _) = runs["1f1b"], runs["gpipe"]
    extra = in_flight("gpipe", stage) - in_flight("1f1b", stage)
    measured = (measured_gpipe[stage] - measured_1f1b[stage]) / extra
    predicted = (predicted_activations(plan_gpipe, stage)
                 - predicted_activations(plan_1f1b, stage)) / extra
    assert abs(predicted / measured - 1) <= STASH_TOLERANCE, (stage, predicted, measured)


def test_side_inputs_are_the_encoder_output_the_decoder_receives(runs):
    plan, _, out = runs["1f1b"]
    side = side_transfers(plan)
    # The decoder's stage alone receives it (the encoder's makes it).
    assert list(side) == [1], side
    received = received_slots(os.path.join(out, "stage1.bmp"))
    assert ENCODER_OUTPUT in received and len(received) == 2, received
    assert side[1]["bytes"] == ENCODER_OUTPUT
    # Forward and back, once per micro-batch.
    assert side[1]["count"] == 2 * MICRO_BATCHES
    assert received_slots(os.path.join(out, "stage0.bmp")) == []


def test_each_receiving_chunk_of_a_rank_receives_them(tmp_path_factory, cluster):  # noqa: F811
    """Interleaved pp2 x v2 over t5-tiny with six decoder layers: virtual
    stage 0 (rank 0) ends with the encoder, stages 1, 2 and 3 hold decoder
    layers, so rank 0 receives the encoder output in one chunk and rank 1
    in both. The plan prices one transfer each way per micro-batch for each
    stage program that receives it."""
    model = str(tmp_path_factory.mktemp("model") / "t5-tiny-6d.onnx")
    sys.path.insert(0, os.path.join(ROOT, "models"))
    import zoo
    zoo.save(zoo.build(dataclasses.replace(zoo.BY_NAME["t5-tiny"], name="t5-tiny-6d",
                                           dec_layers=6)), model)
    out = str(tmp_path_factory.mktemp("t5-interleaved"))
    plan, _ = compile_and_train(out, model, cluster,
                                "dp=1,tp=1,pp=2,v=2,mb=2,schedule=interleaved")
    assert plan["layers_per_stage"] == [2, 2, 2, 2]
    receiving = {0: 0, 1: 0}
    for stage in range(4):
        received = received_slots(os.path.join(out, f"stage{stage}.bmp"))
        receiving[stage % 2] += ENCODER_OUTPUT in received
    assert receiving == {0: 1, 1: 2}
    side = side_transfers(plan)
    for rank, chunks in receiving.items():
        assert side[rank]["bytes"] == ENCODER_OUTPUT
        assert side[rank]["count"] == 2 * chunks * MICRO_BATCHES, (rank, side[rank])
