//===- AttrVerifierTest.cpp - attribute checks text cannot reach ----------===//
//
// The parser of #bm.mesh and #bm.sharding only builds well-formed
// parameter lists, so a few verifier messages can only be reached from C++
// (a pass building attributes by hand). These tests reach them.
//
//===----------------------------------------------------------------------===//

#include "bm/BmAttrs.h"
#include "bm/BmOps.h"
#include "bm/FirstDiagnostic.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "gtest/gtest.h"

using namespace mlir;
using namespace mlir::bm;

namespace {

class AttrVerifierTest : public ::testing::Test {
protected:
  AttrVerifierTest() : builder(&context) {
    context.loadDialect<BmDialect>();
  }

  /// Runs `build` and returns the first diagnostic it emitted.
  template <typename Fn> std::string firstError(Fn build) {
    FirstDiagnostic diagnostic(&context);
    build();
    return diagnostic.message();
  }

  auto emitter() {
    return [this] { return mlir::emitError(builder.getUnknownLoc()); };
  }

  MLIRContext context;
  Builder builder;
};

TEST_F(AttrVerifierTest, MeshNamesAndSizesMustPairUp) {
  std::string error = firstError([&] {
    EXPECT_FALSE(MeshAttr::getChecked(emitter(), &context,
                                      {builder.getStringAttr("dp")}, {2, 4}));
  });
  EXPECT_EQ(error, "mesh has 1 axis names but 2 sizes");
}

TEST_F(AttrVerifierTest, ShardingNeedsAMeshSymbol) {
  std::string error = firstError([&] {
    EXPECT_FALSE(ShardingAttr::getChecked(emitter(), &context,
                                          FlatSymbolRefAttr(),
                                          builder.getArrayAttr({}),
                                          builder.getArrayAttr({})));
  });
  EXPECT_EQ(error, "sharding needs a mesh symbol");
}

TEST_F(AttrVerifierTest, ShardingAxesMustBeStrings) {
  auto mesh = FlatSymbolRefAttr::get(&context, "mesh");
  std::string error = firstError([&] {
    EXPECT_FALSE(ShardingAttr::getChecked(
        emitter(), &context, mesh,
        builder.getArrayAttr({builder.getArrayAttr({builder.getI64IntegerAttr(3)})}),
        builder.getArrayAttr({})));
  });
  EXPECT_EQ(error, "sharding axes must be strings, got 3 : i64");
}

TEST_F(AttrVerifierTest, ShardingDimsMustBeArraysOfAxes) {
  auto mesh = FlatSymbolRefAttr::get(&context, "mesh");
  std::string error = firstError([&] {
    EXPECT_FALSE(ShardingAttr::getChecked(
        emitter(), &context, mesh,
        builder.getArrayAttr({builder.getStringAttr("dp")}),
        builder.getArrayAttr({})));
  });
  EXPECT_EQ(error, "sharding dims must be arrays of axes, got \"dp\"");
}

TEST_F(AttrVerifierTest, ShardingChecksAgainstTypeAndMesh) {
  auto meshAttr = MeshAttr::get(&context, {builder.getStringAttr("dp"),
                                           builder.getStringAttr("tp")},
                                {2, 4});
  auto sharding = ShardingAttr::get(
      &context, FlatSymbolRefAttr::get(&context, "mesh"),
      builder.getArrayAttr(
          {builder.getArrayAttr({builder.getStringAttr("dp")}),
           builder.getArrayAttr({builder.getStringAttr("tp")})}),
      builder.getArrayAttr({}));
  auto f32 = builder.getF32Type();
  EXPECT_TRUE(succeeded(sharding.verifyFor(
      RankedTensorType::get({8, 16}, f32), meshAttr, emitter())));
  std::string error = firstError([&] {
    EXPECT_TRUE(failed(sharding.verifyFor(RankedTensorType::get({8, 6}, f32),
                                          meshAttr, emitter())));
  });
  EXPECT_EQ(error, "dim 1 of size 6 does not divide evenly into 4 shards");
  error = firstError([&] {
    EXPECT_TRUE(failed(
        sharding.verifyFor(builder.getI32Type(), meshAttr, emitter())));
  });
  EXPECT_EQ(error, "a sharding needs a ranked tensor, got 'i32'");
}

} // namespace
