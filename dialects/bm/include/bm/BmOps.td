//===- BmOps.td - bm ops -----------------------------------*- tablegen -*-===//
//
// The compute ops of the models bmc plans. They follow ONNX semantics (numpy
// broadcasting, negative axes normalised by the importer) on builtin ranked
// tensors with static shapes. Each has a verifier, result type inference
// where the result follows from operands and attributes, a sharding rule and
// a cost (through the two interfaces, backed by alphabetical registries).
//
//===----------------------------------------------------------------------===//

#ifndef BM_OPS_TD
#define BM_OPS_TD

include "bm/BmDialect.td"
include "bm/BmAttrs.td"
include "bm/BmInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

// Static shapes only: shape inference, sharding rules and costs need every
// dim. Element types are integers and floats (costs count their bytes).
def Bm_FloatTensor : StaticShapeTensorOf<[AnyFloat]>;
def Bm_IntTensor : StaticShapeTensorOf<[AnySignlessInteger]>;
def Bm_BoolTensor : StaticShapeTensorOf<[I1]>;
def Bm_I64Tensor : StaticShapeTensorOf<[I64]>;
def Bm_Tensor : StaticShapeTensorOf<[AnyInteger, AnyFloat]>;
def Bm_1DTensor : RankedTensorOf<[AnySignlessInteger, AnyFloat],
    [HasStaticShapePred, HasAnyRankOfPred<[1]>], "statically shaped 1-D tensor">;

// MLIR's InferTypeOpAdaptor, except that the adaptor's attributes are
// verified before inference: the custom parser infers result types before the
// op is verified, so a missing or mistyped attribute would otherwise reach
// inference as a null attribute.
def Bm_InferTypeOpAdaptor : TraitList<[
  DeclareOpInterfaceMethods<InferTypeOpInterface>,
  NativeOpTrait<"InferTypeOpAdaptor", [], [{
    static ::llvm::LogicalResult
    inferReturnTypes(::mlir::MLIRContext *context,
                     std::optional<::mlir::Location> location, Adaptor adaptor,
                     ::llvm::SmallVectorImpl<::mlir::Type> &inferredReturnTypes);
  }], [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *context, std::optional<::mlir::Location> location,
        ::mlir::ValueRange operands, ::mlir::DictionaryAttr attributes,
        ::mlir::OpaqueProperties properties, ::mlir::RegionRange regions,
        ::llvm::SmallVectorImpl<::mlir::Type> &inferredReturnTypes) {
      $cppClass::Adaptor adaptor(operands, attributes, properties, regions);
      if (::mlir::failed(
              ::mlir::bm::verifyAdaptor(context, location, adaptor)))
        return ::mlir::failure();
      return $cppClass::inferReturnTypes(context, location, adaptor,
                                         inferredReturnTypes);
    }
  }]>
]>;

// Ops that only change the layout: a consumer can read the producer's
// buffer with strides (GEMM transposes, batched strides), so under a
// runtime that fuses (Megatron-LM) they cost nothing and store nothing
// (passes/plan GraphAnalysis). bmrt runs each as a kernel.
def Bm_View : NativeOpTrait<"View"> {
  let cppNamespace = "::mlir::bm";
}

// Never an instruction of a step program: codegen turns it into something
// else (a constant slot, a fill) or a pass removes it before codegen. The
// runtime's op spec (bmrt/OpSpec.def, written by scripts/gen-op-spec from
// this file) lists every other op.
def Bm_NoKernel : NativeOpTrait<"NoKernel"> {
  let cppNamespace = "::mlir::bm";
}

// Traits every compute op has: no side effects, a sharding rule, a cost.
defvar Bm_ComputeTraits = [Pure,
  DeclareOpInterfaceMethods<Bm_ShardingRuleOpInterface>,
  DeclareOpInterfaceMethods<Bm_CostOpInterface>,
  DeclareOpInterfaceMethods<Bm_GradientOpInterface>];
// Contractions run on tensor cores and say so through the cost interface.
defvar Bm_ContractionTraits = [Pure,
  DeclareOpInterfaceMethods<Bm_ShardingRuleOpInterface>,
  DeclareOpInterfaceMethods<Bm_CostOpInterface, ["isContraction"]>,
  DeclareOpInterfaceMethods<Bm_GradientOpInterface>,
  Bm_InferTypeOpAdaptor];

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

def Bm_MeshOp : Bm_Op<"mesh", [Symbol, HasParent<"::mlir::ModuleOp">,
    Bm_NoKernel]> {
  let summary = "declares a named device mesh";
  let description = [{
    `bm.mesh @mesh = <["dp"=4, "tp"=8, "pp"=2]>`
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Bm_MeshAttr:$mesh);
  let assemblyFormat = "$sym_name `=` $mesh attr-dict";
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Bm_UnaryOp<string mnemonic, Type tensorType = Bm_FloatTensor>
    : Bm_Op<mnemonic, Bm_ComputeTraits # [SameOperandsAndResultType]> {
  let summary = "elementwise " # mnemonic;
  let arguments = (ins tensorType:$input);
  let results = (outs tensorType:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Bm_AbsOp : Bm_UnaryOp<"abs", Bm_Tensor>;
def Bm_CosOp : Bm_UnaryOp<"cos">;
def Bm_ErfOp : Bm_UnaryOp<"erf">;
def Bm_ExpOp : Bm_UnaryOp<"exp">;
def Bm_GeluOp : Bm_UnaryOp<"gelu"> {
  let arguments = (ins Bm_FloatTensor:$input,
                       DefaultValuedAttr<BoolAttr, "false">:$tanh_approximation);
}
def Bm_LogOp : Bm_UnaryOp<"log">;
def Bm_NegOp : Bm_UnaryOp<"neg", Bm_Tensor>;
def Bm_NotOp : Bm_UnaryOp<"not", Bm_BoolTensor>;
def Bm_ReciprocalOp : Bm_UnaryOp<"reciprocal">;
def Bm_ReluOp : Bm_UnaryOp<"relu", Bm_Tensor>;
def Bm_SigmoidOp : Bm_UnaryOp<"sigmoid">;
def Bm_SinOp : Bm_UnaryOp<"sin">;
def Bm_SqrtOp : Bm_UnaryOp<"sqrt">;
def Bm_TanhOp : Bm_UnaryOp<"tanh">;

// Binary ops broadcast their operands numpy-style. Comparisons give i1.
class Bm_BinaryOp<string mnemonic, string resultKind = "same">
    : Bm_Op<mnemonic, Bm_ComputeTraits # [Bm_InferTypeOpAdaptor]> {
  let summary = "elementwise " # mnemonic # " with broadcasting";
  let arguments = (ins Bm_Tensor:$lhs, Bm_Tensor:$rhs);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *context, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return ::mlir::bm::inferBroadcastResult(
          loc, {adaptor.getLhs().getType(), adaptor.getRhs().getType()},
          ::mlir::bm::BroadcastResult::}] # resultKind # [{, types);
    }
  }];
}

def Bm_AddOp : Bm_BinaryOp<"add">;
def Bm_AndOp : Bm_BinaryOp<"and", "logical">;
def Bm_DivOp : Bm_BinaryOp<"div">;
def Bm_EqualOp : Bm_BinaryOp<"equal", "compare">;
def Bm_GreaterOp : Bm_BinaryOp<"greater", "compare">;
def Bm_LessOp : Bm_BinaryOp<"less", "compare">;
def Bm_MaxOp : Bm_BinaryOp<"max">;
def Bm_MinOp : Bm_BinaryOp<"min">;
def Bm_MulOp : Bm_BinaryOp<"mul">;
def Bm_OrOp : Bm_BinaryOp<"or", "logical">;
def Bm_PowOp : Bm_BinaryOp<"pow">;
def Bm_SubOp : Bm_BinaryOp<"sub">;

def Bm_WhereOp : Bm_Op<"where", Bm_ComputeTraits # [Bm_InferTypeOpAdaptor]> {
  let summary = "select between two tensors by a boolean mask, broadcasting";
  let arguments = (ins Bm_BoolTensor:$condition, Bm_Tensor:$on_true,
                       Bm_Tensor:$on_false);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = [{
    $condition `,` $on_true `,` $on_false attr-dict `:` type($condition) `,`
    type($on_true) `,` type($on_false)
  }];
}

def Bm_CastOp : Bm_Op<"cast", Bm_ComputeTraits # [SameOperandsAndResultShape]> {
  let summary = "converts the element type";
  let arguments = (ins Bm_Tensor:$input);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

def Bm_MatMulOp : Bm_Op<"matmul", Bm_ContractionTraits> {
  let summary = "numpy matmul: batched, with broadcast batch dimensions";
  let arguments = (ins Bm_FloatTensor:$lhs, Bm_FloatTensor:$rhs);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
}

def Bm_GemmOp : Bm_Op<"gemm", Bm_ContractionTraits> {
  let summary = "alpha * op(A) * op(B) + beta * C on 2-D tensors";
  let arguments = (ins Bm_FloatTensor:$a, Bm_FloatTensor:$b,
                       Optional<Bm_FloatTensor>:$c,
                       DefaultValuedAttr<F32Attr, "1.0">:$alpha,
                       DefaultValuedAttr<F32Attr, "1.0">:$beta,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_a,
                       DefaultValuedAttr<BoolAttr, "false">:$trans_b);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = [{
    $a `,` $b (`,` $c^)? attr-dict `:` type($a) `,` type($b) (`,` type($c)^)?
  }];
}

def Bm_EinsumOp : Bm_Op<"einsum", Bm_ContractionTraits> {
  let summary = "Einstein summation without ellipsis (\"gsec,gsm->egcm\")";
  let arguments = (ins Variadic<Bm_FloatTensor>:$inputs, StrAttr:$equation);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = "$equation $inputs attr-dict `:` type($inputs)";
}

def Bm_ConvOp : Bm_Op<"conv", Bm_ContractionTraits> {
  let summary = "N-d grouped convolution, NC[spatial] layout (ONNX Conv)";
  let arguments = (ins Bm_FloatTensor:$input, Bm_FloatTensor:$weight,
                       Optional<Bm_FloatTensor>:$bias,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$group);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` type($input) `,`
    type($weight) (`,` type($bias)^)?
  }];
}

//===----------------------------------------------------------------------===//
// Normalisation and softmax
//===----------------------------------------------------------------------===//

def Bm_SoftmaxOp : Bm_Op<"softmax", Bm_ComputeTraits #
    [SameOperandsAndResultType]> {
  let summary = "softmax along one axis";
  let arguments = (ins Bm_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Bm_LogSoftmaxOp : Bm_Op<"log_softmax", Bm_ComputeTraits #
    [SameOperandsAndResultType]> {
  let summary = "log-softmax along one axis";
  let arguments = (ins Bm_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Bm_AttentionOp : Bm_Op<"attention", Bm_ContractionTraits> {
  let summary = "softmax(scale * q kt + causal mask) v in one op (fused attention)";
  let description = [{
    q [..., s, d], kt [..., d, t] (the keys transposed, as exported graphs
    hold them) and v [..., t, e], with equal leading dims, give
    [..., s, e]. Under `causal`, query i sees key j only where
    j <= i + (t - s), or, given `positions` (i64 [s], non-decreasing),
    where j <= positions[i]: the queries' places among the keys, once
    context parallelism has split the queries and gathered every key (a
    run of consecutive places, or two for a rank's mirrored chunks). bm-fuse-attention makes it from the matmul,
    scale, mask, softmax and matmul that exporters write, so that a
    backend can run it without storing the [s, t] scores (FlashAttention,
    Dao et al. 2022), and its gradient (bm.attention_grad) recomputes them.
  }];
  let arguments = (ins Bm_FloatTensor:$q, Bm_FloatTensor:$kt,
                       Bm_FloatTensor:$v, Optional<Bm_I64Tensor>:$positions,
                       F32Attr:$scale,
                       DefaultValuedAttr<BoolAttr, "false">:$causal);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $kt `,` $v (`positions` $positions^)? attr-dict `:` type($q) `,`
    type($kt) `,` type($v) (`,` type($positions)^)?
  }];
  let hasVerifier = 1;
}

def Bm_LayerNormOp : Bm_Op<"layer_norm", Bm_ComputeTraits #
    [Bm_InferTypeOpAdaptor]> {
  let summary = "layer normalisation over the dimensions from `axis` on";
  let arguments = (ins Bm_FloatTensor:$input, Bm_FloatTensor:$scale,
                       Optional<Bm_FloatTensor>:$bias, I64Attr:$axis,
                       F32Attr:$epsilon);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale (`,` $bias^)? attr-dict `:` type($input) `,`
    type($scale) (`,` type($bias)^)?
  }];
}

def Bm_RmsNormOp : Bm_Op<"rms_norm", Bm_ComputeTraits # [Bm_InferTypeOpAdaptor]> {
  let summary = "root-mean-square normalisation over the dimensions from "
                "`axis` on";
  let arguments = (ins Bm_FloatTensor:$input, Bm_FloatTensor:$scale,
                       I64Attr:$axis, F32Attr:$epsilon);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = "$input `,` $scale attr-dict `:` type($input) `,` type($scale)";
}

def Bm_BatchNormOp : Bm_Op<"batch_norm", Bm_ComputeTraits #
    [Bm_InferTypeOpAdaptor]> {
  let summary = "batch normalisation over N and the spatial dims, NC[spatial]";
  let arguments = (ins Bm_FloatTensor:$input, Bm_FloatTensor:$scale,
                       Bm_FloatTensor:$bias, Bm_FloatTensor:$mean,
                       Bm_FloatTensor:$variance, F32Attr:$epsilon);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale `,` $bias `,` $mean `,` $variance attr-dict `:`
    type($input) `,` type($scale) `,` type($bias) `,` type($mean) `,`
    type($variance)
  }];
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

class Bm_ReduceOp<string mnemonic>
    : Bm_Op<mnemonic, Bm_ComputeTraits # [Bm_InferTypeOpAdaptor]> {
  let summary = mnemonic # " over `axes`";
  let arguments = (ins Bm_Tensor:$input, DenseI64ArrayAttr:$axes,
                       DefaultValuedAttr<BoolAttr, "true">:$keep_dims);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *context, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return ::mlir::bm::inferReduceResult(loc, adaptor.getInput().getType(),
          adaptor.getAxes(),
          // Absent while the parser infers types: use the default.
          !adaptor.getKeepDimsAttr() || adaptor.getKeepDimsAttr().getValue(),
          types);
    }
  }];
}

def Bm_ReduceMaxOp : Bm_ReduceOp<"reduce_max">;
def Bm_ReduceMeanOp : Bm_ReduceOp<"reduce_mean">;
def Bm_ReduceSumOp : Bm_ReduceOp<"reduce_sum">;

def Bm_CumSumOp : Bm_Op<"cumsum", Bm_ComputeTraits #
    [SameOperandsAndResultType]> {
  let summary = "cumulative sum along one axis";
  let arguments = (ins Bm_Tensor:$input, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "false">:$exclusive,
                       DefaultValuedAttr<BoolAttr, "false">:$reverse);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Bm_TopKOp : Bm_Op<"top_k", Bm_ComputeTraits # [Bm_InferTypeOpAdaptor]> {
  let summary = "the k largest (or smallest) elements along an axis";
  let arguments = (ins Bm_Tensor:$input, I64Attr:$k, I64Attr:$axis,
                       DefaultValuedAttr<BoolAttr, "true">:$largest);
  let results = (outs Bm_Tensor:$values, Bm_I64Tensor:$indices);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Bm_OneHotOp : Bm_Op<"one_hot", Bm_ComputeTraits> {
  let summary = "one-hot encoding: a new axis of size `depth`";
  let arguments = (ins Bm_IntTensor:$indices, I64Attr:$depth, I64Attr:$axis,
                       F64Attr:$on_value, F64Attr:$off_value);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$indices attr-dict `:` type($indices) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Bm_ConstantOp : Bm_Op<"constant", Bm_ComputeTraits # [ConstantLike,
    AllTypesMatch<["value", "result"]>, Bm_NoKernel]> {
  let summary = "a small constant (weights are function arguments, never "
                "constants)";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let hasFolder = 1;
}

def Bm_IotaOp : Bm_Op<"iota", Bm_ComputeTraits> {
  let summary = "start + i * delta along a 1-D result (ONNX Range)";
  let arguments = (ins F64Attr:$start, F64Attr:$delta);
  let results = (outs Bm_1DTensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
}

def Bm_TriluOp : Bm_Op<"trilu", Bm_ComputeTraits #
    [SameOperandsAndResultType]> {
  let summary = "keeps the upper or lower triangle of the last two dims";
  let arguments = (ins Bm_Tensor:$input, DefaultValuedAttr<I64Attr, "0">:$k,
                       DefaultValuedAttr<BoolAttr, "true">:$upper);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Bm_ReshapeOp : Bm_Op<"reshape", Bm_ComputeTraits # [Bm_View]> {
  let summary = "reinterprets the shape; the element count is kept";
  let arguments = (ins Bm_Tensor:$input);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Bm_TransposeOp : Bm_Op<"transpose", Bm_ComputeTraits #
    [Bm_View, Bm_InferTypeOpAdaptor]> {
  let summary = "permutes dimensions: result dim i is input dim perm[i]";
  let arguments = (ins Bm_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Bm_GatherOp : Bm_Op<"gather", Bm_ComputeTraits # [Bm_InferTypeOpAdaptor]> {
  let summary = "ONNX Gather: indexes `axis` of data (embedding lookup)";
  let arguments = (ins Bm_Tensor:$data, Bm_IntTensor:$indices, I64Attr:$axis);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` type($data) `,` type($indices)";
}

def Bm_GatherElementsOp : Bm_Op<"gather_elements", Bm_ComputeTraits #
    [Bm_InferTypeOpAdaptor]> {
  let summary = "ONNX GatherElements (torch.gather): element-wise lookup "
                "along `axis`";
  let description = [{
    `result[i0..ik..in] = data[i0..indices[i0..ik..in]..in]` with the index
    at position `axis`: the result has the indices' shape and the data's
    element type. Every other dim of the indices is at most the data's
    (torch.gather's rule; ONNX leaves it unsaid). A negative index counts
    from the end of `axis`.
  }];
  let arguments = (ins Bm_Tensor:$data, Bm_IntTensor:$indices, I64Attr:$axis);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$data `,` $indices attr-dict `:` type($data) `,` type($indices)";
}

def Bm_ScatterElementsOp : Bm_Op<"scatter_elements", Bm_ComputeTraits #
    [Bm_InferTypeOpAdaptor]> {
  let summary = "ONNX ScatterElements (torch.scatter / scatter_reduce): data "
                "with updates written or combined at indices along `axis`";
  let description = [{
    The result starts as `data`; then, for every position of `indices` (whose
    shape `updates` has), `result[i0..indices[i0..in]..in]` becomes the update
    (`none`) or is combined with it (`add`, `mul`, `max`, `min`). Repeated
    indices under `none` keep one of the updates, unspecified which (as
    ONNX); the others combine them all. A negative index counts from the end
    of `axis`.
  }];
  let arguments = (ins Bm_Tensor:$data, Bm_IntTensor:$indices,
                       Bm_Tensor:$updates, I64Attr:$axis,
                       DefaultValuedAttr<StrAttr, "\"none\"">:$reduction);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = [{
    $data `,` $indices `,` $updates attr-dict `:` type($data) `,`
    type($indices) `,` type($updates)
  }];
  let hasVerifier = 1;
}

def Bm_ConcatOp : Bm_Op<"concat", Bm_ComputeTraits # [Bm_InferTypeOpAdaptor]> {
  let summary = "joins tensors along an axis";
  let arguments = (ins Variadic<Bm_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs)";
}

def Bm_SplitOp : Bm_Op<"split", Bm_ComputeTraits #
    [Bm_View, Bm_InferTypeOpAdaptor]> {
  let summary = "cuts a tensor into pieces of `sizes` along an axis";
  let arguments = (ins Bm_Tensor:$input, I64Attr:$axis,
                       DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<Bm_Tensor>:$results);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Bm_SliceOp : Bm_Op<"slice", Bm_ComputeTraits # [Bm_InferTypeOpAdaptor]> {
  let summary = "strided slice with one start, limit and stride per dim";
  let arguments = (ins Bm_Tensor:$input, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$limits, DenseI64ArrayAttr:$strides);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Bm_SqueezeOp : Bm_Op<"squeeze", Bm_ComputeTraits #
    [Bm_View, Bm_InferTypeOpAdaptor]> {
  let summary = "removes dimensions of size 1";
  let arguments = (ins Bm_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Bm_UnsqueezeOp : Bm_Op<"unsqueeze", Bm_ComputeTraits #
    [Bm_View, Bm_InferTypeOpAdaptor]> {
  let summary = "inserts dimensions of size 1 at `axes` of the result";
  let arguments = (ins Bm_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Bm_ExpandOp : Bm_Op<"expand", Bm_ComputeTraits> {
  let summary = "broadcasts to a larger shape (numpy rules)";
  let arguments = (ins Bm_Tensor:$input);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Bm_FlattenOp : Bm_Op<"flatten", Bm_ComputeTraits #
    [Bm_View, Bm_InferTypeOpAdaptor]> {
  let summary = "collapses dims [0, axis) and [axis, rank) into a 2-D tensor";
  let arguments = (ins Bm_Tensor:$input, I64Attr:$axis);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

class Bm_PoolOp<string mnemonic>
    : Bm_Op<mnemonic, Bm_ComputeTraits # [Bm_InferTypeOpAdaptor]> {
  let summary = mnemonic # " over windows of the spatial dims, NC[spatial]";
  let arguments = (ins Bm_FloatTensor:$input, DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *context, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return ::mlir::bm::inferPoolResult(loc, adaptor.getInput().getType(),
          adaptor.getKernelShape(), adaptor.getStrides(), adaptor.getPads(),
          types);
    }
  }];
}

def Bm_AvgPoolOp : Bm_PoolOp<"avg_pool">;
def Bm_MaxPoolOp : Bm_PoolOp<"max_pool">;

def Bm_GlobalAvgPoolOp : Bm_Op<"global_avg_pool", Bm_ComputeTraits #
    [Bm_InferTypeOpAdaptor]> {
  let summary = "mean over all spatial dims, keeping them as size 1";
  let arguments = (ins Bm_FloatTensor:$input);
  let results = (outs Bm_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

//===----------------------------------------------------------------------===//
// Training: loss and backward (built by autodiff)
//
// Gradient rules compose forward ops where that costs nothing extra; these
// ops are the rest: derivatives that would take several passes over memory
// (normalisations, softmax, convolution, pooling, scatters) or several ops
// (elementwise derivatives). They carry no sharding rule or cost yet: the
// planner prices backward as a multiple of forward, and partitioning gives
// each the sharding of its forward op.
//===----------------------------------------------------------------------===//

class Bm_GradOp<string mnemonic, list<Trait> traits = []>
    : Bm_Op<mnemonic, [Pure,
        DeclareOpInterfaceMethods<Bm_ShardingRuleOpInterface>] # traits>;

def Bm_UnaryGradOp : Bm_GradOp<"unary_grad", [SameOperandsAndResultType]> {
  let summary = "dx = dy * f'(x) for the elementwise op `op`";
  let arguments = (ins Bm_FloatTensor:$input, Bm_FloatTensor:$result_grad,
                       StrAttr:$op,
                       DefaultValuedAttr<BoolAttr, "false">:$tanh_approximation);
  let results = (outs Bm_FloatTensor:$input_grad);
  let assemblyFormat = "$input `,` $result_grad attr-dict `:` type($input)";
}

def Bm_SoftmaxGradOp : Bm_GradOp<"softmax_grad", [SameOperandsAndResultType]> {
  let summary = "dx = y * (dy - sum_axis(dy * y)) from the softmax output y";
  let arguments = (ins Bm_FloatTensor:$output, Bm_FloatTensor:$result_grad,
                       I64Attr:$axis);
  let results = (outs Bm_FloatTensor:$input_grad);
  let assemblyFormat = "$output `,` $result_grad attr-dict `:` type($output)";
}

def Bm_LogSoftmaxGradOp : Bm_GradOp<"log_softmax_grad",
    [SameOperandsAndResultType]> {
  let summary = "dx = dy - exp(y) * sum_axis(dy) from the log-softmax output";
  let arguments = (ins Bm_FloatTensor:$output, Bm_FloatTensor:$result_grad,
                       I64Attr:$axis);
  let results = (outs Bm_FloatTensor:$input_grad);
  let assemblyFormat = "$output `,` $result_grad attr-dict `:` type($output)";
}

def Bm_AttentionGradOp : Bm_GradOp<"attention_grad", [
    AllTypesMatch<["q", "q_grad"]>, AllTypesMatch<["kt", "kt_grad"]>,
    AllTypesMatch<["v", "v_grad"]>, AllTypesMatch<["result", "result_grad"]>]> {
  let summary = "gradients of attention: q, kt and v";
  let arguments = (ins Bm_FloatTensor:$q, Bm_FloatTensor:$kt,
                       Bm_FloatTensor:$v, Bm_FloatTensor:$result,
                       Bm_FloatTensor:$result_grad,
                       Optional<Bm_I64Tensor>:$positions, F32Attr:$scale,
                       DefaultValuedAttr<BoolAttr, "false">:$causal);
  let results = (outs Bm_FloatTensor:$q_grad, Bm_FloatTensor:$kt_grad,
                      Bm_FloatTensor:$v_grad);
  let assemblyFormat = [{
    $q `,` $kt `,` $v `,` $result `,` $result_grad
    (`positions` $positions^)? attr-dict `:` type($q) `,` type($kt) `,`
    type($v) `,` type($result) (`,` type($positions)^)?
  }];
  let hasVerifier = 1;
}

def Bm_LayerNormGradOp : Bm_GradOp<"layer_norm_grad"> {
  let summary = "gradients of layer_norm: input, scale and (optional) bias";
  let arguments = (ins Bm_FloatTensor:$input, Bm_FloatTensor:$scale,
                       Bm_FloatTensor:$result_grad, I64Attr:$axis,
                       F32Attr:$epsilon);
  let results = (outs Variadic<Bm_FloatTensor>:$grads);
  let assemblyFormat = [{
    $input `,` $scale `,` $result_grad attr-dict `:` type($input) `,`
    type($scale) `,` type($result_grad) `->` type($grads)
  }];
}

def Bm_RmsNormGradOp : Bm_GradOp<"rms_norm_grad", [
    AllTypesMatch<["input", "input_grad"]>,
    AllTypesMatch<["scale", "scale_grad"]>]> {
  let summary = "gradients of rms_norm: input and scale";
  let arguments = (ins Bm_FloatTensor:$input, Bm_FloatTensor:$scale,
                       Bm_FloatTensor:$result_grad, I64Attr:$axis,
                       F32Attr:$epsilon);
  let results = (outs Bm_FloatTensor:$input_grad, Bm_FloatTensor:$scale_grad);
  let assemblyFormat = [{
    $input `,` $scale `,` $result_grad attr-dict `:` type($input) `,`
    type($scale) `,` type($result_grad)
  }];
}

def Bm_BatchNormGradOp : Bm_GradOp<"batch_norm_grad", [
    AllTypesMatch<["input", "input_grad", "result_grad"]>,
    AllTypesMatch<["scale", "scale_grad", "bias_grad"]>]> {
  let summary = "gradients of batch_norm (inference form): input, scale, bias";
  let arguments = (ins Bm_FloatTensor:$input, Bm_FloatTensor:$scale,
                       Bm_FloatTensor:$mean, Bm_FloatTensor:$variance,
                       Bm_FloatTensor:$result_grad, F32Attr:$epsilon);
  let results = (outs Bm_FloatTensor:$input_grad, Bm_FloatTensor:$scale_grad,
                      Bm_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $input `,` $scale `,` $mean `,` $variance `,` $result_grad attr-dict `:`
    type($input) `,` type($scale) `,` type($mean) `,` type($variance)
  }];
}

class Bm_ConvGradOp<string mnemonic, string what>
    : Bm_GradOp<mnemonic> {
  let summary = "the gradient of conv with respect to its " # what;
  let arguments = (ins Bm_FloatTensor:$result_grad, Bm_FloatTensor:$other,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$group);
  let results = (outs Bm_FloatTensor:$grad);
  let assemblyFormat = [{
    $result_grad `,` $other attr-dict `:` type($result_grad) `,` type($other)
    `->` type($grad)
  }];
}
// `other` is the weight.
def Bm_ConvGradInputOp : Bm_ConvGradOp<"conv_grad_input", "input">;
// `other` is the input.
def Bm_ConvGradWeightOp : Bm_ConvGradOp<"conv_grad_weight", "weight">;

def Bm_GatherGradOp : Bm_GradOp<"gather_grad"> {
  let summary = "scatter-adds dy into zeros of the data's shape";
  let arguments = (ins Bm_FloatTensor:$result_grad, Bm_IntTensor:$indices,
                       I64Attr:$axis);
  let results = (outs Bm_FloatTensor:$data_grad);
  let assemblyFormat = [{
    $result_grad `,` $indices attr-dict `:` type($result_grad) `,`
    type($indices) `->` type($data_grad)
  }];
}

def Bm_SliceGradOp : Bm_GradOp<"slice_grad"> {
  let summary = "dy placed at the slice's elements of zeros of the input's "
                "shape";
  let arguments = (ins Bm_Tensor:$result_grad, DenseI64ArrayAttr:$starts,
                       DenseI64ArrayAttr:$strides);
  let results = (outs Bm_Tensor:$input_grad);
  let assemblyFormat = [{
    $result_grad attr-dict `:` type($result_grad) `->` type($input_grad)
  }];
}

def Bm_MaxPoolGradOp : Bm_GradOp<"max_pool_grad", [
    AllTypesMatch<["input", "input_grad"]>]> {
  let summary = "routes dy to the first maximum of each window";
  let arguments = (ins Bm_FloatTensor:$input, Bm_FloatTensor:$result_grad,
                       DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads);
  let results = (outs Bm_FloatTensor:$input_grad);
  let assemblyFormat = [{
    $input `,` $result_grad attr-dict `:` type($input) `,` type($result_grad)
  }];
}

def Bm_AvgPoolGradOp : Bm_GradOp<"avg_pool_grad"> {
  let summary = "spreads dy evenly over each window's elements";
  let arguments = (ins Bm_FloatTensor:$result_grad,
                       DenseI64ArrayAttr:$kernel_shape,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads);
  let results = (outs Bm_FloatTensor:$input_grad);
  let assemblyFormat = [{
    $result_grad attr-dict `:` type($result_grad) `->` type($input_grad)
  }];
}

def Bm_CrossEntropyOp : Bm_GradOp<"cross_entropy"> {
  let summary = "mean softmax cross-entropy of logits [N, C] against labels "
                "[N] (label -100 ignored)";
  let arguments = (ins Bm_FloatTensor:$logits, Bm_I64Tensor:$labels);
  let results = (outs 0DTensorOf<[F32]>:$loss);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` type($logits) `,` type($labels) `->`
    type($loss)
  }];
  let hasVerifier = 1;
}

def Bm_CrossEntropyGradOp : Bm_GradOp<"cross_entropy_grad", [
    AllTypesMatch<["logits", "logits_grad"]>]> {
  let summary = "dlogits = dloss * (softmax(logits) - onehot(labels)) / N";
  let arguments = (ins Bm_FloatTensor:$logits, Bm_I64Tensor:$labels,
                       0DTensorOf<[F32]>:$loss_grad);
  let results = (outs Bm_FloatTensor:$logits_grad);
  let assemblyFormat = [{
    $logits `,` $labels `,` $loss_grad attr-dict `:` type($logits) `,`
    type($labels) `,` type($loss_grad)
  }];
}

//===----------------------------------------------------------------------===//
// Collectives (inserted by partitioning)
//===----------------------------------------------------------------------===//

class Bm_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Bm_Op<mnemonic, traits # [
        DeclareOpInterfaceMethods<SymbolUserOpInterface>]>;

def Bm_AllReduceOp : Bm_CollectiveOp<"all_reduce",
    [Pure, SameOperandsAndResultType]> {
  let summary = "reduces a partial value over the devices of mesh axes";
  let arguments = (ins Bm_Tensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes,
                       DefaultValuedAttr<StrAttr, "\"sum\"">:$reduction);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input `over` $axes `on` $mesh attr-dict `:` type($input)";
}

def Bm_AllGatherOp : Bm_CollectiveOp<"all_gather", [Pure]> {
  let summary = "gathers the shards of `dim` over mesh axes";
  let arguments = (ins Bm_Tensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = [{
    $input `over` $axes `on` $mesh attr-dict `:` type($input) `->` type($result)
  }];
}

def Bm_ReduceScatterOp : Bm_CollectiveOp<"reduce_scatter", [Pure]> {
  let summary = "reduces a partial value and leaves each device a shard of "
                "`dim`";
  let arguments = (ins Bm_Tensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim,
                       DefaultValuedAttr<StrAttr, "\"sum\"">:$reduction);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = [{
    $input `over` $axes `on` $mesh attr-dict `:` type($input) `->` type($result)
  }];
}

def Bm_AllToAllOp : Bm_CollectiveOp<"all_to_all", [Pure]> {
  let summary = "re-shards from `split_dim` to `concat_dim` over mesh axes";
  let arguments = (ins Bm_Tensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$split_dim,
                       I64Attr:$concat_dim);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = [{
    $input `over` $axes `on` $mesh attr-dict `:` type($input) `->` type($result)
  }];
}

def Bm_CollectivePermuteOp : Bm_CollectiveOp<"collective_permute",
    [Pure, SameOperandsAndResultType, Bm_NoKernel]> {
  let summary = "each device sends its value to the device `offset` further "
                "along one mesh axis (cyclically)";
  let arguments = (ins Bm_Tensor:$input, FlatSymbolRefAttr:$mesh,
                       StrAttr:$axis, I64Attr:$offset);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input `over` $axis `on` $mesh attr-dict `:` type($input)";
}

def Bm_SendOp : Bm_CollectiveOp<"send", [Bm_NoKernel]> {
  let summary = "sends a value to the device `offset` further along an axis "
                "(pipeline stages)";
  let arguments = (ins Bm_Tensor:$input, FlatSymbolRefAttr:$mesh,
                       StrAttr:$axis, I64Attr:$offset);
  let assemblyFormat = "$input `over` $axis `on` $mesh attr-dict `:` type($input)";
}

def Bm_RecvOp : Bm_CollectiveOp<"recv", [Bm_NoKernel]> {
  let summary = "receives a value from the device `offset` further along an "
                "axis";
  let arguments = (ins FlatSymbolRefAttr:$mesh, StrAttr:$axis, I64Attr:$offset);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "`over` $axis `on` $mesh attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy (made by partitioning)
//
// Logits split over their classes (a vocabulary-split LM head) are never
// gathered: each device reduces its own classes to per-row statistics, one
// all-gather shares them, and every device merges them into the log-sum-exp
// (the online-softmax merge of Milakov & Gimelshein 2018). Megatron-LM's
// vocabulary-parallel cross-entropy all-reduces three times (the max, the
// label's logit, the sum of exponentials); the statistics carry all three
// in one collective. Device c of the group of `axes` holds classes
// [c * C, (c + 1) * C) of logits [N, C].
//===----------------------------------------------------------------------===//

def Bm_CrossEntropyStatsOp : Bm_CollectiveOp<"cross_entropy_stats", [Pure]> {
  let summary = "per row of this device's classes: the max, the sum of "
                "exp(x - max) and the label's logit (0 where another device "
                "holds the label's class)";
  let arguments = (ins Bm_FloatTensor:$logits, Bm_I64Tensor:$labels,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes);
  let results = (outs Bm_FloatTensor:$stats);
  let assemblyFormat = [{
    $logits `,` $labels `over` $axes `on` $mesh attr-dict `:` type($logits)
    `,` type($labels) `->` type($stats)
  }];
  let hasVerifier = 1;
}

def Bm_CrossEntropyFromStatsOp : Bm_Op<"cross_entropy_from_stats", [Pure]> {
  let summary = "mean cross-entropy from every device's statistics [k x 3, N] "
                "(label -100 ignored)";
  let arguments = (ins Bm_FloatTensor:$stats, Bm_I64Tensor:$labels);
  let results = (outs 0DTensorOf<[F32]>:$loss);
  let assemblyFormat = [{
    $stats `,` $labels attr-dict `:` type($stats) `,` type($labels) `->`
    type($loss)
  }];
  let hasVerifier = 1;
}

def Bm_CrossEntropyGradFromStatsOp : Bm_CollectiveOp<
    "cross_entropy_grad_from_stats", [Pure,
    AllTypesMatch<["logits", "logits_grad"]>]> {
  let summary = "this device's classes of dloss * (softmax(logits) - "
                "onehot(labels)) / N, the softmax's denominator from every "
                "device's statistics";
  let arguments = (ins Bm_FloatTensor:$logits, Bm_I64Tensor:$labels,
                       Bm_FloatTensor:$stats, 0DTensorOf<[F32]>:$loss_grad,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes);
  let results = (outs Bm_FloatTensor:$logits_grad);
  let assemblyFormat = [{
    $logits `,` $labels `,` $stats `,` $loss_grad `over` $axes `on` $mesh
    attr-dict `:` type($logits) `,` type($labels) `,` type($stats) `,`
    type($loss_grad)
  }];
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel embedding (made by partitioning)
//===----------------------------------------------------------------------===//

def Bm_ShardGatherOp : Bm_CollectiveOp<"shard_gather", [Pure]> {
  let summary = "gather from this device's slice of a table split along "
                "`axis` over mesh axes: indices another device holds give "
                "zeros (the result is a partial sum over those axes)";
  let description = [{
    Megatron-LM's vocabulary-parallel embedding (Shoeybi et al. 2019,
    section 3): device c of the group of `axes` holds entries
    [c * R, (c + 1) * R) of the table's dim `axis` (R its local size);
    indices index the whole dim, and each device gathers those it holds.
    Summing over the group gives the gather of the whole table.
  }];
  let arguments = (ins Bm_Tensor:$data, Bm_IntTensor:$indices, I64Attr:$axis,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = [{
    $data `,` $indices `over` $axes `on` $mesh attr-dict `:` type($data) `,`
    type($indices) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Resharding (written by annotation, lowered to collectives by partitioning)
//===----------------------------------------------------------------------===//

def Bm_ReshardOp : Bm_Op<"reshard", [Pure, SameOperandsAndResultType,
    DeclareOpInterfaceMethods<Bm_GradientOpInterface>, Bm_NoKernel]> {
  let summary = "the same global value in the sharding a consumer needs";
  let description = [{
    Written by bm-insert-reshards on every edge into a planned op, so that
    the plan's operand shardings are explicit and autodiff gives every edge
    its backward reshard (a `bm.reshard_grad`). An identity on the global
    value; bm-partition lowers it to the collectives (or the local slice)
    that take its input's sharding to `sharding`, or to nothing.
  }];
  let arguments = (ins Bm_Tensor:$input, Bm_ShardingAttr:$sharding);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Bm_ReshardGradOp : Bm_Op<"reshard_grad", [Pure,
    AllTypesMatch<["result_grad", "input", "input_grad"]>, Bm_NoKernel]> {
  let summary = "the gradient of a reshard, in the sharding its input's "
                "gradient needs";
  let description = [{
    `result_grad` arrives in whatever sharding backward produced it (often a
    partial sum); the input's gradient is needed in the input's own sharding
    without its partial axes (the gradient of a partial sum is the same on
    every device). `input` is read for its sharding only: bm-partition drops
    it when it lowers this op to collectives.
  }];
  let arguments = (ins Bm_Tensor:$result_grad, Bm_Tensor:$input);
  let results = (outs Bm_Tensor:$input_grad);
  let assemblyFormat = [{
    $result_grad `,` $input attr-dict `:` type($result_grad)
  }];
}

def Bm_ShardSliceOp : Bm_CollectiveOp<"shard_slice", [Pure]> {
  let summary = "this device's chunk of `dim` of a value replicated over "
                "mesh axes (no communication)";
  let arguments = (ins Bm_Tensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$dim);
  let results = (outs Bm_Tensor:$result);
  let assemblyFormat = [{
    $input `over` $axes `on` $mesh attr-dict `:` type($input) `->` type($result)
  }];
}

#endif // BM_OPS_TD
