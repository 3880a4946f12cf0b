"""The collectives of a partitioned training step, by kind, axis and phase.

Reads the IR that `bmc-opt ... bm-partition` prints: every collective op of
@train_step, its mesh axes and its local bytes; ops before the loss's
cross-entropy (or the vocabulary-parallel loss's merge of its
statistics) are forward, the rest backward.
"""
import re
from collections import Counter

COLLECTIVE = re.compile(
    r"bm\.(all_reduce|all_gather|reduce_scatter|all_to_all) %\S+ over "
    r"\[([^\]]*)\] on @\w+.*? : tensor<([0-9x]*?)x?(f32|f16|bf16|i64|i32)>")
BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4}


def step_collectives(ir):
    """Counter of (kind, axes, phase) -> calls in @train_step of `ir`."""
    step = ir[ir.index("func.func @train_step"):]
    counts = Counter()
    phase = "forward"
    for line in step.splitlines():
        if "bm.cross_entropy " in line or "bm.cross_entropy_from_stats " in line:
            phase = "backward"
        m = COLLECTIVE.search(line)
        if m:
            axes = ",".join(a.strip().strip('"') for a in m.group(2).split(","))
            counts[(m.group(1), axes, phase)] += 1
    return counts


def plan_collectives(plan, micro_batches=1):
    """Counter of (kind, axis, phase) -> calls per micro-batch in a plan's
    JSON (recomputation's own collectives count as backward, where the
    partitioned step runs them)."""
    counts = Counter()
    for c in plan["collectives"]:
        phase = "backward" if c["phase"] == "recompute" else c["phase"]
        per_step = c["count_per_step"]
        if phase in ("forward", "backward"):
            per_step //= micro_batches
        counts[(c["kind"], c["axis"], phase)] += per_step
    return counts
