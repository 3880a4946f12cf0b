"""Plans every model that real exporters wrote (models/exported, from
models/export_families.py: torchvision families and tiny Hugging Face
architectures through torch.onnx.export's legacy and dynamo exporters).

Each file must import and plan on 8 GPUs; the ones that do not are listed,
with the reason, in models/README.md and are not committed. Needs the build
(build/bin/bmc) and the files, which are committed (graph-only, small).
"""

from __future__ import annotations

import glob
import os
import subprocess

import onnx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTED = os.path.join(ROOT, "models", "exported")
BMC = os.path.join(ROOT, "build", "bin", "bmc")
FILES = sorted(glob.glob(os.path.join(EXPORTED, "*.onnx")))
MAX_MODELS_BYTES = 20 * 1024 * 1024


def test_models_folder_under_budget():
    total = 0
    for folder in ("onnx", "exported"):
        path = os.path.join(ROOT, "models", folder)
        total += sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    assert total < MAX_MODELS_BYTES, f"models/onnx and models/exported hold {total:,} bytes"


def test_exports_are_committed():
    assert len(FILES) >= 20, f"{EXPORTED} holds {len(FILES)} exported models"


def dim_flags(path: str) -> list[str]:
    """--dim NAME=8 for the symbolic dims of the inputs but the batch (dim
    0, which the planner sets), as export_families.py plans them."""
    model = onnx.load(path, load_external_data=False)
    names = {d.dim_param for i in model.graph.input
             for d in list(i.type.tensor_type.shape.dim)[1:] if d.dim_param}
    return [f for n in sorted(names) for f in ("--dim", f"{n}=8")]


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(f)[:-5] for f in FILES])
def test_exported_model_plans(path):
    assert os.path.exists(BMC), f"{BMC} is missing: build the project first"
    run = subprocess.run([BMC, "plan", path, "--gpus", "8"] + dim_flags(path),
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr.strip()
    assert "plan for" in run.stdout
