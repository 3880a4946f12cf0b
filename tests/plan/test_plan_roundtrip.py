"""Every plan `bmc plan -o` writes is read back (issue 24, "consistency
first"): over zoo models and the choices `--fix` offers, the file that
`bmc plan` writes must be accepted by `bmc report` and, for the tiny models
(the ones with weights, which compile), by `bmc compile --plan`. The
reader checks that the plan's numbers agree (the items against the step
time, the timeline's end against it, the worst stage's memory against the
stages: bm::plan::inconsistency); the planner runs the same check before it
prints or writes anything, so a disagreement shows as `bmc plan` failing
with the item that differs.

A configuration a model cannot take (`bmc plan` refuses it with its
one-line reason: no pipeline for one layer, interleaving that does not
divide, ZeRO without dp, ...) is skipped with that reason, not counted as a
pass. CI runs a sample that covers every value of every choice; the whole
cross product runs under BMC_TEST_FULL=1 (`scripts/test --full`).
"""
import itertools
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "build", "bin")
MODELS = os.path.join(ROOT, "models", "onnx")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
FULL = bool(os.environ.get("BMC_TEST_FULL"))

# Models with weights (compiled too) on 4 GPUs, and full-size graph-only
# ones (planned from shapes) on their size of cluster.
TINY = ["gpt3-tiny", "llama2-tiny", "hf-llama2-tiny", "hf-gpt2-tiny",
        "bert-tiny", "t5-tiny", "vit-tiny", "moe-tiny", "wresnet-tiny"]
LARGE = {"gpt3-175b": 1024, "llama2-70b": 512, "moe-27b": 64, "t5-large": 64}
TINY_GPUS = 4

# The choices, one axis each ("" leaves it to the search).
# tp=2,tp2=2: a 2-D tensor-parallel grid (issue 29).
MESHES = ["", "dp=4", "tp=2", "pp=2", "dp=2,tp=2", "dp=2,pp=2", "tp=2,pp=2",
          "tp=2,tp2=2"]
ZERO = ["zero=0", "zero=1", "zero=2", "zero=3"]
RECOMPUTE = ["recompute=none", "recompute=selective", "recompute=full"]
SCHEDULES = ["", "schedule=gpipe", "schedule=1f1b", "schedule=interleaved,v=2",
             "schedule=interleaved", "schedule=zb-h1", "schedule=zb-v",
             "schedule=dualpipe-v"]
STREAMS = ["", "stream=replicated", "stream=sequence", "stream=hidden"]
MICRO_BATCHES = ["", "mb=1", "mb=2"]
# The optimizer on the devices or offloaded to the host (issue 29).
OFFLOAD = ["", "offload=none", "offload=optimizer"]

AXES = [MESHES, ZERO, RECOMPUTE, SCHEDULES, STREAMS, MICRO_BATCHES, OFFLOAD]


def join(*parts):
    return ",".join(p for p in parts if p)


def large_mesh(mesh, gpus):
    """The tiny meshes scaled to a large model's cluster: dp=4 takes what
    is left, tp and pp keep the shapes a full-size model plans with."""
    scaled = {"dp=4": "", "tp=2": "tp=8", "pp=2": "pp=8", "dp=2,tp=2": "dp=8,tp=8",
              "dp=2,pp=2": "dp=8,pp=8", "tp=2,pp=2": "tp=8,pp=8",
              "tp=2,tp2=2": "tp=8,tp2=8"}
    return scaled.get(mesh, mesh)


def sample():
    """CI's sample: for every model, every value of every axis once (the
    others left to the search; the defaults, zero=0 aside, are what the
    search mostly picks anyway), ZeRO under a pipeline, and a few
    combinations of all axes (the cases that once failed: ZeRO-3 on every
    transformer, tied embeddings over pipeline stages)."""
    defaults = {"recompute=none", "stream=replicated", "mb=1",
                "schedule=interleaved", "offload=none"}  # its v=2 stands for it
    fixes = set()
    for axis in AXES:
        fixes.update(v for v in axis if v and v not in defaults)
    fixes.update(join("pp=2", z, "schedule=1f1b") for z in ("zero=1", "zero=3"))
    fixes.update({join("dp=2", "zero=3", "recompute=full"),
                  join("tp=2,pp=2", "schedule=interleaved,v=2", "zero=3", "recompute=selective"),
                  join("dp=2,pp=2", "schedule=gpipe", "zero=2", "mb=1"),
                  join("tp=2", "stream=sequence", "zero=3", "recompute=full"),
                  join("dp=2,pp=2", "schedule=1f1b", "zero=1", "offload=optimizer"),
                  join("dp=2,tp=2", "zero=3", "offload=optimizer")})
    return sorted(fixes)


# Expert parallelism, for the models with experts: CI's sample, or every
# choice above with ep=2 under BMC_TEST_FULL.
EXPERT_SAMPLE = ["ep=2", "ep=2,zero=3", "ep=2,pp=2,schedule=1f1b", "ep=2,dp=2,tp=2,zero=2"]


def cross_product():
    return sorted({join(*choice) for choice in itertools.product(*AXES)})


def cases():
    fixes = cross_product() if FULL else sample()
    all_cases = []
    for model in TINY + list(LARGE):
        extra = []
        if "moe" in model:
            extra = [join(f, "ep=2") for f in fixes] if FULL else EXPERT_SAMPLE
        for fix in fixes + extra:
            all_cases.append((model, fix))
    return all_cases


def gpus_and_fix(model, fix):
    if model in LARGE:
        gpus = LARGE[model]
        parts = fix.split(",")
        mesh = ",".join(p for p in parts if p.split("=")[0] in ("dp", "tp", "pp"))
        rest = [p for p in parts if p.split("=")[0] not in ("dp", "tp", "pp")]
        fix = join(large_mesh(mesh, gpus), *rest)
        return gpus, fix
    return TINY_GPUS, fix


def bmc(*args):
    return subprocess.run([os.path.join(BIN, "bmc"), *args], capture_output=True, text=True,
                          env=ENV, timeout=600)


def one_line(result):
    lines = (result.stderr or result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit {result.returncode}"


# Refusals that are bmc's own word that the model cannot take these
# choices (the configuration does not exist), as opposed to a planner bug.
CANNOT_TAKE = ("--fix", "no configuration", "no plan fits in memory", "needs pp > 1",
               "needs schedule=interleaved", "must divide", "needs the model's", "has no expert",
               "needs dp > 1", "no stream", "cannot")


@pytest.mark.parametrize("model,fix", cases(), ids=[f"{m}:{f}" for m, f in cases()])
def test_plan_reads_back(model, fix, tmp_path):
    gpus, fix = gpus_and_fix(model, fix)
    check_reads_back(model, gpus, fix, tmp_path)


# On a cluster whose host is apart from its devices bmrt runs Adam's and
# SGD's offloaded step behind the next forward (items with hidden seconds),
# LAMB's after the backward.
BMRT_CLUSTER = os.path.join(os.path.dirname(__file__), "..", "data", "clusters",
                            "calibrated-cpu.yaml")
BMRT_OFFLOAD = [("gpt3-tiny", 1, "dp=1,tp=1,pp=1,offload=optimizer", "adam"),
                ("gpt3-tiny", 2, "dp=2,tp=1,pp=1,zero=1,offload=optimizer", "sgd"),
                ("llama2-tiny", 2, "dp=1,tp=2,pp=1,offload=optimizer", "adam"),
                ("t5-tiny", 2, "dp=2,tp=1,pp=1,zero=3,offload=optimizer", "lamb")]


@pytest.mark.parametrize("model,gpus,fix,optimizer", BMRT_OFFLOAD,
                         ids=[f"{m}:{f}:{o}" for m, _, f, o in BMRT_OFFLOAD])
def test_offloaded_plan_on_bmrt_reads_back(model, gpus, fix, optimizer, tmp_path):
    cluster = tmp_path / "bmrt.yaml"
    with open(BMRT_CLUSTER) as f:
        cluster.write_text(f.read() + "runtime: bmrt\nhost_link_gbps: 5\n"
                           "host_memory_gib: 16\nhost_optimizer_gbps: 5\n")
    check_reads_back(model, gpus, fix, tmp_path, "--cluster", str(cluster),
                     "--optimizer", optimizer)
    items = [i for i in plan_json(tmp_path / "plan.json")["items"]
             if i["what"] in ("host optimizer step", "parameters to the host")]
    step = [i for i in items if i["what"] == "host optimizer step"]
    assert step and all((i["hidden_seconds"] > 0) == (optimizer != "lamb") for i in step)


def check_reads_back(model, gpus, fix, tmp_path, *extra):
    plan = tmp_path / "plan.json"
    args = ["plan", os.path.join(MODELS, model + ".onnx"), "--gpus", str(gpus),
            "--alternatives", "1", "-o", str(plan), *extra]
    if fix:
        args += ["--fix", fix]
    made = bmc(*args)
    if made.returncode != 0:
        reason = one_line(made)
        assert "planner bug" not in reason and "inconsistent" not in reason, reason
        assert reason.startswith("bmc: error: ") and any(r in reason for r in CANNOT_TAKE), \
            f"bmc plan {model} --gpus {gpus} --fix {fix}: {reason}"
        pytest.skip(reason)
    assert plan.exists(), f"bmc plan exited 0 but wrote no {plan}"

    report = bmc("report", str(plan))
    assert report.returncode == 0, f"bmc report refuses the plan of --fix {fix}: {one_line(report)}"

    if model in LARGE:
        return
    compiled = bmc("compile", os.path.join(MODELS, model + ".onnx"), "--plan", str(plan),
                   "-o", str(tmp_path / "out"))
    assert compiled.returncode == 0, \
        f"bmc compile --plan refuses the plan of --fix {fix}: {one_line(compiled)}"
    # The plan the compile writes beside the trainer is the one it read.
    written = tmp_path / "out" / "plan.json"
    assert written.read_bytes() == plan.read_bytes()


T5 = os.path.join(MODELS, "t5-tiny.onnx")


def plan_json(path):
    with open(path) as f:
        return json.load(f)


@pytest.mark.parametrize("seq_args,dims", [
    ([], {"dec_seq": 12, "seq": 16}),             # the model's bm.dim defaults
    (["--seq", "32"], {"dec_seq": 32, "seq": 32}),  # --seq binds every token input
    (["--dim", "dec_seq=8"], {"dec_seq": 8, "seq": 16}),
])
def test_symbolic_dims_round_trip(seq_args, dims, tmp_path):
    """An encoder-decoder has two token lengths (T5's 'seq' and 'dec_seq').
    The plan records every symbolic dimension it bound, `bmc compile --plan`
    binds exactly those (not the sequence length by position, which gave
    the decoder the encoder's length: a model that folds differently from
    the one planned), and the plan it writes beside the trainer is the same
    file, which compiles again."""
    plan = tmp_path / "plan.json"
    made = bmc("plan", T5, "--gpus", "2", "--fix", "dp=2", *seq_args, "-o", str(plan))
    assert made.returncode == 0, one_line(made)
    written = plan_json(plan)
    assert written["symbolic_dims"] == dims
    assert written["sequence_length"] == max(dims.values())
    first = bmc("compile", T5, "--plan", str(plan), "-o", str(tmp_path / "a"))
    assert first.returncode == 0, one_line(first)
    assert (tmp_path / "a" / "plan.json").read_bytes() == plan.read_bytes()
    again = bmc("compile", T5, "--plan", str(tmp_path / "a" / "plan.json"),
                "-o", str(tmp_path / "b"))
    assert again.returncode == 0, one_line(again)
    # The compile without --plan records the same dimensions.
    direct = bmc("compile", T5, "--gpus", "2", "--fix", "dp=2,tp=1,pp=1", *seq_args,
                 "-o", str(tmp_path / "c"))
    assert direct.returncode == 0, one_line(direct)
    assert plan_json(tmp_path / "c" / "plan.json")["symbolic_dims"] == dims


def test_symbolic_dims_disagreeing_flags_and_old_plans(tmp_path):
    plan = tmp_path / "plan.json"
    made = bmc("plan", T5, "--gpus", "2", "--fix", "dp=2", "-o", str(plan))
    assert made.returncode == 0, one_line(made)
    other = bmc("compile", T5, "--plan", str(plan), "--dim", "dec_seq=10",
                "-o", str(tmp_path / "x"))
    assert other.returncode != 0
    assert one_line(other) == \
        f"bmc: error: plan '{plan}' is for dec_seq = 12 but --dim dec_seq says 10"
    # A plan written before the key: its sequence length says one of the
    # two lengths, so it is refused in one line, unless --dim names both.
    old = plan_json(plan)
    del old["symbolic_dims"]
    old_plan = tmp_path / "old.json"
    old_plan.write_text(json.dumps(old, indent=2))
    refused = bmc("compile", T5, "--plan", str(old_plan), "-o", str(tmp_path / "y"))
    assert refused.returncode != 0
    assert one_line(refused) == (
        f"bmc: error: plan '{old_plan}' does not record the values of the model's "
        "symbolic dimensions (dec_seq, seq): it was written by an older bmc; plan "
        "again, or name each with --dim")
    named = bmc("compile", T5, "--plan", str(old_plan), "--dim", "seq=16",
                "--dim", "dec_seq=12", "-o", str(tmp_path / "z"))
    assert named.returncode == 0, one_line(named)


@pytest.mark.parametrize("model", ["gpt3-tiny", "vit-tiny"])
def test_no_symbolic_dims_key_without_a_second_length(model, tmp_path):
    """A model whose only symbolic dimension (but the batch) is 'seq', or
    that has none, writes no `symbolic_dims`: its plan keeps its bytes."""
    plan = tmp_path / "plan.json"
    made = bmc("plan", os.path.join(MODELS, model + ".onnx"), "--gpus", "2",
               "--fix", "dp=2", "-o", str(plan))
    assert made.returncode == 0, one_line(made)
    assert "symbolic_dims" not in plan_json(plan)
