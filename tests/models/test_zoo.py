"""Checks every model of the zoo (models/onnx, see models/README.md).

Needs only numpy, onnx, onnxruntime and pytest (scripts/requirements.txt):
  .venv/bin/python -m pytest tests/models
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")
ONNX_DIR = os.path.join(MODELS, "onnx")
sys.path.insert(0, MODELS)
import zoo  # noqa: E402

import onnxruntime as ort  # noqa: E402  (scripts/requirements.txt: never skip)

CONFIGS = zoo.CONFIGS
IDS = [c.name for c in CONFIGS]
TRANSFORMER_FAMILIES = ("gpt", "llama", "bert", "t5", "moe")
MAX_TOTAL_BYTES = 20 * 1024 * 1024


@functools.lru_cache(maxsize=None)
def load(name: str) -> onnx.ModelProto:
    return onnx.load(os.path.join(ONNX_DIR, f"{name}.onnx"), load_external_data=False)


def meta(m: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in m.metadata_props}


def numel(t: onnx.TensorProto) -> int:
    return int(np.prod(list(t.dims), dtype=np.int64))


def dims(v: onnx.ValueInfoProto) -> list:
    return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]


def session(path_or_bytes):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path_or_bytes, so, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------------------
# the set of files
# ---------------------------------------------------------------------------

def test_every_file_has_a_config_and_back():
    files = {f[:-5] for f in os.listdir(ONNX_DIR) if f.endswith(".onnx")}
    assert files == set(IDS)
    assert not [f for f in os.listdir(ONNX_DIR) if f.endswith(".data")], \
        "external weight files must not be committed"


def test_total_size_under_budget():
    total = sum(os.path.getsize(os.path.join(ONNX_DIR, f)) for f in os.listdir(ONNX_DIR))
    assert total < MAX_TOTAL_BYTES, f"models/onnx is {total:,} bytes"


def test_names_are_lowercase_with_dashes():
    for n in IDS:
        assert re.fullmatch(r"[a-z0-9][a-z0-9.\-]*", n), n


# ---------------------------------------------------------------------------
# per model
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("c", CONFIGS, ids=IDS)
def test_checker(c, tmp_path, monkeypatch):
    m = load(c.name)
    if not c.tiny:
        # The checker's only external-data check is that the file exists:
        # give it an empty placeholder so that every other check runs.
        (tmp_path / f"{c.name}.onnx.data").touch()
        monkeypatch.chdir(tmp_path)
    onnx.checker.check_model(m, full_check=True)


@pytest.mark.parametrize("c", CONFIGS, ids=IDS)
def test_parameter_count(c):
    m = load(c.name)
    n = zoo.param_count(m)
    assert n == zoo.expected_params(c), "graph and analytic formula disagree"
    assert meta(m)["bm.params"] == str(n)
    if c.published:
        pub = zoo.published_value(c.published)
        tol = zoo.tolerance(c)
        assert abs(n - pub) <= tol * pub, \
            f"{n:,} vs published {c.published} (tolerance {tol:.2%})"
        assert meta(m)["bm.published_params"] == c.published


@pytest.mark.parametrize("c", CONFIGS, ids=IDS)
def test_initializers(c):
    m = load(c.name)
    names = [t.name for t in m.graph.initializer]
    assert len(names) == len(set(names))
    used = {x for n in m.graph.node for x in n.input}
    assert set(names) <= used, f"unused initializers: {sorted(set(names) - used)[:5]}"
    for t in m.graph.initializer:
        if zoo.is_parameter(t.name):
            assert t.data_type == TensorProto.FLOAT, t.name
        if not c.exported:
            assert not t.name.startswith(zoo.CONST_PREFIX), t.name
    if c.tiny:
        assert all(t.data_location != TensorProto.EXTERNAL for t in m.graph.initializer)
        return
    # graph-only: weights reference "<model>.onnx.data" as if it existed
    ext = [t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL]
    embedded = [t for t in m.graph.initializer if t.data_location != TensorProto.EXTERNAL]
    assert all(t.name.startswith(zoo.CONST_PREFIX) for t in embedded)
    assert all(numel(t) <= 16 for t in embedded)
    end = 0
    for t in ext:
        kv = {e.key: e.value for e in t.external_data}
        assert kv["location"] == f"{c.name}.onnx.data"
        assert meta(m)["bm.external_data"] == kv["location"]
        off, length = int(kv["offset"]), int(kv["length"])
        assert off >= end and off % zoo.EXTERNAL_ALIGN == 0
        assert length == numel(t) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        assert not t.raw_data and not t.float_data
        end = off + length


@pytest.mark.parametrize("c", CONFIGS, ids=IDS)
def test_interface(c):
    m = load(c.name)
    md = meta(m)
    opsets = {o.domain: o.version for o in m.opset_import}
    assert m.ir_version == 8
    if c.exported:
        assert opsets == {"": 18}
    else:
        assert opsets == {"": zoo.OPSET}
        ops = {n.op_type for n in m.graph.node}
        assert ops <= zoo.ALLOWED_OPS, ops - zoo.ALLOWED_OPS
    node_names = [n.name for n in m.graph.node]
    assert all(node_names) and len(set(node_names)) == len(node_names)
    assert md["bm.family"] == c.family and md["bm.form"] == c.form and md["bm.source"] == c.source
    ins = {i.name: i for i in m.graph.input}
    (out,) = m.graph.output
    assert out.name == "logits" and out.type.tensor_type.elem_type == TensorProto.FLOAT
    if c.family in ("vit", "wresnet"):
        assert list(ins) == ["pixel_values"]
        assert dims(ins["pixel_values"]) == ["batch", 3, 224, 224]
        assert dims(out) == ["batch", c.classes]
        return
    assert dims(ins["input_ids"]) == ["batch", "seq"]
    assert ins["input_ids"].type.tensor_type.elem_type == TensorProto.INT64
    assert md["bm.dim.seq"] == str(c.seq)
    if c.family == "t5":
        assert list(ins) == ["input_ids", "decoder_input_ids"]
        assert dims(ins["decoder_input_ids"]) == ["batch", "dec_seq"]
        assert md["bm.dim.dec_seq"] == str(c.dec_seq)
        assert dims(out) == ["batch", "dec_seq", c.vocab]
    else:
        assert list(ins) == ["input_ids"]
        assert dims(out) == ["batch", "seq", c.vocab]


@pytest.mark.parametrize("c", CONFIGS, ids=IDS)
def test_shape_inference_keeps_symbolic_output(c):
    inferred = onnx.shape_inference.infer_shapes(load(c.name), strict_mode=True)
    assert dims(inferred.graph.output[0]) == dims(load(c.name).graph.output[0])


LAYER = re.compile(r"^(?:model\.|transformer\.|bert\.encoder\.)?"
                   r"((?:encoder\.block|decoder\.block|blocks|layers|layer|h)\.)(\d+)[./]")


def layer_ops(m: onnx.ModelProto, skip_constants: bool) -> dict[tuple[str, int], list[str]]:
    """op types of each layer, keyed by (stack, index), in graph order."""
    out: dict[tuple[str, int], list[str]] = {}
    for n in m.graph.node:
        if skip_constants and n.op_type == "Constant":
            continue
        scope = next((p.value for p in n.metadata_props if p.key == "bm.scope"), None)
        key = (scope + ".") if scope is not None else n.name
        g = LAYER.match(key)
        if g:
            out.setdefault((g.group(1), int(g.group(2))), []).append(n.op_type)
    return out


@pytest.mark.parametrize("c", [c for c in CONFIGS if c.family in TRANSFORMER_FAMILIES + ("vit",)],
                         ids=[c.name for c in CONFIGS if c.family in TRANSFORMER_FAMILIES + ("vit",)])
def test_layers_are_structurally_identical(c):
    """Same ops in the same order in every layer, so a structural-hashing pass
    folds them. In the HF exports the exporter creates each distinct Constant
    once (in the first layer that needs it) and later layers refer to it:
    there Constant nodes are left out of the comparison."""
    layers = layer_ops(load(c.name), skip_constants=c.exported)
    stacks = {s for s, _ in layers}
    assert sum(1 for _ in layers) == c.layers + c.dec_layers, sorted(layers)[:4]
    for s in stacks:
        idx = sorted(i for t, i in layers if t == s)
        period = 2 if c.family == "moe" else 1   # MoE: even layers MoE, odd dense
        for i in idx[period:]:
            assert layers[(s, i)] == layers[(s, i - period)], f"{s}{i} differs from {s}{i - period}"


@pytest.mark.parametrize("c", [c for c in CONFIGS if not c.exported],
                         ids=[c.name for c in CONFIGS if not c.exported])
def test_committed_file_is_regenerated_bit_for_bit(c):
    """zoo.py is deterministic and the committed file is up to date."""
    with open(os.path.join(ONNX_DIR, f"{c.name}.onnx"), "rb") as f:
        committed = f.read()
    assert zoo.build(c).SerializeToString(deterministic=True) == committed, \
        "regenerate with: python models/zoo.py --out models/onnx"


def feeds_for(c, batch: int, seq: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    if c.family in ("vit", "wresnet"):
        return {"pixel_values": rng.standard_normal((batch, 3, c.image, c.image)).astype(np.float32)}
    f = {"input_ids": rng.integers(0, c.vocab, (batch, seq), dtype=np.int64)}
    if c.family == "t5":
        f["decoder_input_ids"] = rng.integers(0, c.vocab, (batch, max(1, seq - 3)), dtype=np.int64)
    return f


def expected_shape(c, feeds):
    if c.family in ("vit", "wresnet"):
        return (feeds["pixel_values"].shape[0], c.classes)
    ids = feeds["decoder_input_ids" if c.family == "t5" else "input_ids"]
    return ids.shape + (c.vocab,)


TINY = [c for c in CONFIGS if c.tiny]


@pytest.mark.parametrize("c", TINY, ids=[c.name for c in TINY])
def test_tiny_runs_in_onnxruntime(c):
    sess = session(os.path.join(ONNX_DIR, f"{c.name}.onnx"))
    shapes = [(2, c.seq)] if c.family in ("vit", "wresnet") else [(2, c.seq), (3, 5)]
    if c.family == "moe":
        shapes = [(2, c.seq), (3, c.seq)]   # tokens are grouped by `group`
    for batch, seq in shapes:
        feeds = feeds_for(c, batch, seq)
        (out,) = sess.run(None, feeds)
        assert out.shape == expected_shape(c, feeds)
        assert out.dtype == np.float32 and np.isfinite(out).all()
        assert out.std() > 1e-3


def test_causal_models_are_causal():
    """Changing a later token does not change earlier logits (GPT, LLaMA)."""
    for name in ("gpt3-tiny", "llama2-tiny", "hf-gpt2-tiny", "hf-llama2-tiny"):
        c = zoo.BY_NAME[name]
        sess = session(os.path.join(ONNX_DIR, f"{name}.onnx"))
        f = feeds_for(c, 1, c.seq)
        (a,) = sess.run(None, f)
        f["input_ids"] = f["input_ids"].copy()
        f["input_ids"][0, -1] = (f["input_ids"][0, -1] + 1) % c.vocab
        (b,) = sess.run(None, f)
        np.testing.assert_allclose(a[:, :-1], b[:, :-1], rtol=1e-5, atol=1e-6, err_msg=name)
        assert not np.allclose(a[:, -1], b[:, -1]), name


# ---------------------------------------------------------------------------
# moe-tiny against an independent numpy port of Alpa's GShard layer
# (alpa/model/moe.py: top2_gating and FlaxPositionWiseMoELayer)
# ---------------------------------------------------------------------------

def _ln(x, w, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


_erf = np.vectorize(math.erf)


def _one_hot(i, n):
    return np.eye(n, dtype=np.float64)[i]


def _top2_gating(gates):  # GSE -> (GSEC, GSEC)
    G, S, E = gates.shape
    C = 2 * S // E
    index_1 = gates.argmax(-1)
    mask_1 = _one_hot(index_1, E)
    gate_1 = np.einsum("gse,gse->gs", gates, mask_1)
    gates_without_top_1 = gates * (1 - mask_1)
    index_2 = gates_without_top_1.argmax(-1)
    mask_2 = _one_hot(index_2, E)
    gate_2 = np.einsum("gse,gse->gs", gates_without_top_1, mask_2)
    pos_1 = np.cumsum(mask_1, axis=-2) - mask_1
    mask_1 = mask_1 * (pos_1 < C)
    pos_1 = np.einsum("gse,gse->gs", pos_1, mask_1)
    mask_1_count = mask_1.sum(-2)
    mask_1_flat = mask_1.sum(-1)
    pos_2 = np.cumsum(mask_2, axis=-2) - mask_2 + mask_1_count[:, None, :]
    mask_2 = mask_2 * (pos_2 < C)
    pos_2 = np.einsum("gse,gse->gs", pos_2, mask_2)
    mask_2_flat = mask_2.sum(-1)
    gate_1 = gate_1 * mask_1_flat
    gate_2 = gate_2 * mask_2_flat
    denom = gate_1 + gate_2
    denom = np.where(denom > 0, denom, 1.0)
    gate_1, gate_2 = gate_1 / denom, gate_2 / denom
    a = (gate_1 * mask_1_flat)[..., None] * _one_hot(index_1, E)
    first = np.einsum("gse,gsc->gsec", a, _one_hot(pos_1.astype(int), C))
    a = (gate_2 * mask_2_flat)[..., None] * _one_hot(index_2, E)
    second = np.einsum("gse,gsc->gsec", a, _one_hot(pos_2.astype(int), C))
    combined = first + second
    return combined, (combined != 0).astype(np.float64), int((mask_1_flat + mask_2_flat < 2).sum())


def _moe_reference(c, W, ids):
    H, nh = c.hidden, c.heads
    hd = H // nh
    B, S = ids.shape

    def lin(x, n):
        return x @ W[f"{n}.weight"] + W[f"{n}.bias"]

    def attention(x, p):
        def heads(t):
            return t.reshape(B, S, nh, hd).transpose(0, 2, 1, 3)
        q, k, v = (heads(lin(x, f"{p}.attention.{n}")) for n in ("query", "key", "value"))
        ctx = _softmax(q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)) @ v
        return lin(ctx.transpose(0, 2, 1, 3).reshape(B, S, H), f"{p}.attention.output")

    x = W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][:S]
    x = _ln(x, W["embeddings.ln.weight"], W["embeddings.ln.bias"])
    dropped = 0
    for i in range(c.layers):
        p = f"layers.{i}"
        x = _ln(x + attention(x, p), W[f"{p}.attention.ln.weight"], W[f"{p}.attention.ln.bias"])
        if i % 2 == 1:
            h = lin(x, f"{p}.mlp.intermediate")
            h = lin(0.5 * h * (1 + _erf(h / math.sqrt(2))), f"{p}.mlp.output")
            x = _ln(x + h, W[f"{p}.mlp.ln.weight"], W[f"{p}.mlp.ln.bias"])
            continue
        xg = x.reshape(-1, c.group, H)
        gates = _softmax(np.einsum("gsm,me->gse", xg, W[f"{p}.moe.wg"]))
        combined, dispatch, d = _top2_gating(gates)
        dropped += d
        ein = np.einsum("gsec,gsm->egcm", dispatch, xg)
        h = np.maximum(np.einsum("egcm,emh->egch", ein, W[f"{p}.moe.wi"]), 0)
        eo = np.einsum("egch,ehm->gecm", h, W[f"{p}.moe.wo"])
        y = np.einsum("gsec,gecm->gsm", combined, eo).reshape(x.shape)
        x = _ln(x + y, W[f"{p}.moe.ln.weight"], W[f"{p}.moe.ln.bias"])
    logits = x @ W["embeddings.word_embeddings.weight"].T + W["lm_head.bias"]
    return logits, dropped


def test_moe_tiny_matches_numpy_gshard_reference():
    c = zoo.BY_NAME["moe-tiny"]
    m = load(c.name)
    W = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    sess = session(os.path.join(ONNX_DIR, f"{c.name}.onnx"))
    total_dropped = 0
    for seed in range(4):
        feeds = feeds_for(c, 4, c.seq, seed)
        (got,) = sess.run(None, feeds)
        ref, dropped = _moe_reference(c, W, feeds["input_ids"])
        total_dropped += dropped
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    assert total_dropped > 0, "inputs should exercise the capacity limit"


# ---------------------------------------------------------------------------
# README
# ---------------------------------------------------------------------------

def test_readme_table_lists_every_model_with_its_count():
    with open(os.path.join(MODELS, "README.md")) as f:
        readme = f.read()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", readme, re.M)}
    for c in CONFIGS:
        assert c.name in rows, f"{c.name} missing from models/README.md"
        assert f"{zoo.expected_params(c):,}" in rows[c.name], rows[c.name]
        assert c.form in rows[c.name]
    assert zoo.readme_rows() in readme, "refresh with: python models/zoo.py --readme-table"
