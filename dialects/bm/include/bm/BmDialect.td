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
    /// Discardable attribute holding one #bm.sharding per op result.
    static constexpr ::llvm::StringLiteral kShardingAttrName = "bm.sharding";
    /// Discardable attribute holding the #bm.sharding the plan gives each
    /// operand of an op (what the op reads; bm-insert-reshards makes it
    /// explicit). Also, on a function argument, the argument's sharding.
    static constexpr ::llvm::StringLiteral kOperandShardingAttrName =
        "bm.operand_sharding";
    /// Function-argument attributes written by the importer: the value's
    /// name in the model, and its kind ("parameter", "input", ...; autodiff
    /// and stage splitting also mark arguments and results "label", "loss",
    /// "activation", "send", ...).
    static constexpr ::llvm::StringLiteral kParamNameAttrName = "bm.name";
    static constexpr ::llvm::StringLiteral kParamKindAttrName = "bm.kind";
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
