//===- OpFactsTest.cpp - every bm op has its cost, rules and kernel -------===//
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
// The runtime side: every op codegen lowers to an instruction of its own
// (codegen/StepProgram.cpp: instr.op is the op's mnemonic) must be
// in the runtime's op spec, bmrt/OpSpec.def, which scripts/gen-op-spec
// writes from the ODS (every op but the Bm_NoKernel ones; a ctest checks
// it is current). The runtime's own tests check
// that every backend has a kernel for each op of the spec
// (KernelCoverage.<backend>) and Verify.cpp a checker. The spec is read as
// the X-macro file it is; nothing of the runtime is linked here.
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
#include <optional>
#include <set>
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
  kStepOp = 8,       // bmrt/OpSpec.def (an instruction of its own)
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
    "anywhere, and codegen refuses it ('has no kernel in the runtime'); it "
    "needs an OpSpec.def line and kernels once a pass emits it";

/// The ops that need no entry in some registries, alphabetical, each with
/// the reason.
const Exemption kExemptions[] = {
    {"bm.all_gather", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.all_reduce", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.all_to_all", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.avg_pool_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.batch_norm_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.collective_permute", kCost | kGradientRule | kShardingRule | kStepOp,
     kUnusedCollective},
    {"bm.constant", kStepOp,
     "codegen makes it a constant slot or a fill instruction, not an "
     "instruction of its own"},
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
    {"bm.mesh", kCost | kGradientRule | kShardingRule | kStepOp,
     "declares the device mesh, a symbol of the module: it computes nothing, "
     "and codegen reads it as the program's mesh"},
    {"bm.recv", kCost | kGradientRule | kShardingRule | kStepOp,
     kUnusedCollective},
    {"bm.reduce_scatter", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.reshard", kCost | kShardingRule | kStepOp,
     "bm-insert-reshards writes it from the plan's shardings just before "
     "autodiff, only when the step is partitioned, and bm-partition lowers "
     "it to collectives (codegen reads one left over as its input)"},
    {"bm.reshard_grad", kCost | kGradientRule | kShardingRule | kStepOp,
     "autodiff builds it from a reshard and bm-partition always lowers it "
     "to collectives before codegen"},
    {"bm.rms_norm_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.send", kCost | kGradientRule | kShardingRule | kStepOp,
     kUnusedCollective},
    {"bm.shard_gather", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.shard_slice", kCost | kGradientRule | kShardingRule, kCollective},
    {"bm.slice_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.softmax_grad", kCost | kGradientRule, kBackwardOp},
    {"bm.unary_grad", kCost | kGradientRule, kBackwardOp},
};

/// The instructions of the op spec that are no bm op: codegen makes them.
const llvm::StringLiteral kCodegenSteps[] = {
    "copy", // a gradient slot filled from a value another slot claimed
    "fill", // a splat bm.constant
};

/// The op spec's names (bmrt/OpSpec.def), as in a step program.
const std::set<std::string> &stepOps() {
  static const std::set<std::string> names = {
#define BMRT_OP(name, operands, results, attributes) #name,
#include "bmrt/OpSpec.def"
#undef BMRT_OP
  };
  return names;
}

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

  /// "bm.add" -> "add", as codegen names the instruction.
  static StringRef mnemonic(StringRef op) {
    return op.drop_front(BmDialect::getDialectNamespace().size() + 1);
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

/// Codegen lowers each op to the instruction named by its mnemonic: the op
/// spec must name it, and then every backend has a kernel for it.
TEST_F(OpFactsTest, EveryOpIsAStepOp) {
  checkFact(
      kStepOp,
      [](StringRef op) { return stepOps().count(mnemonic(op).str()) != 0; },
      "a line in the runtime's op spec (bmrt/OpSpec.def) and so a kernel");
}

/// The ops exempt from the op spec are those the dialect marks Bm_NoKernel,
/// the trait scripts/gen-op-spec leaves out.
TEST_F(OpFactsTest, NoKernelTraitMatchesTheStepOpExemptions) {
  for (const std::string &op : bmOps()) {
    std::optional<RegisteredOperationName> name =
        RegisteredOperationName::lookup(op, &context);
    ASSERT_TRUE(name.has_value()) << op;
    const Exemption *e = exemption(op);
    EXPECT_EQ(name->hasTrait<NoKernel>(), e && (e->facts & kStepOp)) << op;
  }
}

/// Every instruction of the op spec is a bm op or one codegen makes.
TEST_F(OpFactsTest, EveryStepOpIsABmOp) {
  std::set<std::string> mnemonics;
  for (const std::string &op : bmOps())
    mnemonics.insert(mnemonic(op).str());
  std::vector<std::string> unknown;
  for (const std::string &step : stepOps())
    if (!mnemonics.count(step) && !llvm::is_contained(kCodegenSteps, step))
      unknown.push_back(step);
  EXPECT_TRUE(unknown.empty()) << "ops of bmrt/OpSpec.def that are no bm op: "
                               << llvm::join(unknown, ", ");
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
