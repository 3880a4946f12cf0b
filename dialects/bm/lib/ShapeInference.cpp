//===- ShapeInference.cpp - shared result-type inference ------------------===//

#include "bm/BmOps.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::bm;

LogicalResult mlir::bm::inferBroadcastShape(std::optional<Location> loc,
                                            ArrayRef<Type> types,
                                            SmallVectorImpl<int64_t> &shape) {
  shape.clear();
  for (Type type : types) {
    auto tensor = cast<RankedTensorType>(type);
    ArrayRef<int64_t> dims = tensor.getShape();
    if (dims.size() > shape.size())
      shape.insert(shape.begin(), dims.size() - shape.size(), 1);
    size_t offset = shape.size() - dims.size();
    for (auto [i, dim] : llvm::enumerate(dims)) {
      int64_t &out = shape[offset + i];
      if (out == dim || dim == 1)
        continue;
      if (out == 1) {
        out = dim;
        continue;
      }
      return emitOptionalError(loc, "shapes ", types,
                               " do not broadcast: dim ", offset + i,
                               " is ", out, " and ", dim);
    }
  }
  return success();
}

LogicalResult mlir::bm::inferBroadcastResult(std::optional<Location> loc,
                                             ArrayRef<Type> types,
                                             BroadcastResult kind,
                                             SmallVectorImpl<Type> &results) {
  Type element = cast<RankedTensorType>(types.front()).getElementType();
  for (Type type : types.drop_front())
    if (cast<RankedTensorType>(type).getElementType() != element)
      return emitOptionalError(loc, "operand element types differ: ",
                               types.front(), " and ", type);
  Builder builder(element.getContext());
  if (kind == BroadcastResult::logical && !element.isInteger(1))
    return emitOptionalError(loc, "logical ops need i1 operands, got ",
                             element);
  SmallVector<int64_t> shape;
  if (failed(inferBroadcastShape(loc, types, shape)))
    return failure();
  Type resultElement =
      kind == BroadcastResult::same ? element : builder.getI1Type();
  results.push_back(RankedTensorType::get(shape, resultElement));
  return success();
}

LogicalResult mlir::bm::inferReduceResult(std::optional<Location> loc,
                                          Type input, ArrayRef<int64_t> axes,
                                          bool keepDims,
                                          SmallVectorImpl<Type> &results) {
  auto tensor = cast<RankedTensorType>(input);
  int64_t rank = tensor.getRank();
  SmallVector<bool> reduced(rank, false);
  for (int64_t axis : axes) {
    if (failed(checkAxis(loc, "reduction", axis, rank)))
      return failure();
    if (reduced[axis])
      return emitOptionalError(loc, "reduction axis ", axis,
                               " is listed twice");
    reduced[axis] = true;
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d])
      shape.push_back(tensor.getDimSize(d));
    else if (keepDims)
      shape.push_back(1);
  }
  results.push_back(RankedTensorType::get(shape, tensor.getElementType()));
  return success();
}

LogicalResult mlir::bm::inferPoolResult(std::optional<Location> loc,
                                        Type input, ArrayRef<int64_t> kernel,
                                        ArrayRef<int64_t> strides,
                                        ArrayRef<int64_t> pads,
                                        SmallVectorImpl<Type> &results) {
  auto tensor = cast<RankedTensorType>(input);
  int64_t spatial = tensor.getRank() - 2;
  if (spatial < 1)
    return emitOptionalError(loc, "pooling needs a tensor of rank >= 3, got ",
                             input);
  if (static_cast<int64_t>(kernel.size()) != spatial ||
      static_cast<int64_t>(strides.size()) != spatial ||
      static_cast<int64_t>(pads.size()) != 2 * spatial)
    return emitOptionalError(
        loc, "pooling over ", spatial, " spatial dims needs ", spatial,
        " kernel sizes and strides and ", 2 * spatial, " pads, got ",
        kernel.size(), ", ", strides.size(), " and ", pads.size());
  SmallVector<int64_t> shape(tensor.getShape().take_front(2));
  for (int64_t i = 0; i < spatial; ++i) {
    if (kernel[i] < 1 || strides[i] < 1 || pads[i] < 0 ||
        pads[i + spatial] < 0)
      return emitOptionalError(loc, "pooling window ", kernel[i],
                               ", stride ", strides[i], " and pads ", pads[i],
                               "/", pads[i + spatial], " must be positive");
    int64_t padded;
    if (llvm::AddOverflow(tensor.getDimSize(i + 2), pads[i], padded) ||
        llvm::AddOverflow(padded, pads[i + spatial], padded))
      return emitOptionalError(loc, "pooling pads ", pads[i], "/",
                               pads[i + spatial], " overflow int64");
    if (padded < kernel[i])
      return emitOptionalError(loc, "pooling window ", kernel[i],
                               " is larger than padded dim ", padded);
    shape.push_back((padded - kernel[i]) / strides[i] + 1);
  }
  results.push_back(RankedTensorType::get(shape, tensor.getElementType()));
  return success();
}

FailureOr<EinsumEquation> mlir::bm::parseEinsum(StringRef equation,
                                                std::string &error) {
  EinsumEquation result;
  std::string text;
  for (char c : equation)
    if (c != ' ')
      text.push_back(c);
  size_t arrow = text.find("->");
  if (arrow == std::string::npos) {
    error = "einsum equation '" + equation.str() +
            "' must be explicit (contain '->')";
    return failure();
  }
  StringRef lhs = StringRef(text).take_front(arrow);
  StringRef rhs = StringRef(text).drop_front(arrow + 2);
  SmallVector<StringRef> inputs;
  lhs.split(inputs, ',');
  auto valid = [](StringRef term) {
    return llvm::all_of(term, [](char c) { return llvm::isAlpha(c); });
  };
  for (StringRef input : inputs) {
    if (!valid(input)) {
      error = "einsum term '" + input.str() + "' in '" + equation.str() +
              "' must be letters only (no ellipsis)";
      return failure();
    }
    result.inputs.push_back(input.str());
  }
  if (!valid(rhs)) {
    error = "einsum result '" + rhs.str() + "' in '" + equation.str() +
            "' must be letters only (no ellipsis)";
    return failure();
  }
  for (char c : rhs) {
    if (llvm::count(rhs, c) != 1) {
      error = std::string("einsum result letter '") + c + "' in '" +
              equation.str() + "' appears twice";
      return failure();
    }
    if (llvm::none_of(result.inputs, [&](const std::string &input) {
          return input.find(c) != std::string::npos;
        })) {
      error = std::string("einsum result letter '") + c + "' in '" +
              equation.str() + "' is in no input";
      return failure();
    }
  }
  result.output = rhs.str();
  return result;
}
