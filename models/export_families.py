#!/usr/bin/env python3
"""Export what real exporters write: torchvision's classification families
and tiny Hugging Face `transformers` architectures, with torch.onnx.export's
legacy (TorchScript) exporter at several opsets and its dynamo exporter,
then check that `bmc plan` imports and plans each file.

Nothing is downloaded: torchvision models are built with random weights,
transformers models from small configs. The models are small versions of
each family (fewer blocks, narrow widths, small images) built with the
family's own classes, so the exporter writes the family's real patterns
(Swin's shifted windows, MaxViT's partitions, RegNet's group widths, MoE
routing, rotary embeddings, ...). Every float initializer with more than 64
elements then becomes absent external data ("graph-only", as the zoo's
graph-only models): the files are tens of kilobytes.

Needs torch, torchvision and transformers, which the project does not: use
the export venv of export_hf.py plus torchvision.

  python3 -m venv models/.venv-export
  models/.venv-export/bin/pip install torch==2.9.1 torchvision==0.24.1 \\
      transformers==4.57.1 onnxscript==0.5.6 onnx==1.19.1 \\
      onnxruntime==1.22.1 numpy==2.2.6
  models/.venv-export/bin/python models/export_families.py \\
      --out models/exported --bmc build/bin/bmc [NAME ...]

--layers N builds the Hugging Face models N layers deep (folding at depth:
their fold line should read N layers -> 1 block per stack).

Writes OUT/NAME-EXPORTER.onnx (EXPORTER: legacy13, legacy17, dynamo18, ...)
and OUT/results.txt, one line per export: the file, "ok" or the first error
line (of the exporter or of bmc). tests/models/test_exported.py plans every
file in models/exported. One export at a time: exporting is CPU-heavy.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import subprocess
import sys
import tempfile
import traceback
import warnings

import onnx
import torch

warnings.filterwarnings("ignore")
torch.manual_seed(0)

LEGACY_OPSETS = (13, 17)
DYNAMO_OPSET = 18


# --- torchvision ------------------------------------------------------------

def tv(name):
    """A builder of torchvision model `name` (its own constructor args)."""
    def build():
        import torchvision.models as m
        from torchvision.models import convnext, regnet, resnet, swin_transformer
        from torchvision.models.vision_transformer import VisionTransformer
        small = {
            "resnet": lambda: resnet.ResNet(resnet.BasicBlock, [1, 1, 1, 1], num_classes=10),
            "wide_resnet": lambda: resnet.ResNet(resnet.Bottleneck, [1, 1, 1, 1], num_classes=10,
                                                 width_per_group=128),
            "resnext": lambda: resnet.ResNet(resnet.Bottleneck, [1, 1, 1, 1], num_classes=10,
                                             groups=32, width_per_group=4),
            "regnet": lambda: regnet.RegNet(regnet.BlockParams.from_init_params(
                depth=4, w_0=16, w_a=8.0, w_m=2.0, group_width=8), num_classes=10),
            "mobilenet_v2": lambda: m.mobilenet_v2(width_mult=0.25, num_classes=10),
            "mobilenet_v3": lambda: m.mobilenet_v3_small(width_mult=0.25, num_classes=10),
            "efficientnet": lambda: m.efficientnet_b0(num_classes=10),
            "efficientnet_v2": lambda: m.efficientnet_v2_s(num_classes=10),
            "convnext": lambda: convnext.ConvNeXt(
                [convnext.CNBlockConfig(16, 32, 1), convnext.CNBlockConfig(32, None, 1)],
                num_classes=10),
            "vit": lambda: VisionTransformer(image_size=64, patch_size=16, num_layers=2,
                                             num_heads=2, hidden_dim=32, mlp_dim=64,
                                             num_classes=10),
            "swin": lambda: swin_transformer.SwinTransformer(
                patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                window_size=[4, 4], num_classes=10),
            "swin_v2": lambda: swin_transformer.SwinTransformer(
                patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4],
                window_size=[4, 4], num_classes=10,
                block=swin_transformer.SwinTransformerBlockV2,
                downsample_layer=swin_transformer.PatchMergingV2),
            "maxvit": lambda: m.MaxVit(input_size=(64, 64), stem_channels=8, partition_size=2,
                                       block_channels=[16, 32], block_layers=[1, 1], head_dim=8,
                                       stochastic_depth_prob=0.0, num_classes=10),
            "densenet": lambda: m.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16,
                                           num_classes=10),
            "squeezenet": lambda: m.squeezenet1_1(num_classes=10),
            "shufflenet_v2": lambda: m.shufflenet_v2_x0_5(num_classes=10),
            "mnasnet": lambda: m.mnasnet0_5(num_classes=10),
            "googlenet": lambda: m.googlenet(num_classes=10, aux_logits=False, init_weights=True),
            "vgg": lambda: m.vgg11(num_classes=10),
            "alexnet": lambda: m.alexnet(num_classes=10),
        }
        # VGG's and AlexNet's adaptive pooling exports only where it divides
        # evenly: their full 224 x 224 images.
        size = 224 if name in ("vgg", "alexnet") else 64
        return (small[name]().eval(), (torch.randn(2, 3, size, size),), ("pixels",),
                {"pixels": {0: "batch"}})
    return build


TORCHVISION = ["resnet", "wide_resnet", "resnext", "regnet", "mobilenet_v2", "mobilenet_v3",
               "efficientnet", "efficientnet_v2", "convnext", "vit", "swin", "swin_v2", "maxvit",
               "densenet", "squeezenet", "shufflenet_v2", "mnasnet", "googlenet", "vgg", "alexnet"]


# --- transformers -----------------------------------------------------------

TINY = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=64)


def hf_configs():
    import transformers as t
    moe = dict(num_local_experts=4, num_experts_per_tok=2)
    return {
        "gpt2": (t.GPT2LMHeadModel, t.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4,
                                                 n_positions=64)),
        "gpt_neox": (t.GPTNeoXForCausalLM, t.GPTNeoXConfig(**TINY)),
        "opt": (t.OPTForCausalLM, t.OPTConfig(vocab_size=128, hidden_size=32, ffn_dim=64,
                                               num_hidden_layers=2, num_attention_heads=4,
                                               max_position_embeddings=64, word_embed_proj_dim=32)),
        "bloom": (t.BloomForCausalLM, t.BloomConfig(vocab_size=128, hidden_size=32, n_layer=2,
                                                    n_head=4)),
        "falcon": (t.FalconForCausalLM, t.FalconConfig(vocab_size=128, hidden_size=32,
                                                       num_hidden_layers=2, num_attention_heads=4)),
        "llama": (t.LlamaForCausalLM, t.LlamaConfig(**TINY, num_key_value_heads=2)),
        "mistral": (t.MistralForCausalLM, t.MistralConfig(**TINY, num_key_value_heads=2)),
        "qwen2": (t.Qwen2ForCausalLM, t.Qwen2Config(**TINY, num_key_value_heads=2)),
        "gemma": (t.GemmaForCausalLM, t.GemmaConfig(**TINY, num_key_value_heads=2, head_dim=8)),
        "phi": (t.PhiForCausalLM, t.PhiConfig(**TINY)),
        "phi3": (t.Phi3ForCausalLM, t.Phi3Config(**TINY, num_key_value_heads=2,
                                                 pad_token_id=0)),
        "qwen3": (t.Qwen3ForCausalLM, t.Qwen3Config(**TINY, num_key_value_heads=2, head_dim=8)),
        "gemma2": (t.Gemma2ForCausalLM, t.Gemma2Config(**TINY, num_key_value_heads=2,
                                                       head_dim=8)),
        "gptj": (t.GPTJForCausalLM, t.GPTJConfig(vocab_size=128, n_embd=32, n_layer=2,
                                                 n_head=4, rotary_dim=4, n_positions=64)),
        "mixtral": (t.MixtralForCausalLM, t.MixtralConfig(**TINY, num_key_value_heads=2, **moe)),
        "qwen2_moe": (t.Qwen2MoeForCausalLM, t.Qwen2MoeConfig(
            **TINY, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, shared_expert_intermediate_size=32)),
        "bert": (t.BertForMaskedLM, t.BertConfig(**TINY)),
        "roberta": (t.RobertaForMaskedLM, t.RobertaConfig(**{**TINY, "max_position_embeddings": 70})),
        "t5": (t.T5ForConditionalGeneration, t.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64,
                                                        num_layers=2, num_heads=4)),
        "bart": (t.BartForConditionalGeneration, t.BartConfig(
            vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=64)),
        "vit_hf": (t.ViTForImageClassification, t.ViTConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            image_size=32, patch_size=8, num_labels=10)),
        # CLIP's vision tower with the image-classification head (mean of the
        # patch tokens): the projected CLS embedding of CLIPVisionModel-
        # WithProjection barely depends on the image at random weights.
        "clip_vision": (t.CLIPForImageClassification, t.CLIPConfig(
            vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=4, image_size=32, patch_size=8),
            num_labels=10)),
        "whisper": (t.WhisperForConditionalGeneration, t.WhisperConfig(
            vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
            decoder_ffn_dim=64, num_mel_bins=16, max_source_positions=16,
            max_target_positions=32, pad_token_id=1, bos_token_id=2, eos_token_id=3,
            decoder_start_token_id=2, suppress_tokens=[], begin_suppress_tokens=[])),
    }


class HfWrapper(torch.nn.Module):
    """Tensors in, logits out: no cache, no dict."""

    def __init__(self, model, kind):
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, first, second=None):
        if self.kind == "image":
            return self.model(pixel_values=first, return_dict=False)[0]
        if self.kind == "audio":
            return self.model(input_features=first, decoder_input_ids=second,
                              use_cache=False, return_dict=False)[0]
        if self.kind == "seq2seq":
            return self.model(input_ids=first, decoder_input_ids=second,
                              use_cache=False, return_dict=False)[0]
        if self.kind == "encoder":
            return self.model(input_ids=first, return_dict=False)[0]
        return self.model(input_ids=first, use_cache=False, return_dict=False)[0]


class VarargsWrapper(torch.nn.Module):
    """The legacy exporter's tracer wants positional tensors only (GPT-2
    fails on the optional second argument)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *inputs):
        return self.inner(*inputs)


# Layer counts of the configs' own attributes (GPT-2's n_layer, T5's
# num_layers, BART's encoder and decoder, CLIP's vision tower), set by
# --layers to measure folding at depth.
LAYER_ATTRIBUTES = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers",
                    "encoder_layers", "decoder_layers")
LAYERS = None


def with_layers(config, layers):
    for owner in (config, getattr(config, "vision_config", None)):
        for attribute in LAYER_ATTRIBUTES:
            if owner is not None and getattr(owner, attribute, None):
                setattr(owner, attribute, layers)
    # Per-layer attention kinds (Qwen2/3's and Gemma-2's sliding and full
    # layers) repeat their pattern to the new depth.
    kinds = getattr(config, "layer_types", None)
    if kinds:
        config.layer_types = [kinds[i % len(kinds)] for i in range(layers)]
    return config


def hf(name):
    def build():
        cls, config = hf_configs()[name]
        if LAYERS:
            config = with_layers(config, LAYERS)
        config._attn_implementation = "eager"
        model = cls(config).eval()
        ids = torch.randint(0, 128, (2, 8))
        if name in ("t5", "bart"):
            kind, args, names = "seq2seq", (ids, ids[:, :5]), ("input_ids", "decoder_input_ids")
        elif name == "whisper":
            kind, args, names = "audio", (torch.randn(2, 16, 32), ids[:, :5]), (
                "input_features", "decoder_input_ids")
        elif name in ("vit_hf", "clip_vision"):
            kind, args, names = "image", (torch.randn(2, 3, 32, 32),), ("pixels",)
        elif name in ("bert", "roberta"):
            kind, args, names = "encoder", (ids,), ("input_ids",)
        else:
            kind, args, names = "causal", (ids,), ("input_ids",)
        dims = {n: {0: "batch"} if n in ("pixels", "input_features") else {0: "batch", 1: "seq"}
                for n in names}
        if kind == "seq2seq" or kind == "audio":
            dims["decoder_input_ids"] = {0: "batch", 1: "target"}
        return HfWrapper(model, kind).eval(), args, names, dims
    return build


HF = ["gpt2", "gpt_neox", "opt", "bloom", "falcon", "llama", "mistral", "qwen2", "gemma", "phi",
      "phi3", "qwen3", "gemma2", "gptj", "mixtral", "qwen2_moe", "bert", "roberta", "t5", "bart",
      "vit_hf", "clip_vision", "whisper"]


# --- export and check ---------------------------------------------------------

def graph_only(model: onnx.ModelProto) -> onnx.ModelProto:
    """Float initializers of more than 64 elements become external data in
    an absent file, as the zoo's graph-only models; the exporter's
    per-node metadata (stack traces), doc strings and intermediate
    value_info, which no importer needs, go (most of a dynamo export's
    bytes)."""
    for node in model.graph.node:
        node.doc_string = ""
        del node.metadata_props[:]
    del model.graph.value_info[:]
    for tensor in model.graph.initializer:
        if tensor.data_type != onnx.TensorProto.FLOAT:
            continue
        count = 1
        for d in tensor.dims:
            count *= d
        if count <= 64:
            continue
        onnx.external_data_helper.set_external_data(tensor, "weights.bin")
        tensor.ClearField("raw_data")
        tensor.ClearField("float_data")
        tensor.data_location = onnx.TensorProto.EXTERNAL
    return model


def export_one(build, exporter: str, path: str):
    model, args, names, dims = build()
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        raw = os.path.join(tmp, "model.onnx")
        if exporter.startswith("legacy"):
            if isinstance(model, HfWrapper):
                model = VarargsWrapper(model)
            torch.onnx.export(model, args, raw, dynamo=False, opset_version=int(exporter[6:]),
                              input_names=list(names), output_names=["logits"],
                              dynamic_axes=dims)
        else:
            # export_hf.py's workarounds for this torch / transformers pair
            # (an export-friendly attention mask; inlining instead of the
            # opset conversion that refuses torchlib functions) apply on import.
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import export_hf  # noqa: F401
            shapes = {n: {axis: torch.export.Dim.AUTO for axis in d} for n, d in dims.items()}
            torch.onnx.export(model, args, raw, dynamo=True, opset_version=int(exporter[6:]),
                              input_names=list(names), output_names=["logits"],
                              dynamic_shapes=tuple(shapes[n] for n in names), external_data=False)
        exported = onnx.load(raw)
    with open(path, "wb") as f:
        f.write(graph_only(exported).SerializeToString())


def dim_flags(path: str) -> list[str]:
    """--dim NAME=8 for every symbolic dim of the inputs but the batch
    (dim 0, which the planner sets)."""
    model = onnx.load(path, load_external_data=False)
    names = {d.dim_param for i in model.graph.input
             for d in list(i.type.tensor_type.shape.dim)[1:] if d.dim_param}
    return [f for n in sorted(names) for f in ("--dim", f"{n}=8")]


def plan(bmc: str, path: str) -> str:
    run = subprocess.run([bmc, "plan", path, "--gpus", "8"] + dim_flags(path),
                         capture_output=True, text=True)
    if run.returncode == 0:
        return "ok"
    lines = (run.stderr or run.stdout).strip().splitlines() or [f"exit {run.returncode}"]
    return lines[-1][:400]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="families (default: all)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "exported"))
    parser.add_argument("--bmc", help="bmc binary: plan each export")
    parser.add_argument("--layers", type=int,
                        help="layers of the Hugging Face models (default: their configs' 2)")
    parser.add_argument("--exporters", default=",".join(
        [f"legacy{o}" for o in LEGACY_OPSETS] + [f"dynamo{DYNAMO_OPSET}"]))
    args = parser.parse_args()
    global LAYERS
    LAYERS = args.layers
    builders = {n: tv(n) for n in TORCHVISION} | {n: hf(n) for n in HF}
    names = args.names or list(builders)
    unknown = [n for n in names if n not in builders]
    if unknown:
        sys.exit(f"export_families.py: error: unknown family {unknown[0]} "
                 f"(families: {', '.join(builders)})")
    os.makedirs(args.out, exist_ok=True)
    results = os.path.join(args.out, "results.txt")
    for name in names:
        for exporter in args.exporters.split(","):
            path = os.path.join(args.out, f"{name}-{exporter}.onnx")
            try:
                export_one(builders[name], exporter, path)
                verdict = plan(args.bmc, path) if args.bmc else "exported"
            except Exception as e:  # noqa: BLE001 - recorded, the next one runs
                line = (str(e).strip().splitlines() or [type(e).__name__])[0]
                verdict = f"export failed: {type(e).__name__}: {line[:300]}"
                traceback.print_exc(limit=1, file=sys.stderr)
            print(f"{name}-{exporter}: {verdict}", flush=True)
            with open(results, "a") as f:
                f.write(f"{name}-{exporter}: {verdict}\n")


if __name__ == "__main__":
    main()
