#!/usr/bin/env python3
"""Export GPT-2, LLaMA and BERT from the Hugging Face `transformers`
implementations to ONNX with torch.onnx.export (the dynamo exporter).

Nothing is downloaded: every model is built from a config (the rows of
zoo.CONFIGS with form exported-*) with seeded random initialisation.

  exported-tiny        real random weights embedded; checked here against
                       PyTorch with onnxruntime (several batch/seq shapes).
  exported-graph-only  real size. The model is built on the meta device and
                       given uninitialised CPU storage (Module.to_empty), which
                       torch.export traces with fake tensors: no weight is ever
                       computed or touched (LLaMA-2-7B exports in < 1 GB of
                       RSS). Weights are written as ONNX external data
                       "<name>.onnx.data" that is not shipped (offsets and
                       lengths as if it existed), like the zoo's graph-only
                       models.

Both forms go through the same pipeline, so a tiny file is a faithful numeric
stand-in for the real-size graph of the same architecture:
  1. torch.onnx.export(dynamo=True, optimize=False, opset 18) with dynamic
     batch and seq;
  2. while the onnxscript optimizer runs (as torch.onnx.export would run it),
     parameters and buffers are graph inputs, so it can neither constant-fold
     nor de-duplicate weights; afterwards they are initializers again;
  3. names: the wrapper prefix is dropped; model buffers are renamed
     "buffer.<name>", exporter constants "const.<name>"; every other
     initializer is a trainable parameter. Symbolic dims become batch / seq.
     ir_version 8; metadata_props as in zoo.py (bm.params, bm.dim.seq, ...).

Needs torch and transformers, which the project does not: use a separate venv.

  python3 -m venv .venv-export
  .venv-export/bin/pip install torch==2.9.1 transformers==4.57.1 onnxscript==0.5.6 \\
      onnx==1.19.1 onnxruntime==1.22.1 numpy==2.2.6
  .venv-export/bin/python models/export_hf.py --out models/onnx [NAME ...]
  .venv-export/bin/python models/export_hf.py --verify-zoo   # zoo tiny models vs HF
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zoo  # noqa: E402  (numpy + onnx only)

import onnx_ir as ir  # noqa: E402
import onnx_ir.passes.common as ir_passes  # noqa: E402
import onnxruntime as ort  # noqa: E402
import onnxscript  # noqa: E402
import onnxscript.rewriter.onnx_fusions  # noqa: E402
import torch  # noqa: E402
from torch.onnx._internal.exporter import _compat  # noqa: E402
from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel,  # noqa: E402
                          LlamaConfig, LlamaForCausalLM, T5Config,
                          T5ForConditionalGeneration, ViTConfig, ViTForImageClassification)
from transformers import masking_utils  # noqa: E402
from transformers.integrations.executorch import sdpa_mask_without_vmap  # noqa: E402

OPSET = 18        # the exporter's native opset; its down-conversion to 17 breaks Split
IR_VERSION = 8    # enough for opset 18; what the project's ONNX 1.12 C++ reads
WRAP = "m."       # parameter prefix added by the Wrapper module

# Workarounds for this torch / transformers pair (torch 2.9.1, transformers 4.57.1):
# (a) transformers builds attention masks with torch.vmap, which torch.export
#     cannot trace with symbolic shapes: use its export-friendly variant.
masking_utils.sdpa_mask = sdpa_mask_without_vmap


# (b) torch.onnx's opset-conversion step refuses models that still hold the
#     torchlib helper functions (aten_split ...) even at the native opset:
#     inline them first. No version conversion is needed at opset 18.
def _inline_only(model, target_version):
    ir_passes.InlinePass()(model)
    ir_passes.RemoveUnusedFunctionsPass()(model)
    assert target_version == OPSET
    return model


_compat.onnxscript_apis.convert_version = _inline_only

ARCH = {"gpt": (GPT2LMHeadModel, GPT2Config), "llama": (LlamaForCausalLM, LlamaConfig),
        "bert": (BertForMaskedLM, BertConfig)}


class Wrapper(torch.nn.Module):
    """input_ids -> logits: no cache, no attention-mask input, no loss."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        if isinstance(self.m, BertForMaskedLM):
            return self.m(input_ids=input_ids, return_dict=False)[0]
        return self.m(input_ids=input_ids, use_cache=False, return_dict=False)[0]


def make_model(c: zoo.Config):
    cls, cfg_cls = ARCH[c.family]
    cfg = cfg_cls(attn_implementation="eager", **c.hf)
    torch.manual_seed(0)
    if c.tiny:
        model = cls(cfg)
        # HF initialises biases to 0 and norm scales to 1: perturb every
        # parameter so the numeric check sees non-trivial values.
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for _, p in model.named_parameters():
                p.add_(torch.randn(p.shape, generator=gen) * 0.02)
    else:
        with torch.device("meta"):
            model = cls(cfg)
        model = model.to_empty(device="cpu")   # uninitialised, never touched
        model.tie_weights()                    # to_empty unties shared parameters
    return Wrapper(model.eval()).eval()


def rename_everywhere(g: onnx.GraphProto, mapping: dict[str, str]):
    def r(n):
        return mapping.get(n, n)
    for t in g.initializer:
        t.name = r(t.name)
    for v in list(g.input) + list(g.output) + list(g.value_info):
        v.name = r(v.name)
    for n in g.node:
        n.input[:] = [r(x) for x in n.input]
        n.output[:] = [r(x) for x in n.output]
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                rename_everywhere(a.g, mapping)


def rename_dims(g: onnx.GraphProto, mapping: dict[str, str]):
    pat = re.compile(r"\b(" + "|".join(map(re.escape, mapping)) + r")\b")
    for v in list(g.input) + list(g.output) + list(g.value_info):
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param:
                d.dim_param = pat.sub(lambda m: mapping[m.group(1)], d.dim_param)


def optimize(model: ir.Model):
    """torch.onnx.export's optimizer (onnxscript.optimizer.optimize_ir, then
    the ONNX fusions) minus two of its passes, so that every layer keeps its
    own nodes and the layers stay structurally identical:
      - common-subexpression elimination (it would move shape arithmetic and
        rotary cos/sin reshapes shared by all layers into layer 0);
      - lifting Constant nodes to initializers (constants stay Constant nodes,
        as in zoo.py; initializers are parameters and buffers only)."""
    from onnxscript import rewriter
    from onnxscript.optimizer import _constant_folding
    ir.passes.Sequential(
        ir_passes.InlinePass(),
        ir.passes.PassManager([
            _constant_folding.FoldConstantsPass(
                shape_inference=True,
                input_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
                output_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
                should_fold=lambda node: None),
            rewriter.RewritePass(rewriter._DEFAULT_REWRITE_RULES),
            ir_passes.RemoveUnusedNodesPass(),
            ir_passes.RemoveUnusedFunctionsPass(),
            ir_passes.RemoveUnusedOpsetsPass(),
        ], steps=2, early_stop=True),
        ir_passes.RemoveUnusedNodesPass(),
    )(model)
    onnxscript.rewriter.onnx_fusions.fuse(model)
    ir_passes.RemoveUnusedNodesPass()(model)
    ir_passes.RemoveUnusedOpsetsPass()(model)


def compact_node_metadata(g: onnx.GraphProto):
    """Replace the exporter's per-node metadata (stack traces with local
    paths, FX text: most of the file) by one entry "bm.scope": the module
    path the node came from, e.g. "model.layers.3.self_attn"."""
    for n in g.node:
        scopes = [p.value for p in n.metadata_props if p.key == "pkg.torch.onnx.name_scopes"]
        del n.metadata_props[:]
        n.doc_string = ""
        if scopes:
            parts = [s.strip(" '\"") for s in scopes[0].strip("[]").split(",")]
            path = parts[-2] if len(parts) >= 2 else ""
            path = path[len(WRAP):] if path.startswith(WRAP) else ("" if path == WRAP[:-1] else path)
            if path and not path.startswith("_"):
                p = n.metadata_props.add()
                p.key, p.value = "bm.scope", path


def export(c: zoo.Config) -> onnx.ModelProto:
    w = make_model(c)
    ids = torch.randint(0, c.vocab, (2, 8))
    dyn = {"input_ids": {0: torch.export.Dim.DYNAMIC, 1: torch.export.Dim.DYNAMIC}}
    prog = torch.onnx.export(w, (ids,), dynamo=True, optimize=False, opset_version=OPSET,
                             input_names=["input_ids"], output_names=["logits"],
                             dynamic_shapes=dyn, verbose=False)
    irm = prog.model
    g = irm.graph
    params = {WRAP + n for n, _ in w.m.named_parameters(remove_duplicate=False)}
    buffers = {WRAP + n for n, _ in w.m.named_buffers(remove_duplicate=False)}
    # Tied weights (GPT-2's lm_head / wte): one initializer under the first name.
    canonical: dict[int, str] = {}
    alias: dict[str, str] = {}
    for n, p in w.m.named_parameters(remove_duplicate=False):
        alias[WRAP + n] = canonical.setdefault(id(p), WRAP + n)

    for name in list(g.initializers):
        if alias.get(name, name) != name and alias[name] in g.initializers:
            dup = g.initializers.pop(name)
            dup.replace_all_uses_with(g.initializers[alias[name]])
    # Weights become graph inputs while the optimizer runs.
    held: dict[str, object] = {}
    for name in list(g.initializers):
        if name in params or name in buffers:
            v = g.initializers.pop(name)
            held[name] = v.const_value
            v.const_value = None
            g.inputs.append(v)
    optimize(irm)
    proto = ir.serde.serialize_model(irm)
    g = proto.graph
    used = {x for n in g.node for x in n.input} | {o.name for o in g.output}

    # ... and initializers again (embedded data or external references).
    offset = 0
    data_file = f"{c.name}.onnx.data"
    inputs = list(g.input)
    del g.input[:]
    for v in inputs:
        if v.name not in held:
            g.input.append(v)
            continue
        if v.name not in used:      # e.g. GPT-2's unused attn.bias buffers
            continue
        tensor = held[v.name]
        if c.tiny:
            arr = np.ascontiguousarray(tensor.numpy())
            t = onnx.numpy_helper.from_array(arr, v.name)
        else:
            t = TensorProto()
            t.name = v.name
            t.data_type = v.type.tensor_type.elem_type
            t.dims.extend(d.dim_value for d in v.type.tensor_type.shape.dim)
            t.data_location = TensorProto.EXTERNAL
            n = int(np.prod(list(t.dims), dtype=np.int64)) * \
                helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
            for k, val in (("location", data_file), ("offset", str(offset)), ("length", str(n))):
                e = t.external_data.add()
                e.key, e.value = k, val
            offset += (n + zoo.EXTERNAL_ALIGN - 1) // zoo.EXTERNAL_ALIGN * zoo.EXTERNAL_ALIGN
        g.initializer.append(t)

    # Names.
    mapping = {}
    for t in g.initializer:
        base = t.name[len(WRAP):] if t.name.startswith(WRAP) else t.name
        if t.name in params:
            mapping[t.name] = base
        elif t.name in buffers:
            mapping[t.name] = zoo.BUFFER_PREFIX + base
        else:
            mapping[t.name] = zoo.CONST_PREFIX + base
    rename_everywhere(g, mapping)
    compact_node_metadata(g)
    dims = [d.dim_param for d in g.input[0].type.tensor_type.shape.dim]
    rename_dims(g, {dims[0]: "batch", dims[1]: "seq"})

    # Model-level fields as in zoo.py.
    proto.ir_version = IR_VERSION
    proto.producer_name = "bmc-export-hf"
    proto.producer_version = f"torch {torch.__version__.split('+')[0]}"
    proto.doc_string = f"{c.name}: {c.source}. Exported by models/export_hf.py."
    n_params = zoo.param_count(proto)
    want = zoo.expected_params(c)
    if n_params != want:
        raise AssertionError(f"{c.name}: {n_params} parameters exported, expected {want}")
    meta = {"bm.family": c.family, "bm.form": c.form, "bm.params": str(n_params),
            "bm.source": c.source, "bm.dim.seq": str(c.seq)}
    if c.published:
        meta["bm.published_params"] = c.published
    if not c.tiny:
        meta["bm.external_data"] = data_file
    del proto.metadata_props[:]
    for k in sorted(meta):
        e = proto.metadata_props.add()
        e.key, e.value = k, meta[k]
    if c.tiny:
        onnx.checker.check_model(proto, full_check=True)
        check_numerics(c, w, proto)
    return proto


def check_numerics(c: zoo.Config, w: torch.nn.Module, proto: onnx.ModelProto):
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    gen = torch.Generator().manual_seed(2)
    for shape in ((2, c.seq), (3, 7), (1, 1)):
        ids = torch.randint(0, c.vocab, shape, generator=gen)
        with torch.no_grad():
            ref = w(ids).numpy()
        got = sess.run(None, {"input_ids": ids.numpy()})[0]
        err = float(np.abs(got - ref).max())
        print(f"  {c.name}: input {shape} -> {got.shape}, max |onnxruntime - torch| = {err:.2e}")
        if got.shape != ref.shape or not err < 1e-4:
            raise AssertionError(f"{c.name}: mismatch for input {shape}")


# --------------------------------------------------------------------------
# --verify-zoo: the zoo's hand-written tiny models against transformers
# --------------------------------------------------------------------------

def _zoo_weights(path):
    m = onnx.load(path)
    return {t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy()) for t in m.graph.initializer}


def _load(model, sd_map: dict[str, torch.Tensor]):
    sd = model.state_dict()
    missing = [k for k in sd if k not in sd_map]
    extra = [k for k in sd_map if k not in sd]
    if extra:
        raise KeyError(f"unknown keys {extra[:5]}")
    for k, v in sd_map.items():
        if sd[k].shape != v.shape:
            raise ValueError(f"{k}: {tuple(sd[k].shape)} vs {tuple(v.shape)}")
    model.load_state_dict(sd_map, strict=False)
    return missing


def hf_twin(c: zoo.Config, W: dict[str, torch.Tensor]):
    """A transformers model with the zoo tiny model's weights, or None."""
    H, L = c.hidden, c.layers
    m: dict[str, torch.Tensor] = {}
    if c.family == "gpt":
        hf = GPT2LMHeadModel(GPT2Config(n_layer=L, n_embd=H, n_head=c.heads, vocab_size=c.vocab,
                                        n_positions=c.seq, attn_implementation="eager"))
        m["transformer.wte.weight"] = W["wte.weight"]
        m["transformer.wpe.weight"] = W["wpe.weight"]
        m["lm_head.weight"] = W["wte.weight"]
        for s in ("weight", "bias"):
            m[f"transformer.ln_f.{s}"] = W[f"ln_f.{s}"]
            for i in range(L):
                for a, b in (("ln_1", "ln_1"), ("ln_2", "ln_2"), ("attn.c_attn", "attn.qkv"),
                             ("attn.c_proj", "attn.proj"), ("mlp.c_fc", "mlp.fc"),
                             ("mlp.c_proj", "mlp.proj")):
                    m[f"transformer.h.{i}.{a}.{s}"] = W[f"h.{i}.{b}.{s}"]
        ignore = ("attn.bias", "attn.masked_bias")
    elif c.family == "llama":
        hf = LlamaForCausalLM(LlamaConfig(
            num_hidden_layers=L, hidden_size=H, num_attention_heads=c.heads,
            num_key_value_heads=c.kv_heads or c.heads, intermediate_size=c.ffn_size,
            vocab_size=c.vocab, max_position_embeddings=c.seq, rms_norm_eps=1e-5,
            attn_implementation="eager"))
        m["model.embed_tokens.weight"] = W["embed_tokens.weight"]
        m["model.norm.weight"] = W["norm.weight"]
        m["lm_head.weight"] = W["lm_head.weight"].T
        for i in range(L):
            p = f"layers.{i}"
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                m[f"model.{p}.self_attn.{n}.weight"] = W[f"{p}.self_attn.{n}.weight"].T
            for n in ("gate_proj", "up_proj", "down_proj"):
                m[f"model.{p}.mlp.{n}.weight"] = W[f"{p}.mlp.{n}.weight"].T
            for n in ("input_layernorm", "post_attention_layernorm"):
                m[f"model.{p}.{n}.weight"] = W[f"{p}.{n}.weight"]
        ignore = ("rotary_emb.inv_freq",)
    elif c.family == "bert":
        hf = BertForMaskedLM(BertConfig(
            num_hidden_layers=L, hidden_size=H, num_attention_heads=c.heads,
            intermediate_size=c.ffn_size, vocab_size=c.vocab, max_position_embeddings=c.seq,
            attn_implementation="eager"))
        e = "bert.embeddings"
        for n in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
            m[f"{e}.{n}.weight"] = W[f"embeddings.{n}.weight"]
        lin = lambda dst, src: m.update({f"{dst}.weight": W[f"{src}.weight"].T,  # noqa: E731
                                         f"{dst}.bias": W[f"{src}.bias"]})
        ln = lambda dst, src: m.update({f"{dst}.weight": W[f"{src}.weight"],  # noqa: E731
                                        f"{dst}.bias": W[f"{src}.bias"]})
        ln(f"{e}.LayerNorm", "embeddings.ln")
        for i in range(L):
            p, q = f"bert.encoder.layer.{i}", f"layer.{i}"
            for n in ("query", "key", "value"):
                lin(f"{p}.attention.self.{n}", f"{q}.attention.{n}")
            lin(f"{p}.attention.output.dense", f"{q}.attention.output")
            ln(f"{p}.attention.output.LayerNorm", f"{q}.attention.ln")
            lin(f"{p}.intermediate.dense", f"{q}.mlp.intermediate")
            lin(f"{p}.output.dense", f"{q}.mlp.output")
            ln(f"{p}.output.LayerNorm", f"{q}.mlp.ln")
        lin("cls.predictions.transform.dense", "cls.transform.dense")
        ln("cls.predictions.transform.LayerNorm", "cls.transform.ln")
        m["cls.predictions.decoder.weight"] = W["embeddings.word_embeddings.weight"]
        m["cls.predictions.bias"] = W["cls.decoder.bias"]
        m["cls.predictions.decoder.bias"] = W["cls.decoder.bias"]
        ignore = ("position_ids", "token_type_ids")
    elif c.family == "t5":
        hf = T5ForConditionalGeneration(T5Config(
            d_model=H, d_kv=H // c.heads, d_ff=c.ffn_size, num_layers=L,
            num_decoder_layers=c.dec_layers, num_heads=c.heads, vocab_size=c.vocab,
            feed_forward_proj="relu", tie_word_embeddings=True, dropout_rate=0.0,
            attn_implementation="eager"))
        m["shared.weight"] = W["shared.weight"]
        m["encoder.embed_tokens.weight"] = W["shared.weight"]
        m["decoder.embed_tokens.weight"] = W["shared.weight"]
        m["lm_head.weight"] = W["shared.weight"]
        for s in ("encoder", "decoder"):
            m[f"{s}.final_layer_norm.weight"] = W[f"{s}.final_ln.weight"]
            m[f"{s}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = \
                W[f"{s}.prelude.position.relative_attention_bias.weight"]
            subs = (("SelfAttention", "self_attn", "ln_self"), ("EncDecAttention", "cross_attn", "ln_cross")) \
                if s == "decoder" else (("SelfAttention", "self_attn", "ln_self"),)
            for i in range(L if s == "encoder" else c.dec_layers):
                p, q = f"{s}.block.{i}", f"{s}.block.{i}"
                for j, (hn, zn, lnn) in enumerate(subs):
                    for n in "qkvo":
                        m[f"{p}.layer.{j}.{hn}.{n}.weight"] = W[f"{q}.{zn}.{n}.weight"].T
                    m[f"{p}.layer.{j}.layer_norm.weight"] = W[f"{q}.{lnn}.weight"]
                j = len(subs)
                m[f"{p}.layer.{j}.DenseReluDense.wi.weight"] = W[f"{q}.ff.wi.weight"].T
                m[f"{p}.layer.{j}.DenseReluDense.wo.weight"] = W[f"{q}.ff.wo.weight"].T
                m[f"{p}.layer.{j}.layer_norm.weight"] = W[f"{q}.ln_ff.weight"]
        ignore = ()
    elif c.family == "vit":
        hf = ViTForImageClassification(ViTConfig(
            hidden_size=H, num_hidden_layers=L, num_attention_heads=c.heads,
            intermediate_size=c.ffn_size, image_size=c.image, patch_size=c.patch,
            layer_norm_eps=1e-6, num_labels=c.classes, attn_implementation="eager"))
        m["vit.embeddings.cls_token"] = W["cls_token"]
        m["vit.embeddings.position_embeddings"] = W["pos_embed"]
        m["vit.embeddings.patch_embeddings.projection.weight"] = W["patch_embed.proj.weight"]
        m["vit.embeddings.patch_embeddings.projection.bias"] = W["patch_embed.proj.bias"]
        for i in range(L):
            p, q = f"vit.encoder.layer.{i}", f"blocks.{i}"
            qkv_w, qkv_b = W[f"{q}.attn.qkv.weight"], W[f"{q}.attn.qkv.bias"]
            for j, n in enumerate(("query", "key", "value")):
                m[f"{p}.attention.attention.{n}.weight"] = qkv_w[:, j * H:(j + 1) * H].T
                m[f"{p}.attention.attention.{n}.bias"] = qkv_b[j * H:(j + 1) * H]
            for dst, src in (("attention.output.dense", "attn.proj"), ("intermediate.dense", "mlp.fc1"),
                             ("output.dense", "mlp.fc2")):
                m[f"{p}.{dst}.weight"] = W[f"{q}.{src}.weight"].T
                m[f"{p}.{dst}.bias"] = W[f"{q}.{src}.bias"]
            for dst, src in (("layernorm_before", "norm1"), ("layernorm_after", "norm2")):
                m[f"{p}.{dst}.weight"] = W[f"{q}.{src}.weight"]
                m[f"{p}.{dst}.bias"] = W[f"{q}.{src}.bias"]
        m["vit.layernorm.weight"], m["vit.layernorm.bias"] = W["norm.weight"], W["norm.bias"]
        m["classifier.weight"], m["classifier.bias"] = W["head.weight"], W["head.bias"]
        ignore = ()
    else:
        return None
    missing = [k for k in _load(hf, m) if not k.endswith(ignore)] if ignore else _load(hf, m)
    if missing:
        raise KeyError(f"{c.name}: weights not mapped: {missing[:8]}")
    return hf.eval()


def verify_wresnet(name: str) -> bool:
    """Full-size zoo Wide-ResNet (built with random weights, not saved)
    against torchvision's model with the same weights."""
    import torchvision
    c = zoo.BY_NAME[name]
    proto = zoo.build(c, weights=True)
    W = {t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy()) for t in proto.graph.initializer}
    tv = getattr(torchvision.models, name.replace("wresnet-", "wide_resnet").replace("-2", "_2"))()
    m = {}

    def conv_bn(dst_conv, dst_bn, src):
        m[f"{dst_conv}.weight"] = W[f"{src}.conv.weight"]
        m[f"{dst_bn}.weight"], m[f"{dst_bn}.bias"] = W[f"{src}.bn.weight"], W[f"{src}.bn.bias"]
        m[f"{dst_bn}.running_mean"] = W[f"buffer.{src}.bn.running_mean"]
        m[f"{dst_bn}.running_var"] = W[f"buffer.{src}.bn.running_var"]

    conv_bn("conv1", "bn1", "stem")
    for i, n in enumerate(zoo.resnet_stages(c.depth)):
        for j in range(n):
            p = f"layer{i + 1}.{j}"
            for k in (1, 2, 3):
                conv_bn(f"{p}.conv{k}", f"{p}.bn{k}", f"{p}.conv{k}")
            if j == 0:
                conv_bn(f"{p}.downsample.0", f"{p}.downsample.1", f"{p}.downsample")
    m["fc.weight"], m["fc.bias"] = W["fc.weight"], W["fc.bias"]
    missing = [k for k in _load(tv, m) if not k.endswith("num_batches_tracked")]
    if missing:
        raise KeyError(f"{name}: not mapped {missing[:5]}")
    x = torch.randn((1, 3, 224, 224), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = tv.eval()(x).numpy()
    got = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]) \
        .run(None, {"pixel_values": x.numpy()})[0]
    err = float(np.abs(got - ref).max() / np.abs(ref).max())
    print(f"{name} (full size, random weights): max relative |zoo - torchvision| = {err:.2e}")
    return err < 1e-4


def verify_zoo(out_dir: str) -> int:
    """Run each zoo tiny model in onnxruntime and its transformers twin (same
    weights) in torch; the logits must agree. Also the full-size WRN-50-2
    against torchvision."""
    bad = 0 if verify_wresnet("wresnet-50-2") else 1
    for c in zoo.CONFIGS:
        if c.form != "tiny":
            continue
        path = os.path.join(out_dir, f"{c.name}.onnx")
        hf = hf_twin(c, _zoo_weights(path))
        if hf is None:
            print(f"{c.name}: no transformers twin (checked by tests/models only)")
            continue
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        gen = torch.Generator().manual_seed(3)
        for b, s in ((2, c.seq), (3, 5)):
            if c.family == "vit":
                x = torch.randn((b, 3, c.image, c.image), generator=gen)
                feeds, kw = {"pixel_values": x.numpy()}, {"pixel_values": x}
            else:
                x = torch.randint(0, c.vocab, (b, s), generator=gen)
                feeds, kw = {"input_ids": x.numpy()}, {"input_ids": x}
                if c.family == "t5":
                    y = torch.randint(0, c.vocab, (b, max(1, s - 3)), generator=gen)
                    feeds["decoder_input_ids"], kw["decoder_input_ids"] = y.numpy(), y
            with torch.no_grad():
                ref = hf(**kw, return_dict=False)[0].numpy() if c.family != "gpt" else \
                    hf(**kw, use_cache=False, return_dict=False)[0].numpy()
            got = sess.run(None, feeds)[0]
            err = float(np.abs(got - ref).max()) if got.shape == ref.shape else float("inf")
            ok = err < 1e-4
            bad += not ok
            print(f"{c.name}: {tuple(x.shape)} max |zoo(onnxruntime) - transformers(torch)| = "
                  f"{err:.2e} {'ok' if ok else 'MISMATCH'}")
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="export HF models to ONNX (see module doc)")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx"))
    ap.add_argument("--verify-zoo", action="store_true")
    args = ap.parse_args(argv)
    if args.verify_zoo:
        return verify_zoo(args.out)
    cfgs = [zoo.BY_NAME[n] for n in args.names] if args.names else \
        [c for c in zoo.CONFIGS if c.exported]
    os.makedirs(args.out, exist_ok=True)
    for c in cfgs:
        t0 = time.time()
        proto = export(c)
        path = os.path.join(args.out, f"{c.name}.onnx")
        zoo.save(proto, path)
        print(f"{path}: {os.path.getsize(path):,} bytes, {zoo.param_count(proto):,} params, "
              f"{time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
