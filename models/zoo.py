#!/usr/bin/env python3
"""bmc model zoo: one generator, one table of configurations.

Every model that tests, benchmarks and the README use is a row of CONFIGS
below, with the source of its dimensions. Families share builder code; a row
only chooses dimensions and the form:

  graph-only  full published size. Weights are ONNX external data that is not
              shipped: each initializer has data_location=EXTERNAL, location
              "<model>.onnx.data" and the offset/length it would have if the
              file existed. Graph, shapes and dtypes are exact. For planning.
  tiny        2 layers, hidden 64, small vocabulary; real random weights
              (seeded numpy, float32) embedded. For numeric tests against
              onnxruntime.

Rows with form exported-tiny / exported-graph-only describe the Hugging Face
exports written by export_hf.py (it needs torch); this script only lists them.

Usage:
  python models/zoo.py --out models/onnx            # regenerate every zoo.py model
  python models/zoo.py --out models/onnx gpt3-175b  # only the named ones
  python models/zoo.py --list                       # the table
  python models/zoo.py --readme-table               # markdown rows for README

Output is deterministic: the same config gives the same bytes.

Graph conventions (relied on by the bmc importer and planner):
  * ai.onnx opset 17, ir_version 8, a fixed small op set (see ALLOWED_OPS).
  * transformers: input `input_ids` int64 [batch, seq] (T5 also
    `decoder_input_ids` [batch, dec_seq]); output `logits` float
    [batch, seq, vocab]. Vision: `pixel_values` float [batch, 3, 224, 224],
    output `logits` [batch, 1000]. No loss in the graph.
  * metadata_props: bm.dim.seq (and bm.dim.dec_seq) = published default
    sequence length; bm.params = exact trainable parameter count;
    bm.form, bm.family, bm.source.
  * weights are float32 initializers with names that follow the layer
    structure ("h.3.attn.qkv.weight"); nodes are named "h.3/attn/qkv".
    Every layer is emitted with the same ops in the same order.
  * non-trainable buffers (rotary cos/sin tables, batch-norm running
    statistics) are initializers whose name starts with "buffer."; they are
    not parameters. Small int64/float constants (shapes, axes, scalars) are
    Constant nodes, never initializers.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 17
IR_VERSION = 8
PRODUCER = "bmc-zoo"
PRODUCER_VERSION = "1"
BUFFER_PREFIX = "buffer."   # non-trainable state (rotary tables, BN running stats)
CONST_PREFIX = "const."     # constants an exporter left as initializers (export_hf.py only)
EXTERNAL_ALIGN = 4096  # offsets of external tensors, as onnx's own writer aligns them

ALLOWED_OPS = frozenset("""
MatMul Gemm Einsum Add Sub Mul Div Pow Sqrt Reciprocal Neg Exp Log Tanh Erf
Sigmoid Relu Softmax LogSoftmax LayerNormalization ReduceMean ReduceSum
ReduceMax Reshape Transpose Gather Concat Split Slice Squeeze Unsqueeze Expand
Where Cast Constant ConstantOfShape Shape Range Trilu TopK OneHot CumSum Conv
BatchNormalization MaxPool AveragePool GlobalAveragePool Flatten Equal Less
Greater And Not Min Max Sin Cos Identity
""".split())

I64 = np.int64
F32 = np.float32


# --------------------------------------------------------------------------
# Graph builder
# --------------------------------------------------------------------------

class Builder:
    """Collects nodes and initializers of one model in emission order."""

    def __init__(self, model: str, tiny: bool):
        self.model = model
        self.tiny = tiny
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.names: set[str] = set()
        self.offset = 0
        self.data_file = f"{model}.onnx.data"
        self.params = 0
        self.buffers = 0

    # -- initializers -------------------------------------------------------
    def _rng(self, name: str) -> np.random.Generator:
        # Independent stream per (model, weight): order of creation is irrelevant.
        return np.random.default_rng([zlib.crc32(self.model.encode()),
                                      zlib.crc32(name.encode())])

    def weight(self, name: str, shape, init: str = "normal", std: float = 0.02,
               value: Callable[[], np.ndarray] | None = None) -> str:
        """A float32 initializer. init: normal | ones | zeros | var.

        For tiny models values are drawn from a seeded generator (LayerNorm
        scales near 1, biases near 0, so the numerics are non-trivial); for
        graph-only models only a reference to external data is written.
        `value` gives exact contents (buffers such as rotary tables).
        """
        assert name not in self.names, name
        self.names.add(name)
        shape = [int(d) for d in shape]
        numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if name.startswith(BUFFER_PREFIX):
            self.buffers += numel
        else:
            self.params += numel
        if self.tiny:
            if value is not None:
                arr = np.asarray(value(), dtype=F32).reshape(shape)
            else:
                rng = self._rng(name)
                if init == "normal":
                    arr = rng.normal(0.0, std, size=shape)
                elif init == "ones":
                    arr = 1.0 + rng.normal(0.0, 0.1, size=shape)
                elif init == "zeros":
                    arr = rng.normal(0.0, 0.02, size=shape)
                elif init == "var":  # batch-norm running variance: positive
                    arr = rng.uniform(0.5, 1.5, size=shape)
                else:
                    raise ValueError(init)
                arr = arr.astype(F32)
            t = helper.make_tensor(name, TensorProto.FLOAT, shape,
                                   arr.tobytes(), raw=True)
        else:
            t = TensorProto()
            t.name = name
            t.data_type = TensorProto.FLOAT
            t.dims.extend(shape)
            t.data_location = TensorProto.EXTERNAL
            length = numel * 4
            for k, v in (("location", self.data_file),
                         ("offset", str(self.offset)),
                         ("length", str(length))):
                e = t.external_data.add()
                e.key = k
                e.value = v
            self.offset += (length + EXTERNAL_ALIGN - 1) // EXTERNAL_ALIGN * EXTERNAL_ALIGN
        self.inits.append(t)
        return name

    # -- nodes --------------------------------------------------------------
    def op(self, op_type: str, inputs, name: str, n_out: int = 1,
           out: str | list[str] | None = None, **attrs):
        assert op_type in ALLOWED_OPS, op_type
        assert name not in self.names, name
        self.names.add(name)
        if out is None:
            outs = [name] if n_out == 1 else [f"{name}:{i}" for i in range(n_out)]
        else:
            outs = [out] if isinstance(out, str) else list(out)
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name, **attrs))
        return outs[0] if len(outs) == 1 else outs

    def const(self, name: str, value, dtype=I64) -> str:
        arr = np.asarray(value, dtype=dtype)
        t = helper.make_tensor(name, helper.np_dtype_to_tensor_dtype(arr.dtype),
                               arr.shape, arr.flatten().tolist())
        return self.op("Constant", [], name, value=t)

    def scalar(self, name: str, v: float) -> str:
        return self.const(name, v, F32)

    # -- common blocks -----------------------------------------------------------
    def linear(self, p: str, n: str, x: str, d_in: int, d_out: int, bias: bool = True,
               std: float = 0.02) -> str:
        """x @ W (+ b); W is [d_in, d_out] named p.n.weight (layer path p)."""
        w = self.weight(f"{dot(p)}.{n}.weight", [d_in, d_out], std=std)
        y = self.op("MatMul", [x, w], f"{p}/{n}")
        if bias:
            b = self.weight(f"{dot(p)}.{n}.bias", [d_out], "zeros")
            y = self.op("Add", [y, b], f"{p}/{n}/bias")
        return y

    def layernorm(self, p: str, n: str, x: str, h: int, eps: float = 1e-5) -> str:
        """LayerNormalization named p.n (p may be empty for top-level norms)."""
        s = self.weight(f"{wpath(p, n)}.weight", [h], "ones")
        b = self.weight(f"{wpath(p, n)}.bias", [h], "zeros")
        return self.op("LayerNormalization", [x, s, b], npath(p, n), axis=-1, epsilon=eps)

    def rmsnorm(self, p: str, n: str, x: str, h: int, eps: float) -> str:
        """LLaMA / T5 RMSNorm: x * rsqrt(mean(x^2) + eps) * w (no bias, no mean)."""
        q = npath(p, n)
        sq = self.op("Pow", [x, self.scalar(f"{q}/two", 2.0)], f"{q}/pow")
        ms = self.op("ReduceMean", [sq], f"{q}/mean", axes=[-1], keepdims=1)
        ms = self.op("Add", [ms, self.scalar(f"{q}/eps", eps)], f"{q}/add_eps")
        r = self.op("Reciprocal", [self.op("Sqrt", [ms], f"{q}/sqrt")], f"{q}/rsqrt")
        y = self.op("Mul", [x, r], f"{q}/normalize")
        w = self.weight(f"{wpath(p, n)}.weight", [h], "ones")
        return self.op("Mul", [y, w], f"{q}/scale")

    def gelu_tanh(self, q: str, x: str) -> str:
        """GPT-2 / Megatron GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
        x3 = self.op("Pow", [x, self.scalar(f"{q}/three", 3.0)], f"{q}/cube")
        t = self.op("Mul", [x3, self.scalar(f"{q}/c0", 0.044715)], f"{q}/mul_c0")
        t = self.op("Add", [x, t], f"{q}/inner")
        t = self.op("Mul", [t, self.scalar(f"{q}/c1", math.sqrt(2.0 / math.pi))], f"{q}/mul_c1")
        t = self.op("Tanh", [t], f"{q}/tanh")
        t = self.op("Add", [t, self.scalar(f"{q}/one", 1.0)], f"{q}/add_one")
        t = self.op("Mul", [x, t], f"{q}/mul_x")
        return self.op("Mul", [t, self.scalar(f"{q}/half", 0.5)], f"{q}/mul_half")

    def gelu_erf(self, q: str, x: str) -> str:
        """BERT / ViT GELU: 0.5 x (1 + erf(x / sqrt 2))."""
        t = self.op("Div", [x, self.scalar(f"{q}/sqrt2", math.sqrt(2.0))], f"{q}/div")
        t = self.op("Erf", [t], f"{q}/erf")
        t = self.op("Add", [t, self.scalar(f"{q}/one", 1.0)], f"{q}/add_one")
        t = self.op("Mul", [x, t], f"{q}/mul_x")
        return self.op("Mul", [t, self.scalar(f"{q}/half", 0.5)], f"{q}/mul_half")

    def heads(self, q: str, x: str, nh: int, hd: int, perm) -> str:
        """[B,S,nh*hd] -> Reshape [B,S,nh,hd] -> Transpose(perm)."""
        r = self.op("Reshape", [x, self.const(f"{q}/shape", [0, 0, nh, hd])], f"{q}/split_heads")
        return self.op("Transpose", [r], f"{q}/transpose", perm=list(perm))

    def merge_heads(self, q: str, x: str, h: int) -> str:
        """[B,nh,S,hd] -> [B,S,nh*hd]."""
        t = self.op("Transpose", [x], f"{q}/transpose", perm=[0, 2, 1, 3])
        return self.op("Reshape", [t, self.const(f"{q}/shape", [0, 0, h])], f"{q}/merge_heads")

    def attention_core(self, q: str, qh: str, kt: str, vh: str, hd: int | None,
                       bias: str | None) -> str:
        """softmax(q k^T * hd^-0.5 + bias) v on [B,nh,S,hd] / [B,nh,hd,S]."""
        s = self.op("MatMul", [qh, kt], f"{q}/scores")
        if hd is not None:
            s = self.op("Mul", [s, self.scalar(f"{q}/scale_c", 1.0 / math.sqrt(hd))], f"{q}/scale")
        if bias is not None:
            s = self.op("Add", [s, bias], f"{q}/mask")
        pr = self.op("Softmax", [s], f"{q}/softmax", axis=-1)
        return self.op("MatMul", [pr, vh], f"{q}/context")

    # -- sequence helpers (emitted once, before the layers) --------------------
    def seq_len(self, p: str, ids: str, axis: int = 1):
        """(scalar, 1-D [1]) int64 length of `ids` along axis."""
        shape = self.op("Shape", [ids], f"{p}/shape")
        s1 = self.op("Slice", [shape, self.const(f"{p}/start", [axis]),
                               self.const(f"{p}/end", [axis + 1])], f"{p}/len1d")
        s0 = self.op("Squeeze", [s1, self.const(f"{p}/axes", [0])], f"{p}/len")
        return s0, s1

    def positions(self, p: str, s0: str) -> str:
        return self.op("Range", [self.const(f"{p}/start", 0), s0, self.const(f"{p}/delta", 1)],
                       f"{p}/range")

    def causal_mask(self, p: str, s1: str, s1b: str | None = None) -> str:
        """Additive [S,S] mask: 0 on and below the diagonal, -1e9 above."""
        ss = self.op("Concat", [s1, s1b or s1], f"{p}/shape", axis=0)
        neg = self.op("ConstantOfShape", [ss], f"{p}/fill",
                      value=helper.make_tensor("value", TensorProto.FLOAT, [1], [-1e9]))
        return self.op("Trilu", [neg, self.const(f"{p}/k", 1)], f"{p}/triu", upper=1)


def dot(p: str) -> str:
    return p.replace("/", ".")


def wpath(p: str, n: str) -> str:
    """Initializer name prefix of sub-module n of layer path p."""
    return f"{dot(p)}.{n}" if p else n


def npath(p: str, n: str) -> str:
    """Node name of sub-module n of layer path p."""
    return f"{p}/{n}" if p else n


# --------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------

@dataclass
class Config:
    name: str                 # file stem, models/onnx/<name>.onnx
    family: str               # gpt | llama | bert | t5 | vit | wresnet | moe
    form: str                 # graph-only | tiny
    published: str            # the published parameter count as printed ("175B")
    tol: float                # extra relative tolerance beyond the rounding of `published`
    source: str               # where the dimensions come from
    layers: int = 0
    hidden: int = 0
    heads: int = 0
    seq: int = 0              # published default sequence length (bm.dim.seq)
    vocab: int = 0
    ffn: int = 0              # MLP inner size (0: 4 * hidden)
    kv_heads: int = 0         # LLaMA grouped-query attention (0: = heads)
    dec_layers: int = 0       # T5
    dec_seq: int = 0          # T5 (bm.dim.dec_seq)
    experts: int = 0          # MoE
    group: int = 0            # MoE expert group size S_ (tokens per group)
    capacity_factor: float = 1.0
    image: int = 224          # vision
    patch: int = 0            # ViT
    classes: int = 1000       # vision
    depth: int = 0            # ResNet depth: 50 | 101 | 0 (tiny: [1,1,1,1])
    base: int = 64            # ResNet base channels
    width: int = 2            # ResNet width factor
    resnet_style: str = "torchvision"  # torchvision | alpa
    hf: dict | None = None    # exported rows: the transformers config (export_hf.py)
    note: str = ""

    @property
    def tiny(self) -> bool:
        """Real weights embedded (tiny / exported-tiny)."""
        return self.form.endswith("tiny")

    @property
    def exported(self) -> bool:
        """Produced by export_hf.py (torch), not by this generator."""
        return self.form.startswith("exported")

    @property
    def ffn_size(self) -> int:
        return self.ffn or 4 * self.hidden


MULT = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def published_value(s: str) -> float:
    return float(s[:-1]) * MULT[s[-1]]


def tolerance(c: Config) -> float:
    """Relative tolerance of the published count: half a unit in its last
    significant digit ("18.4B" -> 0.05B, "175B" -> 0.5B, "340M" -> 5M), at most
    5% (for nominal names such as "1B"), or the config's explicit tolerance
    where that is larger (the config's note says why)."""
    if not c.published:
        return 0.0
    digits = c.published[:-1]
    if "." in digits:
        unit = 10.0 ** -len(digits.split(".")[1])
    else:
        unit = 10.0 ** (len(digits) - len(digits.rstrip("0")))
    return max(min(0.5 * unit / float(digits), 0.05), c.tol)


def _gpt(name, published, layers, hidden, heads, source, tol=0.0, note=""):
    return Config(name, "gpt", "graph-only", published, tol, source, layers=layers,
                  hidden=hidden, heads=heads, seq=2048, vocab=51200, note=note)


GPT3_PAPER = ("Brown et al. 2020 (GPT-3) Table 2.1; seq 2048 and vocab 51200 (padded "
              "GPT-2 BPE) as in Megatron-LM / Alpa")
MEGATRON = "Narayanan et al. 2021 (Megatron-LM, arXiv:2104.04473) Table 1"
LLAMA2 = ("Touvron et al. 2023 (Llama 2) Table 1 + meta-llama/Llama-2-{}-hf config.json; "
          "published = count of the HF checkpoint")
ALPA_MOE = ("Zheng et al. 2022 (Alpa) Table 4; alpa benchmark/alpa/suite_auto_moe.py "
            "moe_specs (S=1024, V=32000, FFN 8H, expert group 2048)")
ALPA_WRN = ("Zheng et al. 2022 (Alpa) Table 4; alpa benchmark/alpa/suite_wresnet.py "
            "wresnet_specs (base channels C, width factor W)")
ALPA_WRN_NOTE = ("Alpa's bottleneck (alpa/model/wide_resnet.py): only the 3x3 conv is "
                 "widened; 1000 classes (Alpa's benchmark uses 1024)")

HF_GPT2 = "transformers GPT2LMHeadModel, random init"
HF_LLAMA = "transformers LlamaForCausalLM, random init"
HF_BERT = "transformers BertForMaskedLM, random init"

CONFIGS: list[Config] = [
    # ---- GPT-3 family (Megatron-LM / Alpa) -----------------------------------------
    _gpt("gpt3-350m", "350M", 24, 1024, 16, GPT3_PAPER, 0.02,
         "'350M' is the paper's nominal name: even with its own 50257-token vocabulary "
         "the model has 356M parameters, hence 2% tolerance"),
    _gpt("gpt3-1.3b", "1.3B", 24, 2048, 16, GPT3_PAPER, 0.0,
         "GPT-3 Table 2.1 prints 24 heads of d_head 128 for d_model 2048, which "
         "do not divide; 16 heads of the printed d_head 128"),
    _gpt("gpt3-1.7b", "1.7B", 24, 2304, 24, MEGATRON),
    _gpt("gpt3-2.7b", "2.7B", 32, 2560, 32, GPT3_PAPER),
    _gpt("gpt3-6.7b", "6.7B", 32, 4096, 32, GPT3_PAPER),
    _gpt("gpt3-13b", "13B", 40, 5120, 40, GPT3_PAPER, 0.0,
         "GPT-3 Table 2.1 prints d_model 5140, which 40 heads do not divide; "
         "5120 (head dim 128) as in Megatron-LM"),
    _gpt("gpt3-18b", "18.4B", 40, 6144, 48, MEGATRON),
    _gpt("gpt3-39b", "39.1B", 48, 8192, 64, MEGATRON),
    _gpt("gpt3-175b", "175B", 96, 12288, 96, GPT3_PAPER),
    _gpt("gpt3-1t", "1008.0B", 128, 25600, 160, MEGATRON + ", 1008B row"),
    Config("gpt3-tiny", "gpt", "tiny", "", 0.0, "tiny test model of the GPT-3 builder",
           layers=2, hidden=64, heads=4, seq=16, vocab=512),
    Config("gpt3-small-cpu", "gpt", "graph-only", "", 0.0,
           "the GPT-3 builder at a size whose training step takes about a second on "
           "one CPU core (bench/calibration_bench.py: the small GPT of issue 15)",
           layers=4, hidden=256, heads=8, seq=128, vocab=8192),

    # ---- LLaMA-2 ----------------------------------------------------------------------
    Config("llama2-7b", "llama", "graph-only", "6.74B", 0.0, LLAMA2.format("7b"),
           layers=32, hidden=4096, heads=32, seq=4096, vocab=32000, ffn=11008),
    Config("llama2-7b-128k", "llama", "graph-only", "6.74B", 0.0,
           LLAMA2.format("7b") + "; its rotary tables extended to 128k positions, the "
           "long-context setting of context parallelism (Llama 3.1 trains at this length)",
           layers=32, hidden=4096, heads=32, seq=131072, vocab=32000, ffn=11008),
    Config("llama2-13b", "llama", "graph-only", "13.0B", 0.0, LLAMA2.format("13b"),
           layers=40, hidden=5120, heads=40, seq=4096, vocab=32000, ffn=13824),
    Config("llama2-70b", "llama", "graph-only", "69.0B", 0.0, LLAMA2.format("70b"),
           layers=80, hidden=8192, heads=64, kv_heads=8, seq=4096, vocab=32000, ffn=28672,
           note="grouped-query attention, 8 KV heads"),
    Config("llama2-tiny", "llama", "tiny", "", 0.0,
           "tiny test model of the LLaMA builder (GQA: 4 heads, 2 KV heads)",
           layers=2, hidden=64, heads=4, kv_heads=2, seq=16, vocab=512, ffn=176),

    # ---- BERT / T5 ----------------------------------------------------------------------
    Config("bert-large", "bert", "graph-only", "340M", 0.0,
           "Devlin et al. 2019 (BERT) Sec. 3; google-bert/bert-large-uncased config.json",
           layers=24, hidden=1024, heads=16, seq=512, vocab=30522,
           note="masked-LM head with the decoder tied to the word embedding; the pooler "
                "and NSP head (unused by the logits) are left out"),
    Config("bert-tiny", "bert", "tiny", "", 0.0, "tiny test model of the BERT builder",
           layers=2, hidden=64, heads=4, seq=16, vocab=512),
    Config("t5-large", "t5", "graph-only", "737.7M", 0.0,
           "Raffel et al. 2020 (T5) 'Large' (nominal 770M); google-t5/t5-large config.json; "
           "published = count of HF T5ForConditionalGeneration",
           layers=24, dec_layers=24, hidden=1024, heads=16, seq=512, dec_seq=512,
           vocab=32128, ffn=4096),
    Config("t5-tiny", "t5", "tiny", "", 0.0, "tiny test model of the T5 builder",
           layers=2, dec_layers=2, hidden=64, heads=4, seq=16, dec_seq=12, vocab=512,
           ffn=128),

    # ---- Vision -----------------------------------------------------------------------
    Config("vit-h14", "vit", "graph-only", "632M", 0.0,
           "Dosovitskiy et al. 2021 (ViT) Table 1 'ViT-Huge', patch 14, 224x224, "
           "1000-class head", layers=32, hidden=1280, heads=16, ffn=5120, patch=14),
    Config("vit-tiny", "vit", "tiny", "", 0.0, "tiny test model of the ViT builder",
           layers=2, hidden=64, heads=4, patch=16),
    Config("wresnet-50-2", "wresnet", "graph-only", "68.9M", 0.0,
           "Zagoruyko & Komodakis 2016; torchvision wide_resnet50_2 (68,883,240 params)",
           depth=50, base=64, width=2),
    Config("wresnet-101-2", "wresnet", "graph-only", "126.9M", 0.0,
           "Zagoruyko & Komodakis 2016; torchvision wide_resnet101_2 (126,886,696 params)",
           depth=101, base=64, width=2),
    *[Config(f"wresnet-alpa-{n.lower()}", "wresnet", "graph-only", n, tol, ALPA_WRN,
             depth=d, base=c, width=w, resnet_style="alpa", note=ALPA_WRN_NOTE + extra)
      for n, d, c, w, tol, extra in (
          ("250M", 50, 160, 2, 0.0, ""), ("1B", 50, 320, 2, 0.0, ""),
          ("2B", 50, 448, 2, 0.0, ""), ("4B", 50, 640, 2, 0.0, ""),
          ("6.8B", 50, 320, 16, 0.012, "; the exact count of these dimensions is 6.73B, "
           "1.1% under Alpa's printed 6.8B, hence 1.2% tolerance"),
          ("13B", 101, 320, 16, 0.0, ""))],
    Config("wresnet-tiny", "wresnet", "tiny", "", 0.0,
           "tiny test model of the ResNet builder (one bottleneck per stage)",
           depth=0, base=4, width=2, classes=1000),

    # ---- GShard MoE (Alpa) ----------------------------------------------------------------
    *[Config(f"moe-{n.lower()}", "moe", "graph-only", n, 0.0, ALPA_MOE, layers=l,
             hidden=h, heads=16, seq=1024, vocab=32000, ffn=8 * h, experts=e, group=2048,
             note="even layers MoE (top-2, capacity 2*S_/E), odd layers dense")
      for n, h, l, e in (("380M", 768, 8, 8), ("1.3B", 768, 16, 16), ("2.4B", 1024, 16, 16),
                         ("10B", 1536, 16, 32), ("27B", 2048, 16, 48), ("70B", 2048, 32, 64))],
    Config("moe-tiny", "moe", "tiny", "", 0.0, "tiny test model of the MoE builder",
           layers=2, hidden=64, heads=4, seq=16, vocab=512, ffn=128, experts=4, group=16),

    # ---- Hugging Face exports (models/export_hf.py; torch.onnx.export, opset 18) ---------------
    Config("hf-gpt2-tiny", "gpt", "exported-tiny", "", 0.0, HF_GPT2 + " (tiny config)",
           layers=2, hidden=64, heads=4, seq=16, vocab=512,
           hf=dict(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=16)),
    Config("hf-gpt2-124m", "gpt", "exported-graph-only", "124M", 0.0,
           HF_GPT2 + " (openai-community/gpt2 config: 124M)",
           layers=12, hidden=768, heads=12, seq=1024, vocab=50257,
           hf=dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)),
    Config("hf-llama2-tiny", "llama", "exported-tiny", "", 0.0, HF_LLAMA + " (tiny config, GQA)",
           layers=2, hidden=64, heads=4, kv_heads=2, seq=16, vocab=512, ffn=176,
           hf=dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=176, vocab_size=512,
                   max_position_embeddings=16, rms_norm_eps=1e-5)),
    Config("hf-llama2-7b", "llama", "exported-graph-only", "6.74B", 0.0,
           HF_LLAMA + " (meta-llama/Llama-2-7b-hf config)",
           layers=32, hidden=4096, heads=32, seq=4096, vocab=32000, ffn=11008,
           hf=dict(num_hidden_layers=32, hidden_size=4096, num_attention_heads=32,
                   num_key_value_heads=32, intermediate_size=11008, vocab_size=32000,
                   max_position_embeddings=4096, rms_norm_eps=1e-5)),
    Config("hf-bert-tiny", "bert", "exported-tiny", "", 0.0, HF_BERT + " (tiny config)",
           layers=2, hidden=64, heads=4, seq=16, vocab=512,
           hf=dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                   intermediate_size=256, vocab_size=512, max_position_embeddings=16)),
    Config("hf-bert-large", "bert", "exported-graph-only", "340M", 0.0,
           HF_BERT + " (google-bert/bert-large-uncased config)",
           layers=24, hidden=1024, heads=16, seq=512, vocab=30522,
           hf=dict(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16,
                   intermediate_size=4096, vocab_size=30522, max_position_embeddings=512)),
]

BY_NAME = {c.name: c for c in CONFIGS}


# --------------------------------------------------------------------------
# Analytic parameter counts (independent of the builders; the test checks
# that the graphs agree exactly)
# --------------------------------------------------------------------------

def expected_params(c: Config) -> int:
    H, L, V, F = c.hidden, c.layers, c.vocab, c.ffn_size
    if c.family == "gpt":
        return L * (12 * H * H + 13 * H) + (V + c.seq) * H + 2 * H
    if c.family == "llama":
        hd = H // c.heads
        kv = (c.kv_heads or c.heads) * hd
        return L * (2 * H * H + 2 * H * kv + 3 * H * F + 2 * H) + 2 * V * H + H
    if c.family == "bert":
        emb = (V + c.seq + 2) * H + 2 * H
        layer = 4 * (H * H + H) + 2 * H + (H * F + F) + (F * H + H) + 2 * H
        head = H * H + H + 2 * H + V
        return emb + L * layer + head
    if c.family == "t5":
        enc = c.layers * (4 * H * H + 2 * H * F + 2 * H) + 32 * c.heads + H
        dec = c.dec_layers * (8 * H * H + 2 * H * F + 3 * H) + 32 * c.heads + H
        return V * H + enc + dec
    if c.family == "vit":
        n = (c.image // c.patch) ** 2 + 1
        emb = 3 * c.patch * c.patch * H + H + H + n * H
        layer = 4 * (H * H + H) + (H * F + F) + (F * H + H) + 4 * H
        return emb + L * layer + 2 * H + H * c.classes + c.classes
    if c.family == "wresnet":
        total = 3 * 49 * c.base + 2 * c.base  # stem conv + bn
        cin = c.base
        for i, n in enumerate(resnet_stages(c.depth)):
            f = c.base * 2 ** i
            for j in range(n):
                mid, mid2 = resnet_mids(c, f)
                out = 4 * f
                total += cin * mid + 2 * mid + 9 * mid * mid2 + 2 * mid2 + mid2 * out + 2 * out
                if j == 0:
                    total += cin * out + 2 * out
                cin = out
        return total + cin * c.classes + c.classes
    if c.family == "moe":
        E = c.experts
        attn = 4 * (H * H + H) + 2 * H
        dense = attn + (H * F + F) + (F * H + H) + 2 * H
        moe = attn + H * E + E * 2 * H * F + 2 * H
        n_moe = (L + 1) // 2
        return V * H + c.seq * H + 2 * H + V + n_moe * moe + (L - n_moe) * dense
    raise ValueError(c.family)


def resnet_stages(depth: int) -> list[int]:
    return {0: [1, 1, 1, 1], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3]}[depth]


def resnet_mids(c: Config, f: int) -> tuple[int, int]:
    """(conv1 out, conv2 out) channels of a bottleneck with `f` base filters."""
    if c.resnet_style == "torchvision":   # conv1 and conv2 widened
        return f * c.width, f * c.width
    return f, f * c.width                  # alpa: only the 3x3 conv widened


# --------------------------------------------------------------------------
# Families
# --------------------------------------------------------------------------

def build_gpt(b: Builder, c: Config):
    """GPT-2/3 / Megatron decoder: learned positions, pre-LN, fused QKV,
    GELU(tanh) MLP, logits tied to the token embedding."""
    H, nh = c.hidden, c.heads
    hd = H // nh
    s0, s1 = b.seq_len("prelude/seq", "input_ids")
    pos = b.positions("prelude/pos", s0)
    mask = b.causal_mask("prelude/causal_mask", s1)
    wte = b.weight("wte.weight", [c.vocab, H])
    wpe = b.weight("wpe.weight", [c.seq, H], std=0.01)
    x = b.op("Add", [b.op("Gather", [wte, "input_ids"], "wte", axis=0),
                     b.op("Gather", [wpe, pos], "wpe", axis=0)], "embed")
    for i in range(c.layers):
        p = f"h.{i}"
        h = b.layernorm(p, "ln_1", x, H)
        qkv = b.linear(f"{p}/attn", "qkv", h, H, 3 * H)
        q, k, v = b.op("Split", [qkv, b.const(f"{p}/attn/split_sizes", [H, H, H])],
                       f"{p}/attn/split", n_out=3, axis=-1)
        qh = b.heads(f"{p}/attn/q", q, nh, hd, [0, 2, 1, 3])
        kt = b.heads(f"{p}/attn/k", k, nh, hd, [0, 2, 3, 1])
        vh = b.heads(f"{p}/attn/v", v, nh, hd, [0, 2, 1, 3])
        ctx = b.attention_core(f"{p}/attn", qh, kt, vh, hd, mask)
        ctx = b.merge_heads(f"{p}/attn/out", ctx, H)
        x = b.op("Add", [x, b.linear(f"{p}/attn", "proj", ctx, H, H)], f"{p}/residual_1")
        h = b.layernorm(p, "ln_2", x, H)
        h = b.linear(f"{p}/mlp", "fc", h, H, 4 * H)
        h = b.gelu_tanh(f"{p}/mlp/gelu", h)
        x = b.op("Add", [x, b.linear(f"{p}/mlp", "proj", h, 4 * H, H)], f"{p}/residual_2")
    x = b.layernorm("", "ln_f", x, H)
    wt = b.op("Transpose", [wte], "lm_head/transpose", perm=[1, 0])
    b.op("MatMul", [x, wt], "lm_head", out="logits")


def rope_tables(c: Config, theta: float = 10000.0):
    hd = c.hidden // c.heads
    inv = 1.0 / theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.arange(c.seq, dtype=np.float64)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=-1)   # HF layout: rotate_half
    return np.cos(ang), np.sin(ang)


def build_llama(b: Builder, c: Config):
    """LLaMA-2: RMSNorm, rotary embedding (HF rotate_half layout), SwiGLU MLP,
    grouped-query attention when kv_heads < heads, untied lm_head."""
    H, nh = c.hidden, c.heads
    kvh = c.kv_heads or nh
    hd = H // nh
    eps = 1e-5
    s0, s1 = b.seq_len("prelude/seq", "input_ids")
    mask = b.causal_mask("prelude/causal_mask", s1)
    cos_t, sin_t = rope_tables(c)
    cos_w = b.weight("buffer.rope.cos", [c.seq, hd], value=lambda: cos_t)
    sin_w = b.weight("buffer.rope.sin", [c.seq, hd], value=lambda: sin_t)
    zero = b.const("prelude/rope/start", [0])
    axis0 = b.const("prelude/rope/axes", [0])
    cos = b.op("Slice", [cos_w, zero, s1, axis0], "prelude/rope/cos")
    sin = b.op("Slice", [sin_w, zero, s1, axis0], "prelude/rope/sin")
    emb = b.weight("embed_tokens.weight", [c.vocab, H])
    x = b.op("Gather", [emb, "input_ids"], "embed_tokens", axis=0)

    def rope(q: str, t: str) -> str:
        a, bb = b.op("Split", [t, b.const(f"{q}/halves", [hd // 2, hd // 2])],
                     f"{q}/split", n_out=2, axis=-1)
        rot = b.op("Concat", [b.op("Neg", [bb], f"{q}/neg"), a], f"{q}/rotate_half", axis=-1)
        return b.op("Add", [b.op("Mul", [t, cos], f"{q}/mul_cos"),
                            b.op("Mul", [rot, sin], f"{q}/mul_sin")], f"{q}/add")

    def repeat_kv(q: str, t: str) -> str:
        # [B,kvh,S,hd] -> [B,kvh,1,S,hd] -> Expand [B,kvh,rep,S,hd] -> [B,nh,S,hd]
        u = b.op("Unsqueeze", [t, b.const(f"{q}/axes", [2])], f"{q}/unsqueeze")
        e = b.op("Expand", [u, b.const(f"{q}/expand_shape", [1, 1, nh // kvh, 1, 1])], f"{q}/expand")
        return b.op("Reshape", [e, b.const(f"{q}/shape", [0, nh, -1, hd])], f"{q}/reshape")

    for i in range(c.layers):
        p = f"layers.{i}"
        a = f"{p}/self_attn"
        h = b.rmsnorm(p, "input_layernorm", x, H, eps)
        q = b.linear(a, "q_proj", h, H, nh * hd, bias=False)
        k = b.linear(a, "k_proj", h, H, kvh * hd, bias=False)
        v = b.linear(a, "v_proj", h, H, kvh * hd, bias=False)
        qh = rope(f"{a}/q_rope", b.heads(f"{a}/q", q, nh, hd, [0, 2, 1, 3]))
        kh = rope(f"{a}/k_rope", b.heads(f"{a}/k", k, kvh, hd, [0, 2, 1, 3]))
        vh = b.heads(f"{a}/v", v, kvh, hd, [0, 2, 1, 3])
        if kvh != nh:
            kh = repeat_kv(f"{a}/k_repeat", kh)
            vh = repeat_kv(f"{a}/v_repeat", vh)
        kt = b.op("Transpose", [kh], f"{a}/k_t", perm=[0, 1, 3, 2])
        ctx = b.attention_core(a, qh, kt, vh, hd, mask)
        ctx = b.merge_heads(f"{a}/out", ctx, nh * hd)
        x = b.op("Add", [x, b.linear(a, "o_proj", ctx, nh * hd, H, bias=False)], f"{p}/residual_1")
        h = b.rmsnorm(p, "post_attention_layernorm", x, H, eps)
        m = f"{p}/mlp"
        g = b.linear(m, "gate_proj", h, H, c.ffn_size, bias=False)
        u = b.linear(m, "up_proj", h, H, c.ffn_size, bias=False)
        g = b.op("Mul", [g, b.op("Sigmoid", [g], f"{m}/sigmoid")], f"{m}/silu")
        h = b.op("Mul", [g, u], f"{m}/gate_mul_up")
        x = b.op("Add", [x, b.linear(m, "down_proj", h, c.ffn_size, H, bias=False)], f"{p}/residual_2")
    x = b.rmsnorm("", "norm", x, H, eps)
    w = b.weight("lm_head.weight", [H, c.vocab])
    b.op("MatMul", [x, w], "lm_head", out="logits")


def bert_attention(b: Builder, a: str, x: str, H: int, nh: int, bias: str | None) -> str:
    """BERT self-attention with separate q/k/v projections (with biases)."""
    hd = H // nh
    q = b.heads(f"{a}/q", b.linear(a, "query", x, H, H), nh, hd, [0, 2, 1, 3])
    kt = b.heads(f"{a}/k", b.linear(a, "key", x, H, H), nh, hd, [0, 2, 3, 1])
    v = b.heads(f"{a}/v", b.linear(a, "value", x, H, H), nh, hd, [0, 2, 1, 3])
    ctx = b.merge_heads(f"{a}/out", b.attention_core(a, q, kt, v, hd, bias), H)
    return b.linear(a, "output", ctx, H, H)


def bert_dense_layer(b: Builder, p: str, x: str, c: Config, eps: float) -> str:
    """Post-LN BERT layer: LN(x + attn(x)); LN(x + W2 gelu(W1 x))."""
    H = c.hidden
    x = b.op("Add", [x, bert_attention(b, f"{p}/attention", x, H, c.heads, None)],
             f"{p}/attention/residual")
    x = b.layernorm(f"{p}/attention", "ln", x, H, eps)
    h = b.gelu_erf(f"{p}/mlp/gelu", b.linear(f"{p}/mlp", "intermediate", x, H, c.ffn_size))
    x = b.op("Add", [x, b.linear(f"{p}/mlp", "output", h, c.ffn_size, H)], f"{p}/mlp/residual")
    return b.layernorm(f"{p}/mlp", "ln", x, H, eps)


def bert_embeddings(b: Builder, c: Config, token_types: bool, eps: float) -> str:
    H = c.hidden
    s0, _ = b.seq_len("prelude/seq", "input_ids")
    pos = b.positions("prelude/pos", s0)
    word = b.weight("embeddings.word_embeddings.weight", [c.vocab, H])
    x = b.op("Gather", [word, "input_ids"], "embeddings/word", axis=0)
    pe = b.weight("embeddings.position_embeddings.weight", [c.seq, H])
    x = b.op("Add", [x, b.op("Gather", [pe, pos], "embeddings/position", axis=0)],
             "embeddings/add_position")
    if token_types:  # a single segment: row 0 of the token-type table
        tt = b.weight("embeddings.token_type_embeddings.weight", [2, H])
        t0 = b.op("Gather", [tt, b.const("embeddings/token_type/id", 0)],
                  "embeddings/token_type", axis=0)
        x = b.op("Add", [x, t0], "embeddings/add_token_type")
    return b.layernorm("embeddings", "ln", x, H, eps)


def build_bert(b: Builder, c: Config):
    """BERT encoder (bidirectional, post-LN) with the masked-LM head."""
    H, eps = c.hidden, 1e-12
    x = bert_embeddings(b, c, True, eps)
    for i in range(c.layers):
        x = bert_dense_layer(b, f"layer.{i}", x, c, eps)
    h = b.gelu_erf("cls/transform/gelu", b.linear("cls/transform", "dense", x, H, H))
    h = b.layernorm("cls/transform", "ln", h, H, eps)
    wt = b.op("Transpose", ["embeddings.word_embeddings.weight"], "cls/decoder/transpose", perm=[1, 0])
    y = b.op("MatMul", [h, wt], "cls/decoder")
    b.op("Add", [y, b.weight("cls.decoder.bias", [c.vocab], "zeros")], "cls/decoder/bias",
         out="logits")


def t5_position_bias(b: Builder, p: str, c: Config, q1: str, k1: str,
                     bidirectional: bool) -> str:
    """T5 relative position bias [1, nh, Sq, Sk] (32 buckets, max distance 128),
    the same arithmetic as HF T5Attention._relative_position_bucket."""
    nb, maxd = 32, 128
    qs = b.op("Squeeze", [q1, b.const(f"{p}/q_axes", [0])], f"{p}/q_len")
    ks = b.op("Squeeze", [k1, b.const(f"{p}/k_axes", [0])], f"{p}/k_len")
    qpos = b.op("Unsqueeze", [b.positions(f"{p}/q_pos", qs), b.const(f"{p}/q_unsq", [1])], f"{p}/q_col")
    kpos = b.op("Unsqueeze", [b.positions(f"{p}/k_pos", ks), b.const(f"{p}/k_unsq", [0])], f"{p}/k_row")
    rel = b.op("Sub", [kpos, qpos], f"{p}/relative")                 # [Sq, Sk] int64
    zero = b.const(f"{p}/zero", 0)
    if bidirectional:
        nb //= 2
        side = b.op("Cast", [b.op("Greater", [rel, zero], f"{p}/is_right")], f"{p}/is_right_i",
                    to=TensorProto.INT64)
        base = b.op("Mul", [side, b.const(f"{p}/half_buckets", nb)], f"{p}/side_bucket")
        n = b.op("Max", [rel, b.op("Neg", [rel], f"{p}/neg")], f"{p}/abs")
    else:
        base = None
        n = b.op("Neg", [b.op("Min", [rel, zero], f"{p}/min0")], f"{p}/past")
    max_exact = nb // 2
    small = b.op("Less", [n, b.const(f"{p}/max_exact", max_exact)], f"{p}/is_small")
    nf = b.op("Cast", [n], f"{p}/n_float", to=TensorProto.FLOAT)
    nf = b.op("Max", [nf, b.scalar(f"{p}/one", 1.0)], f"{p}/n_clamp")   # log(0) never used
    lg = b.op("Log", [b.op("Div", [nf, b.scalar(f"{p}/max_exact_f", float(max_exact))],
                           f"{p}/ratio")], f"{p}/log")
    lg = b.op("Mul", [lg, b.scalar(f"{p}/log_scale",
                                   (nb - max_exact) / math.log(maxd / max_exact))], f"{p}/scaled")
    large = b.op("Cast", [lg], f"{p}/trunc", to=TensorProto.INT64)
    large = b.op("Add", [large, b.const(f"{p}/max_exact_i", max_exact)], f"{p}/large")
    large = b.op("Min", [large, b.const(f"{p}/last_bucket", nb - 1)], f"{p}/large_clamp")
    bucket = b.op("Where", [small, n, large], f"{p}/bucket")
    if base is not None:
        bucket = b.op("Add", [bucket, base], f"{p}/bucket_full")
    w = b.weight(f"{dot(p)}.relative_attention_bias.weight", [32, c.heads])
    e = b.op("Gather", [w, bucket], f"{p}/gather", axis=0)             # [Sq,Sk,nh]
    e = b.op("Transpose", [e], f"{p}/transpose", perm=[2, 0, 1])
    return b.op("Unsqueeze", [e, b.const(f"{p}/axes", [0])], f"{p}/bias")


def t5_attention(b: Builder, a: str, x: str, kv: str, c: Config, bias: str | None) -> str:
    H, nh = c.hidden, c.heads
    hd = H // nh
    q = b.heads(f"{a}/q", b.linear(a, "q", x, H, H, bias=False), nh, hd, [0, 2, 1, 3])
    kt = b.heads(f"{a}/k", b.linear(a, "k", kv, H, H, bias=False), nh, hd, [0, 2, 3, 1])
    v = b.heads(f"{a}/v", b.linear(a, "v", kv, H, H, bias=False), nh, hd, [0, 2, 1, 3])
    ctx = b.merge_heads(f"{a}/out", b.attention_core(a, q, kt, v, None, bias), H)  # T5: no 1/sqrt(d)
    return b.linear(a, "o", ctx, H, H, bias=False)


def t5_ffn(b: Builder, p: str, x: str, c: Config) -> str:
    h = b.op("Relu", [b.linear(p, "wi", x, c.hidden, c.ffn_size, bias=False)], f"{p}/relu")
    return b.linear(p, "wo", h, c.ffn_size, c.hidden, bias=False)


def build_t5(b: Builder, c: Config):
    """T5 v1.0 encoder-decoder: RMS LayerNorm (eps 1e-6), relative position
    bias computed once per stack and shared by its layers, ReLU FFN, decoder
    cross-attention, logits tied to the shared embedding (scaled d^-0.5)."""
    H, eps = c.hidden, 1e-6
    shared = b.weight("shared.weight", [c.vocab, H], std=1.0)
    _, e1 = b.seq_len("encoder/prelude/seq", "input_ids")
    _, d1 = b.seq_len("decoder/prelude/seq", "decoder_input_ids")
    enc_bias = t5_position_bias(b, "encoder/prelude/position", c, e1, e1, True)
    dec_pos = t5_position_bias(b, "decoder/prelude/position", c, d1, d1, False)
    causal = b.causal_mask("decoder/prelude/causal_mask", d1)
    dec_bias = b.op("Add", [dec_pos, causal], "decoder/prelude/self_bias")

    x = b.op("Gather", [shared, "input_ids"], "encoder/embed", axis=0)
    for i in range(c.layers):
        p = f"encoder.block.{i}"
        h = b.rmsnorm(p, "ln_self", x, H, eps)
        x = b.op("Add", [x, t5_attention(b, f"{p}/self_attn", h, h, c, enc_bias)], f"{p}/residual_1")
        h = b.rmsnorm(p, "ln_ff", x, H, eps)
        x = b.op("Add", [x, t5_ffn(b, f"{p}/ff", h, c)], f"{p}/residual_2")
    enc = b.rmsnorm("encoder", "final_ln", x, H, eps)

    y = b.op("Gather", [shared, "decoder_input_ids"], "decoder/embed", axis=0)
    for i in range(c.dec_layers):
        p = f"decoder.block.{i}"
        h = b.rmsnorm(p, "ln_self", y, H, eps)
        y = b.op("Add", [y, t5_attention(b, f"{p}/self_attn", h, h, c, dec_bias)], f"{p}/residual_1")
        h = b.rmsnorm(p, "ln_cross", y, H, eps)
        y = b.op("Add", [y, t5_attention(b, f"{p}/cross_attn", h, enc, c, None)], f"{p}/residual_2")
        h = b.rmsnorm(p, "ln_ff", y, H, eps)
        y = b.op("Add", [y, t5_ffn(b, f"{p}/ff", h, c)], f"{p}/residual_3")
    y = b.rmsnorm("decoder", "final_ln", y, H, eps)
    y = b.op("Mul", [y, b.scalar("lm_head/rescale_c", H ** -0.5)], "lm_head/rescale")
    wt = b.op("Transpose", [shared], "lm_head/transpose", perm=[1, 0])
    b.op("MatMul", [y, wt], "lm_head", out="logits")


def build_vit(b: Builder, c: Config):
    """ViT: patch Conv, class token, learned positions, pre-LN encoder with
    fused QKV and GELU(erf) MLP, final LN, linear head on the class token."""
    H, nh, F = c.hidden, c.heads, c.ffn_size
    hd = H // nh
    n = (c.image // c.patch) ** 2
    pw = b.weight("patch_embed.proj.weight", [H, 3, c.patch, c.patch])
    pb = b.weight("patch_embed.proj.bias", [H], "zeros")
    x = b.op("Conv", ["pixel_values", pw, pb], "patch_embed/proj",
             kernel_shape=[c.patch, c.patch], strides=[c.patch, c.patch])
    x = b.op("Reshape", [x, b.const("patch_embed/shape", [0, H, n])], "patch_embed/flatten")
    x = b.op("Transpose", [x], "patch_embed/transpose", perm=[0, 2, 1])       # [B,n,H]
    shape = b.op("Shape", ["pixel_values"], "prelude/shape")
    batch = b.op("Slice", [shape, b.const("prelude/start", [0]), b.const("prelude/end", [1])],
                 "prelude/batch")
    cls_shape = b.op("Concat", [batch, b.const("prelude/cls_dims", [1, H])], "prelude/cls_shape", axis=0)
    cls = b.weight("cls_token", [1, 1, H])
    cls = b.op("Expand", [cls, cls_shape], "cls_token/expand")
    x = b.op("Concat", [cls, x], "tokens", axis=1)
    x = b.op("Add", [x, b.weight("pos_embed", [1, n + 1, H])], "pos_embed/add")
    for i in range(c.layers):
        p = f"blocks.{i}"
        h = b.layernorm(p, "norm1", x, H, 1e-6)
        qkv = b.linear(f"{p}/attn", "qkv", h, H, 3 * H)
        q, k, v = b.op("Split", [qkv, b.const(f"{p}/attn/split_sizes", [H, H, H])],
                       f"{p}/attn/split", n_out=3, axis=-1)
        ctx = b.attention_core(f"{p}/attn", b.heads(f"{p}/attn/q", q, nh, hd, [0, 2, 1, 3]),
                               b.heads(f"{p}/attn/k", k, nh, hd, [0, 2, 3, 1]),
                               b.heads(f"{p}/attn/v", v, nh, hd, [0, 2, 1, 3]), hd, None)
        ctx = b.merge_heads(f"{p}/attn/out", ctx, H)
        x = b.op("Add", [x, b.linear(f"{p}/attn", "proj", ctx, H, H)], f"{p}/residual_1")
        h = b.layernorm(p, "norm2", x, H, 1e-6)
        h = b.gelu_erf(f"{p}/mlp/gelu", b.linear(f"{p}/mlp", "fc1", h, H, F))
        x = b.op("Add", [x, b.linear(f"{p}/mlp", "fc2", h, F, H)], f"{p}/residual_2")
    x = b.layernorm("", "norm", x, H, 1e-6)
    x = b.op("Gather", [x, b.const("head/cls_index", 0)], "head/cls", axis=1)   # [B,H]
    w = b.weight("head.weight", [c.classes, H])
    bias = b.weight("head.bias", [c.classes], "zeros")
    b.op("Gemm", [x, w, bias], "head", out="logits", transB=1)


def build_wresnet(b: Builder, c: Config):
    """Wide-ResNet (bottleneck, stride on the 3x3 conv). Batch norm in its
    inference form: scale/bias are parameters, running mean/var are buffers."""

    def conv_bn(p: str, x: str, cin: int, cout: int, k: int, stride: int, relu: bool) -> str:
        w = b.weight(f"{dot(p)}.conv.weight", [cout, cin, k, k], std=math.sqrt(2.0 / (cin * k * k)))
        y = b.op("Conv", [x, w], f"{p}/conv", kernel_shape=[k, k], strides=[stride, stride],
                 pads=[k // 2] * 4)
        s = b.weight(f"{dot(p)}.bn.weight", [cout], "ones")
        bb = b.weight(f"{dot(p)}.bn.bias", [cout], "zeros")
        m = b.weight(f"buffer.{dot(p)}.bn.running_mean", [cout], "zeros")
        v = b.weight(f"buffer.{dot(p)}.bn.running_var", [cout], "var")
        y = b.op("BatchNormalization", [y, s, bb, m, v], f"{p}/bn", epsilon=1e-5)
        return b.op("Relu", [y], f"{p}/relu") if relu else y

    x = conv_bn("stem", "pixel_values", 3, c.base, 7, 2, True)
    x = b.op("MaxPool", [x], "stem/maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = c.base
    for i, n in enumerate(resnet_stages(c.depth)):
        f = c.base * 2 ** i
        mid, mid2 = resnet_mids(c, f)
        for j in range(n):
            p = f"layer{i + 1}.{j}"
            stride = 2 if i > 0 and j == 0 else 1
            y = conv_bn(f"{p}/conv1", x, cin, mid, 1, 1, True)
            y = conv_bn(f"{p}/conv2", y, mid, mid2, 3, stride, True)
            y = conv_bn(f"{p}/conv3", y, mid2, 4 * f, 1, 1, False)
            if j == 0:
                x = conv_bn(f"{p}/downsample", x, cin, 4 * f, 1, stride, False)
            x = b.op("Relu", [b.op("Add", [x, y], f"{p}/residual")], f"{p}/relu")
            cin = 4 * f
    x = b.op("GlobalAveragePool", [x], "avgpool")
    x = b.op("Flatten", [x], "flatten", axis=1)
    w = b.weight("fc.weight", [c.classes, cin], std=0.01)
    bias = b.weight("fc.bias", [c.classes], "zeros")
    b.op("Gemm", [x, w, bias], "fc", out="logits", transB=1)


def moe_ffn(b: Builder, p: str, x: str, c: Config) -> str:
    """GShard top-2 MoE FFN (as in Alpa's FlaxPositionWiseMoELayer).

    Tokens are grouped [G, S_, M]; experts are an extra tensor dimension E of
    the weights wi [E, M, F] / wo [E, F, M]; dispatch and combine are
    Einsums over one-hot [G, S_, E, C] tensors with capacity
    C = capacity_factor * 2 * S_ / E. Over-capacity tokens are dropped.
    """
    M, F, E, S = c.hidden, c.ffn_size, c.experts, c.group
    C = int(round(c.capacity_factor * 2 * S / E))
    f32 = TensorProto.FLOAT
    xg = b.op("Reshape", [x, b.const(f"{p}/group_shape", [-1, S, M])], f"{p}/group")
    wg = b.weight(f"{dot(p)}.wg", [M, E])
    gates = b.op("Softmax", [b.op("Einsum", [xg, wg], f"{p}/gate_logits", equation="gsm,me->gse")],
                 f"{p}/gates", axis=-1)
    topv, topi = b.op("TopK", [gates, b.const(f"{p}/k", [2])], f"{p}/top2", n_out=2, axis=-1)
    g1, g2 = b.op("Split", [topv, b.const(f"{p}/split_v", [1, 1])], f"{p}/split_gate", n_out=2, axis=-1)
    i1, i2 = b.op("Split", [topi, b.const(f"{p}/split_i", [1, 1])], f"{p}/split_index", n_out=2, axis=-1)
    onoff = b.const(f"{p}/onehot_values", [0.0, 1.0], F32)
    depth_e = b.const(f"{p}/num_experts", E)
    depth_c = b.const(f"{p}/capacity", C)
    cap_f = b.scalar(f"{p}/capacity_f", float(C))

    def expert_mask(n: int, idx: str, offset: str | None):
        sq = b.op("Squeeze", [idx, b.const(f"{p}/e{n}/axes", [-1])], f"{p}/e{n}/index")
        m = b.op("OneHot", [sq, depth_e, onoff], f"{p}/e{n}/onehot", axis=-1)      # [G,S,E]
        pos = b.op("CumSum", [m, b.const(f"{p}/e{n}/cum_axis", 1)], f"{p}/e{n}/position", exclusive=1)
        if offset is not None:
            pos = b.op("Add", [pos, offset], f"{p}/e{n}/position_after_first")
        keep = b.op("Cast", [b.op("Less", [pos, cap_f], f"{p}/e{n}/fits")], f"{p}/e{n}/fits_f", to=f32)
        m = b.op("Mul", [m, keep], f"{p}/e{n}/mask")
        slot = b.op("ReduceSum", [b.op("Mul", [pos, m], f"{p}/e{n}/masked_position"),
                                  b.const(f"{p}/e{n}/slot_axes", [-1])], f"{p}/e{n}/slot", keepdims=0)
        kept = b.op("ReduceSum", [m, b.const(f"{p}/e{n}/kept_axes", [-1])], f"{p}/e{n}/kept", keepdims=1)
        return m, slot, kept

    m1, slot1, kept1 = expert_mask(1, i1, None)
    count1 = b.op("ReduceSum", [m1, b.const(f"{p}/e1/count_axes", [1])], f"{p}/e1/count", keepdims=1)
    m2, slot2, kept2 = expert_mask(2, i2, count1)
    g1 = b.op("Mul", [g1, kept1], f"{p}/e1/gate")
    g2 = b.op("Mul", [g2, kept2], f"{p}/e2/gate")
    den = b.op("Add", [g1, g2], f"{p}/gate_sum")
    den = b.op("Where", [b.op("Greater", [den, b.scalar(f"{p}/zero_f", 0.0)], f"{p}/gate_sum_pos"),
                         den, b.scalar(f"{p}/one_f", 1.0)], f"{p}/gate_denominator")

    def combine_part(n: int, g: str, m: str, slot: str) -> str:
        g = b.op("Div", [g, den], f"{p}/e{n}/gate_norm")
        a = b.op("Mul", [g, m], f"{p}/e{n}/weighted")                                 # [G,S,E]
        si = b.op("Cast", [slot], f"{p}/e{n}/slot_i", to=TensorProto.INT64)
        oc = b.op("OneHot", [si, depth_c, onoff], f"{p}/e{n}/slot_onehot", axis=-1)  # [G,S,C]
        return b.op("Einsum", [a, oc], f"{p}/e{n}/combine", equation="gse,gsc->gsec")

    comb = b.op("Add", [combine_part(1, g1, m1, slot1), combine_part(2, g2, m2, slot2)], f"{p}/combine")
    disp = b.op("Cast", [b.op("Greater", [comb, b.scalar(f"{p}/zero_c", 0.0)], f"{p}/dispatch_b")],
                f"{p}/dispatch", to=f32)
    xin = b.op("Einsum", [disp, xg], f"{p}/dispatch_tokens", equation="gsec,gsm->egcm")
    wi = b.weight(f"{dot(p)}.wi", [E, M, F])
    wo = b.weight(f"{dot(p)}.wo", [E, F, M])
    h = b.op("Relu", [b.op("Einsum", [xin, wi], f"{p}/wi", equation="egcm,emh->egch")], f"{p}/relu")
    y = b.op("Einsum", [h, wo], f"{p}/wo", equation="egch,ehm->gecm")
    y = b.op("Einsum", [comb, y], f"{p}/combine_tokens", equation="gsec,gecm->gsm")
    return b.op("Reshape", [y, b.op("Shape", [x], f"{p}/input_shape")], f"{p}/ungroup")


def build_moe(b: Builder, c: Config):
    """Alpa's GShard MoE LM (alpa/model/moe.py): BERT-style post-LN encoder
    whose even layers replace the MLP by a top-2 MoE; tied logits + bias."""
    H, eps = c.hidden, 1e-12
    x = bert_embeddings(b, c, False, eps)
    for i in range(c.layers):
        p = f"layers.{i}"
        if i % 2 == 1:
            x = bert_dense_layer(b, p, x, c, eps)
            continue
        x = b.op("Add", [x, bert_attention(b, f"{p}/attention", x, H, c.heads, None)],
                 f"{p}/attention/residual")
        x = b.layernorm(f"{p}/attention", "ln", x, H, eps)
        x = b.op("Add", [x, moe_ffn(b, f"{p}/moe", x, c)], f"{p}/moe/residual")
        x = b.layernorm(f"{p}/moe", "ln", x, H, eps)
    wt = b.op("Transpose", ["embeddings.word_embeddings.weight"], "lm_head/transpose", perm=[1, 0])
    y = b.op("MatMul", [x, wt], "lm_head")
    b.op("Add", [y, b.weight("lm_head.bias", [c.vocab], "zeros")], "lm_head/bias", out="logits")


BUILDERS = {"gpt": build_gpt, "llama": build_llama, "bert": build_bert, "t5": build_t5,
            "vit": build_vit, "wresnet": build_wresnet, "moe": build_moe}


# --------------------------------------------------------------------------
# Model assembly
# --------------------------------------------------------------------------

def io_of(c: Config):
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    if c.family in ("vit", "wresnet"):
        return ([helper.make_tensor_value_info("pixel_values", f, ["batch", 3, c.image, c.image])],
                [helper.make_tensor_value_info("logits", f, ["batch", c.classes])])
    ins = [helper.make_tensor_value_info("input_ids", i64, ["batch", "seq"])]
    out_seq = "seq"
    if c.family == "t5":
        ins.append(helper.make_tensor_value_info("decoder_input_ids", i64, ["batch", "dec_seq"]))
        out_seq = "dec_seq"
    return ins, [helper.make_tensor_value_info("logits", f, ["batch", out_seq, c.vocab])]


def build(c: Config, weights: bool | None = None) -> onnx.ModelProto:
    """The model of config c. weights=True embeds random weights even for a
    graph-only config (used by export_hf.py --verify-zoo; never saved)."""
    b = Builder(c.name, c.tiny if weights is None else weights)
    BUILDERS[c.family](b, c)
    want = expected_params(c)
    if b.params != want:
        raise AssertionError(f"{c.name}: graph has {b.params} parameters, formula {want}")
    ins, outs = io_of(c)
    graph = helper.make_graph(b.nodes, c.name.replace("-", "_").replace(".", "_"), ins, outs,
                              initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name=PRODUCER, producer_version=PRODUCER_VERSION,
                              doc_string=f"{c.name}: {c.family} ({c.form}). Source: {c.source}."
                              + (f" Note: {c.note}." if c.note else ""))
    model.ir_version = IR_VERSION
    meta = {"bm.family": c.family, "bm.form": c.form, "bm.params": str(b.params),
            "bm.source": c.source}
    if c.published:
        meta["bm.published_params"] = c.published
    if c.seq:
        meta["bm.dim.seq"] = str(c.seq)
    if c.dec_seq:
        meta["bm.dim.dec_seq"] = str(c.dec_seq)
    if not b.tiny:
        meta["bm.external_data"] = b.data_file
    for k in sorted(meta):
        e = model.metadata_props.add()
        e.key, e.value = k, meta[k]
    return model


def is_parameter(name: str) -> bool:
    return not name.startswith((BUFFER_PREFIX, CONST_PREFIX))


def param_count(model: onnx.ModelProto) -> int:
    """Sum of initializer element counts, buffers and constants excluded."""
    return sum(int(np.prod(t.dims, dtype=np.int64)) for t in model.graph.initializer
               if is_parameter(t.name))


def save(model: onnx.ModelProto, path: str):
    data = model.SerializeToString(deterministic=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


SHORT_SOURCES = (("Brown et al.", "GPT-3 T2.1"), ("Narayanan et al.", "Megatron-LM T1"),
                 ("Touvron et al.", "Llama 2 + HF config"), ("Devlin et al.", "BERT + HF config"),
                 ("Raffel et al.", "T5 + HF config"), ("Dosovitskiy et al.", "ViT T1"),
                 ("Zagoruyko", "WRN + torchvision"), ("tiny test model", "tiny"),
                 ("the GPT-3 builder at a size", "CPU benchmark"),
                 ("transformers ", "HF transformers"))


def short_source(c: Config) -> str:
    if c.source.startswith("Zheng et al. 2022 (Alpa)"):
        return "Alpa T4 + " + ("moe_specs" if c.family == "moe" else "wresnet_specs")
    return next(s for prefix, s in SHORT_SOURCES if c.source.startswith(prefix))


def readme_rows() -> str:
    """The model table of models/README.md (the test checks it is current)."""
    rows = ["| model | form | params (exact) | published | layers | hidden | heads | seq | "
            "vocab / classes | source |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in CONFIGS:
        n = expected_params(c)
        if c.family == "wresnet":
            layers, hidden = (c.depth or "4 blocks"), f"C={c.base} W={c.width}"
        else:
            layers = f"{c.layers}+{c.dec_layers}" if c.dec_layers else c.layers
            hidden = f"{c.hidden}" + (f", {c.experts} experts" if c.experts else "")
        heads = (f"{c.heads} (kv {c.kv_heads})" if c.kv_heads else str(c.heads)) if c.heads else "-"
        if c.family == "vit":
            seq = f"{(c.image // c.patch) ** 2 + 1} (patch {c.patch})"
        elif c.family == "wresnet":
            seq = f"{c.image}x{c.image}"
        else:
            seq = f"{c.seq}/{c.dec_seq}" if c.dec_seq else str(c.seq)
        rows.append(f"| `{c.name}` | {c.form} | {n:,} | {c.published or '-'} | {layers} | {hidden} "
                    f"| {heads} | {seq} | {c.vocab or c.classes} | {short_source(c)} |")
    return "\n".join(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="configs to build (default: all)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx"))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--readme-table", action="store_true")
    ap.add_argument("--layers", type=int, default=None,
                    help="override the layer count (benchmarks: depth scaling); "
                         "the file is named <name>-<N>l.onnx")
    args = ap.parse_args(argv)
    if args.readme_table:
        print(readme_rows())
        return 0
    cfgs = [BY_NAME[n] for n in args.names] if args.names else CONFIGS
    if args.layers is not None:
        if args.layers < 1 or not args.names:
            ap.error("--layers needs named configs and a positive count")
        cfgs = [dataclasses.replace(c, name=f"{c.name}-{args.layers}l", layers=args.layers)
                for c in cfgs]
    if not args.list:
        if any(c.exported for c in cfgs if c.name in args.names):
            ap.error("exported models are written by models/export_hf.py")
        cfgs = [c for c in cfgs if not c.exported]
    if args.list:
        for c in cfgs:
            n = expected_params(c)
            pub = published_value(c.published) if c.published else n
            print(f"{c.name:22s} {c.form:10s} {n:>16,d}  published {c.published or '-':>8s} "
                  f"({(n - pub) / pub:+.2%}, tol {tolerance(c):.2%})"
                  + ("" if abs(n - pub) <= tolerance(c) * pub else "  OUT OF TOLERANCE"))
        return 0
    os.makedirs(args.out, exist_ok=True)
    for c in cfgs:
        model = build(c)
        path = os.path.join(args.out, f"{c.name}.onnx")
        save(model, path)
        print(f"{path}: {os.path.getsize(path):,} bytes, {param_count(model):,} params")
    return 0


if __name__ == "__main__":
    sys.exit(main())
