//===- BmDialect.td - the bm dialect -----------------------*- tablegen -*-===//
//
// `bm` is bmc's dialect: the ops of the models bmc plans (on builtin ranked
// tensors), the device mesh, sharding attributes and the collectives that
// partitioning inserts.
//
//===----------------------------------------------------------------------===//

#ifndef BM_DIALECT_TD
#define BM_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Bm_Dialect : Dialect {
  let name = "bm";
  let cppNamespace = "::mlir::bm";
  let summary = "Ops, mesh, shardings and collectives for planning and "
                "partitioning the training of big models";
  let useDefaultAttributePrinterParser = 1;
  // Inherent attributes live in the attribute dictionary: result-type
  // inference runs on parsed `attr-dict` entries before properties exist.
  let usePropertiesForAttributes = 0;
  let hasOperationAttrVerify = 1;
  let hasConstantMaterializer = 0;
  let extraClassDeclaration = [{
    void registerAttributes();
    /// Whether `attrName` names one of the dialect's annotations: what bmc's
    /// phases write on an op (layer, stage, sharding, ...) as opposed to
    /// what the op computes. MLIR names a discardable attribute after the
    /// dialect that owns it, while an op's inherent attributes (an axis, an
    /// epsilon) are unprefixed, so the "bm." prefix is the rule.
    static bool isAnnotation(::llvm::StringRef attrName) {
      return attrName.starts_with("bm.");
    }
    /// Discardable attribute holding one #bm.sharding per op result.
    static constexpr ::llvm::StringLiteral kShardingAttrName = "bm.sharding";
    /// Discardable attribute holding the #bm.sharding the plan gives each
    /// operand of an op (what the op reads; bm-insert-reshards makes it
    /// explicit). Also, on a function argument, the argument's sharding.
    static constexpr ::llvm::StringLiteral kOperandShardingAttrName =
        "bm.operand_sharding";
    /// Function-argument attributes written by the importer: the value's
    /// name in the model, and its kind (one of the kKind* values below;
    /// autodiff and stage splitting also mark arguments and results).
    static constexpr ::llvm::StringLiteral kParamNameAttrName = "bm.name";
    static constexpr ::llvm::StringLiteral kParamKindAttrName = "bm.kind";
    /// The values of bm.kind, and what marks each:
    ///  - parameter: the importer, on a model weight argument;
    ///  - input: the importer, on a data argument (tokens, images); also
    ///    what an argument without bm.kind is taken to be;
    ///  - label: autodiff, on the argument the loss compares against;
    ///  - loss: autodiff, on the training step's loss result;
    ///  - activation / activation_grad: stage splitting, on a stage's
    ///    arguments that take the previous stage's activations / the next
    ///    stage's gradients;
    ///  - send / send_grad: stage splitting, on a stage's results that go
    ///    to the next stage (activations) / the previous one (gradients).
    static constexpr ::llvm::StringLiteral kKindParameter = "parameter";
    static constexpr ::llvm::StringLiteral kKindInput = "input";
    static constexpr ::llvm::StringLiteral kKindLabel = "label";
    static constexpr ::llvm::StringLiteral kKindLoss = "loss";
    static constexpr ::llvm::StringLiteral kKindActivation = "activation";
    static constexpr ::llvm::StringLiteral kKindActivationGrad =
        "activation_grad";
    static constexpr ::llvm::StringLiteral kKindSend = "send";
    static constexpr ::llvm::StringLiteral kKindSendGrad = "send_grad";
    /// Autodiff, on a training step's result: the name (bm.name) of the
    /// parameter whose gradient it is.
    static constexpr ::llvm::StringLiteral kGradOfAttrName = "bm.grad_of";
    /// Autodiff, on a parameter argument no gradient reaches: false, so that
    /// the optimizer neither updates nor decays it.
    static constexpr ::llvm::StringLiteral kTrainableAttrName = "bm.trainable";
    /// Partitioning, on a training step's result: the mesh axes over which it
    /// leaves the step as a partial sum, for the trainer to reduce.
    static constexpr ::llvm::StringLiteral kPartialAttrName = "bm.partial";
    static constexpr ::llvm::StringLiteral kExternalLocationAttrName =
        "bm.external_location";
    static constexpr ::llvm::StringLiteral kExternalOffsetAttrName =
        "bm.external_offset";
    static constexpr ::llvm::StringLiteral kExternalLengthAttrName =
        "bm.external_length";
    /// Partitioning, on a parameter stored in a factored view of its
    /// model shape (a fused QKV weight [h, 3h] as [h, 3, h]): the model's
    /// shape.
    static constexpr ::llvm::StringLiteral kModelShapeAttrName =
        "bm.model_shape";
    /// Folding: which layer instance and block class an op belongs to.
    static constexpr ::llvm::StringLiteral kLayerAttrName = "bm.layer";
    static constexpr ::llvm::StringLiteral kBlockClassAttrName = "bm.block_class";
    /// Annotation: the pipeline stage (coordinate on "pp") that runs an op.
    static constexpr ::llvm::StringLiteral kStageAttrName = "bm.stage";
    /// Annotation, with interleaved schedules: the virtual stage (model
    /// chunk) that runs an op; its device stage is this modulo pp.
    static constexpr ::llvm::StringLiteral kVirtualStageAttrName =
        "bm.virtual_stage";
    /// Where an op runs (its layer, block class, stage and virtual stage):
    /// what an op made for another one takes from it.
    static ::llvm::ArrayRef<::llvm::StringLiteral> placementAttrNames() {
      static constexpr ::llvm::StringLiteral names[] = {
          kLayerAttrName, kBlockClassAttrName, kStageAttrName,
          kVirtualStageAttrName};
      return names;
    }
    /// Autodiff: the op that starts the backward pass (the loss's gradient);
    /// every op after it runs in the backward pass.
    static constexpr ::llvm::StringLiteral kGradientSeedAttrName =
        "bm.gradient_seed";
  }];
}

class Bm_Op<string mnemonic, list<Trait> traits = []>
    : Op<Bm_Dialect, mnemonic, traits>;

class Bm_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Bm_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

#endif // BM_DIALECT_TD
