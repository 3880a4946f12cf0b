"""The planner's memory per pipeline stage is what the trainer holds, for
parameters several stages hold (embeddings tied to the output layer).

`bmc compile --gpus N --fix ...` with a cluster file of `runtime: bmrt`
writes the plan (plan.json) the trainer runs; `mpirun -np N trainer --log`
logs each rank's peak memory by kind. gpt3-tiny's LM head reads its token
embedding: every pipeline stage, the ones between the first and the last
too, holds a copy with its gradient and optimizer state, and under an
interleaved schedule each chunk of a rank writes its own gradient of it. The plan's parameters, gradients and
optimizer state of each stage equal the trainer's, byte for byte (the
activations and workspace are predicted within a margin: bench/README.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys

import pytest

from conftest import MODELS, read_log, run, tool

MPIRUN = shutil.which("mpirun")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(MPIRUN is None, reason="needs mpirun")

CASES = [
    ("gpt3-tiny", 4, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=0"),
    ("gpt3-tiny", 4, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=2"),
    ("gpt3-tiny", 4, "dp=2,tp=1,pp=2,mb=2,schedule=1f1b,zero=3"),
    ("gpt3-tiny-4l", 2, "dp=1,tp=1,pp=2,v=2,mb=2,schedule=interleaved"),
    # The stages between hold a copy too (its gradient share is zeros).
    ("gpt3-tiny-4l", 4, "dp=1,tp=1,pp=4,mb=1,schedule=1f1b"),
]
KINDS = {"params": "parameters", "grads": "gradients", "optimizer": "optimizer_state"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The calibrated CPU cluster of the tests, planned as bmrt runs."""
    path = str(tmp_path_factory.mktemp("cluster") / "bmrt.yaml")
    with open(os.path.join(ROOT, "tests", "data", "clusters", "calibrated-cpu.yaml")) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text + "runtime: bmrt\n")
    return path


def model_path(tmp_path_factory, model):
    """The zoo's file, or for "NAME-4l" the zoo's NAME with four layers."""
    if not model.endswith("-4l"):
        return os.path.join(MODELS, f"{model}.onnx")
    path = str(tmp_path_factory.mktemp("model") / f"{model}.onnx")
    sys.path.insert(0, os.path.join(ROOT, "models"))
    import zoo
    config = dataclasses.replace(zoo.BY_NAME[model[:-len("-4l")]], name=model, layers=4)
    zoo.save(zoo.build(config), path)
    return path


@pytest.mark.parametrize("model,ranks,fix", CASES)
def test_stage_memory_is_what_the_trainer_holds(tmp_path_factory, cluster, model, ranks, fix):
    out = str(tmp_path_factory.mktemp(model))
    run([tool("bmc"), "compile", model_path(tmp_path_factory, model), "-o", out,
         "--gpus", str(ranks), "--cluster", cluster, "--fix", fix])
    log = os.path.join(out, "run.jsonl")
    run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks),
         "-x", "OMP_NUM_THREADS=1", "-x", "OPENBLAS_NUM_THREADS=1",
         os.path.join(out, "trainer"), "--steps", "1", "--threads", "1", "--quiet",
         "--log", log])
    with open(os.path.join(out, "plan.json")) as f:
        plan = json.load(f)
    config = plan["config"]
    per_stage = config["dp"] * config["tp"]
    groups = plan["stage_memory"]
    for rank in range(ranks):
        stage = rank // per_stage  # pp outermost
        predicted = [g for g in groups if g["stage"] <= stage][-1]
        logged = rank_log(log, rank)[-1]["peak_memory_bytes"]
        for key, kind in KINDS.items():
            assert predicted[key] == logged[kind], (rank, kind, predicted, logged)
    # The embedding's gradient (fp32 [512, 64]; under ZeRO 2 and 3 the dp
    # shard) all-reduced over pp by every pipeline rank once per step.
    sums = [c for c in plan["collectives"] if c["axis"] == "pp" and c["kind"] == "all_reduce"]
    assert len(sums) == 1, plan["collectives"]
    shard = config["dp"] if config["zero_stage"] >= 2 else 1
    assert sums[0]["bytes"] == 512 * 64 * 4 / shard
    assert sums[0]["count_per_step"] == config["pp"]
    assert sums[0]["where"] == "shared gradients"


def rank_log(log, rank):
    """Rank `rank`'s records: rank 0 in `log`, the others beside it."""
    path = log if rank == 0 else log.replace(".jsonl", f".rank{rank}.jsonl")
    return read_log(path)
