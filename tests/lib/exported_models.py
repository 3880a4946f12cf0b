"""The models real exporters wrote (models/exported, from
models/export_families.py), and the sizes the tests bind their symbolic
dimensions to."""

from __future__ import annotations

import glob
import os

import onnx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXPORTED = os.path.join(ROOT, "models", "exported")
FILES = sorted(glob.glob(os.path.join(EXPORTED, "*.onnx")))
IDS = [os.path.basename(f)[: -len(".onnx")] for f in FILES]

# Every symbolic dim but the batch (dim 0 of each input, which the planner
# sets) is bound to this, as export_families.py plans them.
BOUND_DIM = 8


def bound_dims(model: onnx.ModelProto) -> dict[str, int]:
    """The symbolic dims of the graph inputs, but the batch, with their size."""
    names = {d.dim_param for i in model.graph.input
             for d in list(i.type.tensor_type.shape.dim)[1:] if d.dim_param}
    return {name: BOUND_DIM for name in sorted(names)}


def dim_flags(dims: dict[str, int]) -> list[str]:
    """`--dim NAME=VALUE` for each bound dim, as bmc plan and compile take them."""
    return [flag for name, value in dims.items() for flag in ("--dim", f"{name}={value}")]
