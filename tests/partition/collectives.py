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
    r"\[([^\]]*)\] on @\w+.*? : tensor<([0-9x]*?)x?(f32|f16|bf16|i64|i32)>"
    r"(?: -> tensor<([0-9x]*?)x?(?:f32|f16|bf16|i64|i32)>)?")
BYTES = {"f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4}


def elements(dims):
    n = 1
    for d in filter(None, dims.split("x")):
        n *= int(d)
    return n


STATS = re.compile(r"(%\S+) = bm\.cross_entropy_stats ")
OPERAND = re.compile(r"bm\.\w+ (%[^ ,]+)")


def step_collectives(ir, measure="calls", float_bytes=4):
    """Counter of (kind, axes, phase) -> calls in @train_step of `ir`, or
    with measure="bytes" their buffers' bytes as the plan counts them (an
    all-gather's gathered buffer, every other kind's input) at the plan's
    `float_bytes` per float element: the partitioned step computes in fp32
    whatever the plan's precision; the loss's statistics are fp32 in both."""
    step = ir[ir.index("func.func @train_step"):]
    counts = Counter()
    phase = "forward"
    stats = set()
    for line in step.splitlines():
        if "bm.cross_entropy " in line or "bm.cross_entropy_from_stats " in line:
            phase = "backward"
        if STATS.search(line):
            stats.add(STATS.search(line).group(1))
        m = COLLECTIVE.search(line)
        if m:
            axes = ",".join(a.strip().strip('"') for a in m.group(2).split(","))
            buffer = m.group(5) if m.group(1) == "all_gather" else m.group(3)
            width = BYTES[m.group(4)]
            if m.group(4) == "f32" and OPERAND.search(line).group(1) not in stats:
                width = float_bytes
            size = elements(buffer) * width
            counts[(m.group(1), axes, phase)] += size if measure == "bytes" else 1
    return counts


def plan_collectives(plan, micro_batches=1, measure="calls"):
    """Counter of (kind, axis, phase) -> calls per micro-batch in a plan's
    JSON, or with measure="bytes" their buffers' bytes (recomputation's own
    collectives count as backward, where the partitioned step runs them)."""
    counts = Counter()
    for c in plan["collectives"]:
        phase = "backward" if c["phase"] == "recompute" else c["phase"]
        per_step = c["count_per_step"]
        if phase in ("forward", "backward"):
            per_step //= micro_batches
        counts[(c["kind"], c["axis"], phase)] += (
            per_step * c["bytes"] if measure == "bytes" else per_step)
    return counts
