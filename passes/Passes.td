//===- Passes.td - bm passes -------------------------------*- tablegen -*-===//

#ifndef BM_PASSES_TD
#define BM_PASSES_TD

include "mlir/Pass/PassBase.td"

def BmPrintShardingRulesPass : Pass<"bm-print-sharding-rules", "::mlir::ModuleOp"> {
  let summary = "Reports each op's sharding rule and FLOPs as remarks";
  let description = [{
    A developer pass: emits a remark on every bm compute op with its
    Shardy-style sharding rule and forward FLOPs, for lit tests of the rule
    and cost registries.
  }];
}

def BmFoldPass : Pass<"bm-fold", "::mlir::func::FuncOp"> {
  let summary = "Finds repeated layers by structural hashing and marks each "
                "op with its layer and block class";
  let description = [{
    The TAP idea (Shi et al. 2023): a 96-layer transformer is one unique block
    repeated 96 times, so the planner searches the block once. Each op gets a
    structural signature (op name, attributes, types, and for each operand
    either the distance back to its producer or, for a function argument, its
    type), which is the same for corresponding ops of identical layers. A
    repeated block shows up as a period P in the sequence of signatures;
    candidate periods come from the gaps between equal signatures, so the
    search is linear in the number of ops. Within a periodic run, the layer
    boundary is put where the fewest values are live (the residual stream),
    and every instance is checked op by op against the first before it is
    marked. Ops get `bm.layer` (the instance, counted over the function) and
    `bm.block_class`; ops outside any repeated block (embedding, head) get
    neither. Folding changes no computation: it only adds these attributes,
    after moving operand-free constants to the top of the function (exporters
    share constants between layers, which would make the first layer differ),
    and after them what all layers read but the first computes: values made
    from inputs alone or parameters alone and read by ops at least half a
    layer apart (rotary tables, masks, position ids, which exporters put
    inside the first layer), with the ops they are made from.
  }];
  let dependentDialects = ["::mlir::bm::BmDialect"];
  let options = [
    Option<"minRepeats", "bm-min-repeats", "unsigned", "2",
           "Fewest instances a block needs to be folded">,
  ];
}

def BmAnnotatePass : Pass<"bm-annotate", "::mlir::ModuleOp"> {
  let summary = "Writes a plan file's mesh, shardings and stages into the IR";
  let description = [{
    Phase 4. Reads a JSON plan (`bmc plan -o plan.json`) made for this model
    and writes it into @main, which bm-fold has annotated: `bm.mesh @mesh`
    with the plan's dp, tp and pp axes, a `bm.sharding` on every op (every
    instance of a block class gets the class's sharding) and `bm.stage`, the
    pipeline stage that runs the op.
  }];
  let dependentDialects = ["::mlir::bm::BmDialect"];
  let options = [
    Option<"planFile", "plan", "std::string", "",
           "The JSON plan to write into the IR">,
  ];
}

def BmVerifyFoldedPass : Pass<"bm-verify-folded", "::mlir::ModuleOp"> {
  let summary = "Phase 2's verifier: the fold's layers and block classes are "
                "consistent and nothing of a later phase is there yet";
  let description = [{
    Ends the fold phase (`bm-fold-phase`). Checks in @main: `bm.layer` and
    `bm.block_class` come together; layers are numbered from 0 in op order,
    each a contiguous run of ops with one block class; every instance of a
    class has the ops of the class's first instance; and no op carries what
    later phases add (`bm.sharding`, `bm.stage`, collectives).
  }];
}

def BmVerifyAnnotatedPass : Pass<"bm-verify-annotated", "::mlir::ModuleOp"> {
  let summary = "Phase 4's verifier: every op carries its sharding and "
                "pipeline stage";
  let description = [{
    Ends the annotate phase (`bm-annotate-phase`). Checks that the module
    declares `bm.mesh @mesh`, that every op of @main has a `bm.sharding` and
    a `bm.stage` within the mesh's "pp" axis, that every instance of a block
    class carries its class's shardings, and that no collective is there yet
    (partitioning inserts them).
  }];
}

def BmFuseAttentionPass : Pass<"bm-fuse-attention", "::mlir::func::FuncOp"> {
  let summary = "Replaces the exported attention core by bm.attention";
  let description = [{
    matmul(q, kt), a constant scale, constant causal masks (added, or
    chosen by where), softmax over the keys and matmul with v become one
    bm.attention {scale, causal}, whose backend kernels never store the
    [s, t] scores and whose gradient recomputes them. Chains under any other
    mask stay as they are. The fold phase runs it when the trainer's backend
    runs fused attention (bmc compile --device cuda, or --fuse-attention).
  }];
  let dependentDialects = ["::mlir::bm::BmDialect"];
}

def BmFuseGeluPass : Pass<"bm-fuse-gelu", "::mlir::func::FuncOp"> {
  let summary = "Replaces GELU's exported formulas by bm.gelu";
  let description = [{
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and
    0.5 x (1 + erf(x / sqrt(2))), written by exporters as eight and five
    elementwise ops (the products associated either way), become one
    bm.gelu {tanh_approximation = true / false}: one kernel and one gradient
    instead of a pass over the MLP's activation per op. The fold phase runs
    it first, so that the planner prices the ops the trainer runs.
  }];
  let dependentDialects = ["::mlir::bm::BmDialect"];
}

def BmInsertReshardsPass : Pass<"bm-insert-reshards", "::mlir::func::FuncOp"> {
  let summary = "Reads every planned operand through a bm.reshard";
  let description = [{
    Phase 6 starts before autodiff: each operand of an op with
    `bm.operand_sharding` (the plan's sharding of what the op reads) is
    replaced by a bm.reshard of it to that sharding, so that autodiff gives
    every such edge its backward reshard (bm.reshard_grad). bm-partition
    lowers both to collectives, or to nothing where the shardings agree.
  }];
  let dependentDialects = ["::mlir::bm::BmDialect"];
}

def BmPartitionPass : Pass<"bm-partition", "::mlir::ModuleOp"> {
  let summary = "Rewrites the training step to one device's share of it";
  let description = [{
    Phase 6. On @train_step (after autodiff): every value gets a sharding
    (planned ops keep the plan's; the rest, backward ops among them, take
    theirs from their operands through their sharding rules); bm.reshard
    and bm.reshard_grad become the collectives that move a value between
    two shardings (all_reduce, reduce_scatter, all_gather, all_to_all, or a
    local shard_slice), and every type becomes the shape one device holds.
    Means over a split dimension (the loss, reduce_mean) are scaled so that
    their partial sums add up to the global mean. Gradients of parameters
    and the loss stay partial sums over the data-parallel axes: the
    trainer reduces them (all-reduce, or reduce-scatter under ZeRO); the
    results say over which axes (`bm.partial`), and arguments keep their
    sharding (`bm.sharding`). Strided shardings (a minor factor of a merged
    dimension split, such as a fused QKV projection split by heads) and
    vocabulary-parallel gathers are refused with an error naming the op.
  }];
  let dependentDialects = ["::mlir::bm::BmDialect"];
}

def BmSplitStagesPass : Pass<"bm-split-stages", "::mlir::ModuleOp"> {
  let summary = "Splits the partitioned step into one function per pipeline stage";
  let description = [{
    Phase 6, last: with a mesh whose "pp" axis has several devices, the
    partitioned @train_step becomes @stage_0 ... @stage_N: each stage's ops,
    forward then backward (the first backward op marked
    bm.gradient_seed); the activations from the previous stage and the
    gradients from the next are arguments (bm.kind "activation",
    "activation_grad"), what goes to them results ("send", "send_grad"),
    any number per boundary in the order of first use, passed on through
    the stages between a value's producer and its reader; values that do
    not mix data with parameters (masks, rotary tables) are computed again
    where they are read; a parameter read on several stages is held by
    every stage, whose gradients of it are partial sums over "pp". Without
    pipeline stages it does nothing.
  }];
  let dependentDialects = ["::mlir::bm::BmDialect"];
}

def BmVerifyPartitionedPass : Pass<"bm-verify-partitioned", "::mlir::ModuleOp"> {
  let summary = "Checks that the step is partitioned (ends phase 6)";
  let description = [{
    No bm.reshard or bm.reshard_grad is left, no op keeps the plan's
    global-shape annotations (bm.sharding, bm.operand_sharding), and the
    loss and every gradient of each step function (@train_step or
    @stage_N) say which partial sums the trainer reduces (bm.partial).
  }];
}

def BmAutodiffPass : Pass<"bm-autodiff", "::mlir::ModuleOp"> {
  let summary = "Builds the training step: forward, loss and backward";
  let description = [{
    Phase 5. From the forward model @main it builds @train_step, which takes
    @main's arguments (plus the labels when it appends a loss) and returns
    the loss followed by the gradient of every parameter, in argument
    order (result attribute `bm.grad_of` names the parameter).

    The loss (`loss`): a model whose output is a scalar trains on it as it
    is. With `auto`, a model whose output is logits [..., C] gets a mean
    cross-entropy against integer labels of the leading shape, a new
    argument with `bm.kind = "label"` (next-token labels for a language
    model, classes for a classifier: the trainer fills them) where the
    labels are one per sample ([B, C] logits) or an integer input has their
    shape (the tokens the labels are the next of); any other float output
    (a hidden state [B, S, H], one value per sample) is a regression: the
    mean squared error against float targets of the output's shape, the
    label argument (the trainer draws them). `cross-entropy` and `mse` force
    one of the two.

    Backward walks the forward ops in reverse and asks each op's gradient
    rule (GradientOpInterface) for its operands' gradients, summing where a
    value feeds several ops; an op with no rule is an error naming it.
    Parameters no gradient reaches (batch norm's running statistics) get
    `bm.trainable = false` and no gradient result. The optimizer update is the
    runtime's (one fused kernel per parameter tensor), not IR.

    Recomputation (`recompute`): with `full`, each layer that bm-fold marked
    (`bm.layer`) is run again at the start of its backward, and its
    gradient rules read the recomputed values, so that between forward and
    backward only the layers' inputs stay live (Chen et al. 2016; Megatron-
    LM's full recomputation). With `selective`, only each attention core
    is recomputed: from the scores Q K^T through the softmax to the product
    with V (Korthikanti et al. 2022), whose intermediate values grow with
    the square of the sequence. `none` keeps everything forward computed.
  }];
  let dependentDialects = ["::mlir::bm::BmDialect"];
  let options = [
    Option<"recompute", "recompute", "std::string", "\"none\"",
           "What backward recomputes instead of keeping: none, selective "
           "(attention cores) or full (whole layers)">,
    Option<"loss", "loss", "std::string", "\"auto\"",
           "The loss appended to a non-scalar output: auto, cross-entropy "
           "or mse">,
  ];
}

def BmVerifyTrainingStepPass : Pass<"bm-verify-training-step",
                                    "::mlir::ModuleOp"> {
  let summary = "Phase 5's verifier: @train_step returns the loss and one "
                "gradient per parameter";
  let description = [{
    Ends the autodiff phase (`bm-autodiff-phase`). Checks that @train_step
    exists, that its first result is a scalar float loss, that each other
    result is the gradient of one parameter argument (`bm.grad_of`, with
    the parameter's type), that every float parameter not marked
    `bm.trainable = false` has one, and that no
    collective is there yet.
  }];
}

#endif // BM_PASSES_TD
