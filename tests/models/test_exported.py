"""Plans every model that real exporters wrote (models/exported, from
models/export_families.py: torchvision families and tiny Hugging Face
architectures through torch.onnx.export's legacy and dynamo exporters).

Each file must import and plan on 8 GPUs; the ones that do not are listed,
with the reason, in models/README.md and are not committed. Needs the build
(build/bin/bmc) and the files, which are committed (graph-only, small).
"""

from __future__ import annotations

import os
import subprocess
import sys

import onnx
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from exported_models import EXPORTED, FILES, IDS, ROOT, bound_dims, dim_flags  # noqa: E402

BMC = os.path.join(ROOT, "build", "bin", "bmc")
MAX_MODELS_BYTES = 20 * 1024 * 1024


def test_models_folder_under_budget():
    total = 0
    for folder in ("onnx", "exported"):
        path = os.path.join(ROOT, "models", folder)
        total += sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    assert total < MAX_MODELS_BYTES, f"models/onnx and models/exported hold {total:,} bytes"


def test_exports_are_committed():
    assert len(FILES) >= 20, f"{EXPORTED} holds {len(FILES)} exported models"


@pytest.mark.parametrize("path", FILES, ids=IDS)
def test_exported_model_plans(path):
    assert os.path.exists(BMC), f"{BMC} is missing: build the project first"
    dims = bound_dims(onnx.load(path, load_external_data=False))
    run = subprocess.run([BMC, "plan", path, "--gpus", "8"] + dim_flags(dims),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr.strip()
    assert "plan for" in run.stdout


# The fold line of the Hugging Face transformers (export_families.py builds
# each with 2 layers per stack): every layer folds into one block per stack,
# although the exporters compute the rotary tables, masks and position ids
# inside the first layer (bm-fold moves them out). `--layers 4` and `32`
# exports of the decoder families fold 4 -> 1 and 32 -> 1 (models/README.md).
# T5 is left out: its legacy export orders the first layer's attention ops
# differently from the second's, and its decoder's first layer computes the
# relative position bias; neither folds yet.
ONE_STACK = ["bert", "bloom", "clip_vision", "falcon", "gemma", "gemma2", "gpt2", "gpt_neox",
             "gptj", "llama", "mistral", "opt", "phi", "phi3", "qwen2", "qwen3", "roberta",
             "vit_hf"]
TWO_STACKS = ["bart", "whisper"]
FOLDED = [(path, "2 layers -> 1 unique block") for path, name in zip(FILES, IDS)
          if name.rsplit("-", 1)[0] in ONE_STACK] + [
          (path, "4 layers -> 2 unique blocks") for path, name in zip(FILES, IDS)
          if name.rsplit("-", 1)[0] in TWO_STACKS]


@pytest.mark.parametrize("path,line", FOLDED,
                         ids=[os.path.basename(p)[:-len(".onnx")] for p, _ in FOLDED])
def test_transformer_exports_fold_every_layer(path, line):
    dims = bound_dims(onnx.load(path, load_external_data=False))
    run = subprocess.run([BMC, "plan", path, "--gpus", "8"] + dim_flags(dims),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr.strip()
    folds = [l for l in run.stdout.splitlines() if l.startswith("fold")]
    assert folds and folds[0].split(None, 1)[1] == line, folds
