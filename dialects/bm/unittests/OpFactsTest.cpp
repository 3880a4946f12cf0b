//===- OpFactsTest.cpp - every bm op has its cost and rules ---------------===//
//
// The facts about an op live in registries keyed by op name: its cost
// (Costs.cpp), gradient rule (GradientRules.cpp) and sharding rule
// (ShardingRules.cpp). Their lookups fall back quietly (0 FLOPs, an empty
// sharding rule) or fail late (autodiff's "has no gradient rule"), so an op
// added without its entries would be found at run time. These tests walk
// every op the dialect registers and name those that lack an entry, unless
// kExemptions below says why they need none; an exemption that no longer
// holds fails too.
//
// The runtime side needs no test here: scripts/gen-op-spec writes the
// runtime's op spec (bmrt/OpSpec.def) from the ODS, every op but the
// Bm_NoKernel ones, and the ctest OpSpec.GeneratedFromOds fails when it is
// stale; the runtime's KernelCoverage.<backend> checks each spec op has a
// kernel.
//
//===----------------------------------------------------------------------===//

#include "bm/BmOps.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "gtest/gtest.h"

#include <algorithm>
#include <string>
#include <vector>

using namespace mlir;
using namespace mlir::bm;

namespace {

/// The facts an op may be exempt from.
enum Fact : unsigned {
  kCost = 1,         // Costs.cpp
  kGradientRule = 2, // GradientRules.cpp
  kShardingRule = 4, // ShardingRules.cpp
};

struct Exemption {
  llvm::StringLiteral op;
  unsigned facts;
  const char *reason;
};

// Reasons shared by several ops.
constexpr const char *kBackwardOp =
    "a backward op autodiff builds (phase 5): it is never differentiated "
    "again, and the planner prices backward as a multiple of forward "
    "(BmOps.td, 'Training: loss and backward')";
constexpr const char *kCollective =
    "inserted by bm-partition (phase 6), after planning and autodiff: never "
    "differentiated or re-partitioned; the cost model prices communication "
    "itself";
constexpr const char *kUnusedCollective =
    "declared for pipeline stages, but no pass creates it yet: no entry "
    "anywhere (Bm_NoKernel, so no kernel either)";

/// The ops that need no entry in some registries, alphabetical, each with
/// the reason.
const Exemption kExemptions[] = {
    {"bm.all_gather", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.all_reduce", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.all_to_all", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.attention_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.avg_pool_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.batch_norm_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.collective_permute", kCost | kGradientRule | kShardingRule,
     kUnusedCollective},
    {"bm.conv_grad_input", kCost | kGradientRule, kBackwardOp},
    {"bm.conv_grad_weight", kCost | kGradientRule, kBackwardOp},
    {"bm.cross_entropy", kCost,
     "the loss autodiff appends (phase 5), after the planner (phase 3) "
     "priced the forward ops"},
    {"bm.cross_entropy_from_stats", kCost | kGradientRule | kShardingRule,
     kCollective},
    {"bm.cross_entropy_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.cross_entropy_grad_from_stats", kCost | kGradientRule | kShardingRule,
     kCollective},
    {"bm.cross_entropy_stats", kCost | kGradientRule | kShardingRule,
     kCollective},
    {"bm.gather_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.layer_norm_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.log_softmax_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.max_pool_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.mesh", kCost | kGradientRule | kShardingRule,
     "declares the device mesh, a symbol of the module: it computes nothing, "
     "and codegen reads it as the program's mesh"},
    {"bm.recv", kCost | kGradientRule | kShardingRule, kUnusedCollective},
    {"bm.reduce_scatter", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.reshard", kCost | kShardingRule,
     "bm-insert-reshards writes it from the plan's shardings just before "
     "autodiff, only when the step is partitioned, and bm-partition lowers "
     "it to collectives (codegen reads one left over as its input)"},
    {"bm.reshard_grad", kCost | kGradientRule | kShardingRule,
     "autodiff builds it from a reshard and bm-partition always lowers it "
     "to collectives before codegen"},
    {"bm.rms_norm_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.send", kCost | kGradientRule | kShardingRule, kUnusedCollective},
    {"bm.shard_gather", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.shard_slice", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.slice_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.softmax_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.unary_grad", kCost | kGradientRule, kBackwardOp},
};

class OpFactsTest : public ::testing::Test {
protected:
  OpFactsTest() { context.loadDialect<BmDialect>(); }

  /// The names of every op the bm dialect registers.
  std::vector<std::string> bmOps() {
    std::vector<std::string> names;
    for (RegisteredOperationName name : context.getRegisteredOperations())
      if (name.getDialectNamespace() == BmDialect::getDialectNamespace())
        names.push_back(name.getStringRef().str());
    return names;
  }

  static const Exemption *exemption(StringRef op) {
    for (const Exemption &e : kExemptions)
      if (e.op == op)
        return &e;
    return nullptr;
  }

  /// Every bm op without `fact` (per `has`) is exempt from it, and every op
  /// exempt from it lacks it: `what` names the registry in the messages.
  void checkFact(Fact fact, llvm::function_ref<bool(StringRef)> has,
                 StringRef what) {
    std::vector<std::string> ops = bmOps();
    // Not vacuous: the dialect registers its ops.
    ASSERT_GT(ops.size(), 80u);
    std::vector<std::string> missing, stale;
    for (const std::string &op : ops) {
      const Exemption *e = exemption(op);
      bool exempt = e && (e->facts & fact);
      if (!has(op) && !exempt)
        missing.push_back(op);
      if (has(op) && exempt)
        stale.push_back(op);
    }
    EXPECT_TRUE(missing.empty())
        << "bm ops without " << what.str() << ": " << llvm::join(missing, ", ")
        << " (add the entries, or an exemption with its reason to "
           "OpFactsTest.cpp)";
    EXPECT_TRUE(stale.empty())
        << "bm ops exempt from " << what.str()
        << " that have it (drop the exemption): " << llvm::join(stale, ", ");
  }

  MLIRContext context;
};

TEST_F(OpFactsTest, EveryOpHasACost) {
  checkFact(kCost, hasCost, "a cost (Costs.cpp)");
}

TEST_F(OpFactsTest, EveryOpHasAGradientRule) {
  checkFact(kGradientRule, hasGradientRule,
            "a gradient rule (GradientRules.cpp; noGradientRule counts)");
}

TEST_F(OpFactsTest, EveryOpHasAShardingRule) {
  checkFact(kShardingRule, hasShardingRule,
            "a sharding rule (ShardingRules.cpp)");
}

/// Each exemption names a registered op and at least one fact.
TEST_F(OpFactsTest, ExemptionsNameOps) {
  std::vector<std::string> ops = bmOps();
  for (const Exemption &e : kExemptions) {
    EXPECT_TRUE(llvm::is_contained(ops, e.op.str()))
        << "exemption of an op the dialect does not register: " << e.op.str();
    EXPECT_NE(e.facts, 0u) << e.op.str();
    EXPECT_TRUE(e.reason && *e.reason) << e.op.str() << " needs a reason";
  }
  EXPECT_TRUE(std::is_sorted(
      std::begin(kExemptions), std::end(kExemptions),
      [](const Exemption &a, const Exemption &b) { return a.op < b.op; }))
      << "kExemptions is alphabetical";
}

} // namespace
