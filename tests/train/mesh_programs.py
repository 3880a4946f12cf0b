"""Hand-written step programs partitioned over a device mesh, and trainer
folders around them: the runtime's own test of tensor, sequence and data
parallelism, ZeRO and resharding checkpoints, independent of the compiler.

The model is a Megatron MLP block behind a replicated linear layer,
    x0 = x @ w0;  y = relu(x0 @ w1) @ w2;  loss = sum(y * y) / (B * D)
with w1 split by columns and w2 by rows over tp (Megatron-LM's column- then
row-parallel pair: one all-reduce over tp forward, one backward), the
batch over dp, and every backward op written out by hand. The sequence-
parallel variant keeps x0 and y split over tp along the hidden dim between
the pair (shard_slice, all-gather before the pair, reduce-scatter after),
with a relu in the split region, as Megatron's sequence parallelism keeps
LayerNorm and dropout there.
"""

from __future__ import annotations

import json
import os

import numpy as np

from conftest import latest, read_safetensors, write_safetensors

BATCH, WIDTH, HIDDEN = 8, 8, 16


def _slot(index, kind, shape, name=None, sharding=None, partial=None, values=None):
    text = f"slot %{index} {kind} f32[{','.join(map(str, shape))}]"
    if name:
        text += f' "{name}"'
    if sharding is not None:
        text += " sharding=[" + ",".join(
            "[" + ",".join(f'"{a}"' for a in dim) + "]" for dim in sharding) + "]"
    if partial:
        text += " partial=[" + ",".join(f'"{a}"' for a in partial) + "]"
    if values is not None:
        text += " = " + " ".join(repr(float(v)) for v in values)
    return text


def _header(tp, dp):
    b, h = BATCH // dp, HIDDEN // tp
    params = [("w0", [WIDTH, WIDTH], [[], []]),
              ("w1", [WIDTH, h], [[], ["tp"]]),
              ("w2", [h, WIDTH], [["tp"], []])]
    lines = ["bmc-step-program 1", 'model "mlp"', f"mesh tp={tp} dp={dp}",
             _slot(0, "input", [b, WIDTH], "x", [["dp"], []])]
    for i, (name, shape, sharding) in enumerate(params):
        lines.append(_slot(1 + i, "param", shape, name, sharding))
    for i, (name, shape, sharding) in enumerate(params):
        lines.append(_slot(4 + i, "grad", shape, name, sharding, ["dp"]))
    scale = 1.0 / (BATCH * WIDTH)
    lines += [_slot(7, "const", [], values=[scale]),
              _slot(8, "const", [], values=[2 * scale])]
    return lines


def _program(tp, dp, values, instructions):
    lines = _header(tp, dp)
    lines += [_slot(i, "value", shape) for i, shape in values.items()]
    return "\n".join(lines + instructions) + "\n"


def megatron_mlp(tp: int, dp: int) -> str:
    b, h = BATCH // dp, HIDDEN // tp
    values = {9: [b, WIDTH], 10: [b, h], 11: [b, h], 12: [b, WIDTH], 13: [b, WIDTH],
              14: [b, WIDTH], 15: [], 16: [], 17: [b, WIDTH], 18: [b, h], 19: [b, h],
              20: [b, WIDTH], 21: [b, WIDTH]}
    return _program(tp, dp, values, [
        "%9 = matmul %0, %1  # x0",
        "%10 = matmul %9, %2  # column-parallel",
        "%11 = relu %10",
        "%12 = matmul %11, %3  # row-parallel: a partial sum over tp",
        '%13 = all_reduce %12 {axes="tp"}',
        "%14 = mul %13, %13",
        "%15 = reduce_sum %14 {axes=[0,1]}",
        "%16 = mul %15, %7  # loss",
        "%17 = mul %13, %8  # dy",
        "%6 = matmul %11, %17 {trans_a=1}",
        "%18 = matmul %17, %3 {trans_b=1}",
        '%19 = unary_grad %10, %18 {op="relu"}',
        "%5 = matmul %9, %19 {trans_a=1}",
        "%20 = matmul %19, %2 {trans_b=1}  # dx0: a partial sum over tp",
        '%21 = all_reduce %20 {axes="tp"}',
        "%4 = matmul %0, %21 {trans_a=1}",
        'loss %16 partial=["dp"]',
    ])


def sequence_parallel_mlp(tp: int, dp: int) -> str:
    b, h, s = BATCH // dp, HIDDEN // tp, WIDTH // tp
    values = {9: [b, WIDTH], 10: [b, s], 11: [b, s], 12: [b, WIDTH], 13: [b, h],
              14: [b, h], 15: [b, WIDTH], 16: [b, s], 17: [b, s], 18: [], 19: [],
              20: [b, s], 21: [b, WIDTH], 22: [b, h], 23: [b, h], 24: [b, WIDTH],
              25: [b, s], 26: [b, s], 27: [b, WIDTH]}
    return _program(tp, dp, values, [
        "%9 = matmul %0, %1  # x0",
        '%10 = shard_slice %9 {axes="tp", dim=1}',
        "%11 = relu %10  # the split region",
        '%12 = all_gather %11 {axes="tp", dim=1}',
        "%13 = matmul %12, %2  # column-parallel",
        "%14 = relu %13",
        "%15 = matmul %14, %3  # row-parallel",
        '%16 = reduce_scatter %15 {axes="tp", dim=1}',
        "%17 = mul %16, %16",
        "%18 = reduce_sum %17 {axes=[0,1]}",
        "%19 = mul %18, %7  # loss: a partial sum over tp",
        "%20 = mul %16, %8",
        '%21 = all_gather %20 {axes="tp", dim=1}',
        "%6 = matmul %14, %21 {trans_a=1}",
        "%22 = matmul %21, %3 {trans_b=1}",
        '%23 = unary_grad %13, %22 {op="relu"}',
        "%5 = matmul %12, %23 {trans_a=1}",
        "%24 = matmul %23, %2 {trans_b=1}",
        '%25 = reduce_scatter %24 {axes="tp", dim=1}',
        '%26 = unary_grad %10, %25 {op="relu"}',
        '%27 = all_gather %26 {axes="tp", dim=1}',
        "%4 = matmul %0, %27 {trans_a=1}",
        'loss %19 partial=["tp","dp"]',
    ])


def initial_weights(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"w0": (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32),
            "w1": (rng.standard_normal((WIDTH, HIDDEN)) / np.sqrt(WIDTH)).astype(np.float32),
            "w2": (rng.standard_normal((HIDDEN, WIDTH)) / np.sqrt(HIDDEN)).astype(np.float32)}


def trainer_folder(path: str, program: str, ranks: int, zero: int = 0,
                   micro_batches: int = 1, weights: dict | None = None,
                   **extra) -> str:
    """A folder the trainer runs as `bmc compile` would have written it."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "step.bmp"), "w") as f:
        f.write(program)
    write_safetensors(os.path.join(path, "params.safetensors"),
                      initial_weights() if weights is None else weights,
                      {"model_hash": "mlp-test"})
    with open(os.path.join(path, "plan.json"), "w") as f:
        f.write("{}")
    config = {"format": 1, "model": "mlp", "model_hash": "mlp-test", "task": "own-loss",
              "optimizer": "adamw", "precision": "fp32", "program": "step.bmp",
              "parameters": "params.safetensors", "plan": "plan.json",
              "micro_batch": BATCH, "micro_batches": micro_batches, "ranks": ranks,
              "zero": zero, **extra}
    with open(os.path.join(path, "trainer.json"), "w") as f:
        json.dump(config, f)
    return path


def read_checkpoint(folder: str, kind: str = "parameter") -> dict:
    """The global tensors of a checkpoint (its latest version, or `folder`
    itself if it is a version), unsharded or sharded (assembled here from
    the manifest's shards, independently of the runtime)."""
    if not os.path.exists(os.path.join(folder, "manifest.json")):
        folder = latest(folder)
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    if not manifest.get("sharded"):
        name = "model.safetensors" if kind == "parameter" else "optimizer.safetensors"
        return read_safetensors(os.path.join(folder, name))
    files, tensors = {}, {}
    for t in manifest["tensors"]:
        if t["kind"] != kind:
            continue
        whole = np.full(t["shape"], np.nan, dtype=np.float32)
        boxes = {}  # (offsets, shape) -> the box, flattened
        for s in t["shards"]:
            if s["file"] not in files:
                files[s["file"]] = read_safetensors(os.path.join(folder, s["file"]))
            key = (tuple(s["offsets"]), tuple(s["shape"]))
            box = boxes.setdefault(key, np.full(int(np.prod(s["shape"])), np.nan,
                                                dtype=np.float32))
            begin, end = s.get("flat_range", (0, box.size))
            box[begin:end] = files[s["file"]][t["name"]].reshape(-1)
        for (offsets, shape), box in boxes.items():
            whole[tuple(slice(o, o + n) for o, n in zip(offsets, shape))] = \
                box.reshape(shape)
        assert not np.isnan(whole).any(), f"the shards of {t['name']} leave holes"
        tensors[t["name"]] = whole
    return tensors


EXPERTS = 2  # = the ranks of the expert-parallel run


class _Steps:
    """Numbers value slots as instructions are written."""

    def __init__(self, first: int):
        self.slots, self.code, self.next = [], [], first

    def __call__(self, shape, text):
        index = self.next
        self.next += 1
        self.slots.append(_slot(index, "value", shape))
        self.code.append(f"%{index} = {text}")
        return f"%{index}"

    def into(self, slot, text):
        self.code.append(f"{slot} = {text}")


def _exchange(s, x, to_experts, ep):
    """Tokens to their experts (`to_experts`) or back, as the parallel run
    moves them with all_to_all over ep, or as one rank permutes them.

    Rank r of the parallel run holds global tokens r*b .. r*b + b-1 and
    sends its j-th to expert j // c (c = b / EXPERTS tokens per expert);
    each expert takes its tokens ordered by (rank, j)."""
    b = BATCH // EXPERTS
    c = b // EXPERTS
    if ep == EXPERTS:
        if to_experts:
            x3 = s([EXPERTS, c, WIDTH], f"reshape {x}")
            return s([1, EXPERTS * c, WIDTH],
                     f'all_to_all {x3} {{axes="ep", concat_dim=1, split_dim=0}}')
        back = s([EXPERTS, c, WIDTH],
                 f'all_to_all {x} {{axes="ep", concat_dim=0, split_dim=1}}')
        return s([b, WIDTH], f"reshape {back}")
    by_rank, by_expert = [EXPERTS, EXPERTS, c, WIDTH], [EXPERTS, EXPERTS, c, WIDTH]
    if to_experts:
        x4 = s(by_rank, f"reshape {x}")
        xt = s(by_expert, f"transpose {x4} {{permutation=[1,0,2,3]}}")
        return s([EXPERTS, EXPERTS * c, WIDTH], f"reshape {xt}")
    x4 = s(by_expert, f"reshape {x}")
    xt = s(by_rank, f"transpose {x4} {{permutation=[1,0,2,3]}}")
    return s([BATCH, WIDTH], f"reshape {xt}")


def mixture_of_experts(ep: int) -> str:
    """A replicated linear layer, then one expert MLP per token chosen by its
    position: with ep = 2 each rank holds one expert and half the batch and
    tokens travel by all_to_all; with ep = 1 one rank holds both experts
    and permutes the whole batch the same way."""
    b, local = BATCH // ep, EXPERTS // ep
    n = BATCH // EXPERTS  # tokens per expert
    scale = 1.0 / (BATCH * WIDTH)
    lines = ["bmc-step-program 1", 'model "moe"', f"mesh ep={ep}",
             _slot(0, "input", [b, WIDTH], "x", [["ep"], []]),
             _slot(1, "param", [WIDTH, WIDTH], "w0", [[], []]),
             _slot(2, "param", [local, WIDTH, WIDTH], "experts", [["ep"], [], []]),
             _slot(3, "grad", [WIDTH, WIDTH], "w0", [[], []], ["ep"]),
             _slot(4, "grad", [local, WIDTH, WIDTH], "experts", [["ep"], [], []]),
             _slot(5, "const", [], values=[scale]),
             _slot(6, "const", [], values=[2 * scale])]
    s = _Steps(7)
    x0 = s([b, WIDTH], "matmul %0, %1")
    a = _exchange(s, x0, True, ep)
    h = s([local, n, WIDTH], f"matmul {a}, %2  # each expert")
    r = s([local, n, WIDTH], f"relu {h}")
    y = _exchange(s, r, False, ep)
    squares = s([b, WIDTH], f"mul {y}, {y}")
    total = s([], f"reduce_sum {squares} {{axes=[0,1]}}")
    loss = s([], f"mul {total}, %5")
    dy = s([b, WIDTH], f"mul {y}, %6")
    dr = _exchange(s, dy, True, ep)
    dh = s([local, n, WIDTH], f'unary_grad {h}, {dr} {{op="relu"}}')
    s.into("%4", f"matmul {a}, {dh} {{trans_a=1}}")
    da = s([local, n, WIDTH], f"matmul {dh}, %2 {{trans_b=1}}")
    dx0 = _exchange(s, da, False, ep)
    s.into("%3", f"matmul %0, {dx0} {{trans_a=1}}")
    return "\n".join(lines + s.slots + s.code + [f'loss {loss} partial=["ep"]']) + "\n"


def expert_weights(seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    return {"w0": (rng.standard_normal((WIDTH, WIDTH)) / np.sqrt(WIDTH)).astype(np.float32),
            "experts": (rng.standard_normal((EXPERTS, WIDTH, WIDTH)) /
                        np.sqrt(WIDTH)).astype(np.float32)}


def _stage(pp, dp, slots, code, backward, ends):
    lines = ["bmc-step-program 1", 'model "mlp"', f"mesh pp={pp} dp={dp}"]
    lines += [_slot(i, kind, shape, name, sharding, partial, values)
              for i, (kind, shape, name, sharding, partial, values) in enumerate(slots)]
    return "\n".join(lines + code + ["backward"] + backward + ends) + "\n"


def _param(name, shape):
    return ("param", shape, name, None, None, None)


def _grad(name, shape):
    return ("grad", shape, name, None, ["dp"], None)


def _value(shape, kind="value"):
    return (kind, shape, None, None, None, None)


def pipeline_stages(stages: int, pp: int, dp: int = 1) -> list[str]:
    """megatron_mlp(1, dp) cut into 4 pipeline stages (x0 = x @ w0 | relu(x0
    @ w1) | y = a @ w2 | the loss), or 2 (the first two and the last two
    joined), each with its backward, for a mesh of `pp` pipeline ranks
    (and the batch over `dp`)."""
    B, D, H = BATCH // dp, WIDTH, HIDDEN
    scale = 1.0 / (BATCH * D)
    first = [("input", [B, D], "x", [["dp"], []], None, None), _param("w0", [D, D]),
             _grad("w0", [D, D])]
    if stages == 2:
        a = [*first, _param("w1", [D, H]), _grad("w1", [D, H]),
             _value([B, H], "activation_grad"), _value([B, D]), _value([B, H]),
             _value([B, H]), _value([B, H]), _value([B, D])]
        # %0 x, %1 w0, %2 dw0, %3 w1, %4 dw1, %5 da, %6 x0, %7 h, %8 a, %9 dh, %10 dx0
        stage_a = _stage(pp, dp, a, ["%6 = matmul %0, %1", "%7 = matmul %6, %3", "%8 = relu %7"],
                         ['%9 = unary_grad %7, %5 {op="relu"}',
                          "%4 = matmul %6, %9 {trans_a=1}",
                          "%10 = matmul %9, %3 {trans_b=1}",
                          "%2 = matmul %0, %10 {trans_a=1}"], ["send %8"])
        b = [_value([B, H], "activation"), _param("w2", [H, D]), _grad("w2", [H, D]),
             ("const", [], None, None, None, [scale]),
             ("const", [], None, None, None, [2 * scale]),
             _value([B, D]), _value([B, D]), _value([]), _value([]), _value([B, D]),
             _value([B, H])]
        # %0 a, %1 w2, %2 dw2, %3 c, %4 2c, %5 y, %6 y2, %7 sum, %8 loss, %9 dy, %10 da
        stage_b = _stage(pp, dp, b, ["%5 = matmul %0, %1", "%6 = mul %5, %5",
                                 "%7 = reduce_sum %6 {axes=[0,1]}", "%8 = mul %7, %3"],
                         ["%9 = mul %5, %4", "%2 = matmul %0, %9 {trans_a=1}",
                          "%10 = matmul %9, %1 {trans_b=1}"],
                         ["send_grad %10", 'loss %8 partial=["dp"]'])
        return [stage_a, stage_b]
    s0 = _stage(pp, dp, [*first, _value([B, D], "activation_grad"), _value([B, D])],
                ["%4 = matmul %0, %1"], ["%2 = matmul %0, %3 {trans_a=1}"], ["send %4"])
    # %0 x0, %1 w1, %2 dw1, %3 da, %4 h, %5 a, %6 dh, %7 dx0
    s1 = _stage(pp, dp, [_value([B, D], "activation"), _param("w1", [D, H]),
                     _grad("w1", [D, H]), _value([B, H], "activation_grad"),
                     _value([B, H]), _value([B, H]), _value([B, H]), _value([B, D])],
                ["%4 = matmul %0, %1", "%5 = relu %4"],
                ['%6 = unary_grad %4, %3 {op="relu"}', "%2 = matmul %0, %6 {trans_a=1}",
                 "%7 = matmul %6, %1 {trans_b=1}"], ["send %5", "send_grad %7"])
    # %0 a, %1 w2, %2 dw2, %3 dy, %4 y, %5 da
    s2 = _stage(pp, dp, [_value([B, H], "activation"), _param("w2", [H, D]),
                     _grad("w2", [H, D]), _value([B, D], "activation_grad"),
                     _value([B, D]), _value([B, H])],
                ["%4 = matmul %0, %1"],
                ["%2 = matmul %0, %3 {trans_a=1}", "%5 = matmul %3, %1 {trans_b=1}"],
                ["send %4", "send_grad %5"])
    # %0 y, %1 c, %2 2c, %3 y2, %4 sum, %5 loss, %6 dy
    s3 = _stage(pp, dp, [_value([B, D], "activation"),
                     ("const", [], None, None, None, [scale]),
                     ("const", [], None, None, None, [2 * scale]),
                     _value([B, D]), _value([]), _value([]), _value([B, D])],
                ["%3 = mul %0, %0", "%4 = reduce_sum %3 {axes=[0,1]}", "%5 = mul %4, %1"],
                ["%6 = mul %0, %2"], ["send_grad %6", 'loss %5 partial=["dp"]'])
    return [s0, s1, s2, s3]


def pipeline_folder(path: str, stages: list[str], pp: int, schedule: str,
                    micro_batches: int, chunks: int = 1, ranks: int = 0,
                    **extra) -> str:
    folder = trainer_folder(path, stages[0], ranks or pp, micro_batches=micro_batches,
                            pp=pp,
                            schedule=schedule, chunks=chunks,
                            stages=[f"stage{i}.bmp" for i in range(len(stages))], **extra)
    for i, text in enumerate(stages):
        with open(os.path.join(folder, f"stage{i}.bmp"), "w") as f:
            f.write(text)
    return folder
