//===- OnnxMutatorTest.cpp - the ONNX mutator, and the importer under it --===//
//
// A deterministic slice of what fuzz-onnx does, for the ordinary build:
// every seed model is mutated a few hundred times with fixed seeds, and
// each mutant must serialise to a protobuf that parses back unchanged, must
// differ from its parent (the mutator is not a no-op), and must either
// import or fail with one non-empty line.
//
//===----------------------------------------------------------------------===//

#include "fuzz/OnnxMutator.h"

#include "import/OnnxImporter.h"
#include "import/OnnxLoader.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace {

constexpr int kMutantsPerSeed = 300;

std::vector<std::filesystem::path> seedModels() {
  std::vector<std::filesystem::path> seeds;
  for (const auto &entry : std::filesystem::directory_iterator(
           BMC_SOURCE_DIR "/fuzz/corpus/onnx"))
    if (entry.path().extension() == ".onnx")
      seeds.push_back(entry.path());
  std::sort(seeds.begin(), seeds.end());
  return seeds;
}

TEST(OnnxMutatorTest, MutantsAreValidProtobufsThatImportOrFailWithOneLine) {
  std::vector<std::filesystem::path> seeds = seedModels();
  ASSERT_GE(seeds.size(), 5u) << "the committed ONNX seeds are missing";
  int imported = 0, rejected = 0, unchanged = 0;
  for (const std::filesystem::path &seed : seeds) {
    auto parent = bm::loadOnnxModel(seed.string());
    ASSERT_TRUE(static_cast<bool>(parent)) << seed;
    std::string parentBytes = (*parent)->SerializeAsString();
    for (int i = 0; i < kMutantsPerSeed; ++i) {
      std::mt19937_64 rng(i);
      onnx::ModelProto mutant = **parent;
      bm::fuzz::mutateOnnxModel(mutant, rng);
      std::string bytes = mutant.SerializeAsString();
      unchanged += bytes == parentBytes;
      onnx::ModelProto reparsed;
      ASSERT_TRUE(reparsed.ParseFromString(bytes)) << seed << " mutant " << i;
      ASSERT_EQ(reparsed.SerializeAsString(), bytes);

      mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
      bm::ImportOptions options;
      options.batchSize = 2;
      auto module = bm::importOnnxModel(context, mutant, "mutant.onnx", options);
      if (module) {
        ++imported;
        continue;
      }
      ++rejected;
      std::string message = llvm::toString(module.takeError());
      EXPECT_FALSE(message.empty()) << seed << " mutant " << i;
      EXPECT_EQ(message.find('\n'), std::string::npos)
          << seed << " mutant " << i << ": " << message;
    }
  }
  int total = static_cast<int>(seeds.size()) * kMutantsPerSeed;
  // Some mutations are no-ops by chance (a dim set to its own value); most
  // must change the model, and both outcomes must occur.
  EXPECT_LT(unchanged, total / 10);
  EXPECT_GT(imported, total / 20);
  EXPECT_GT(rejected, total / 4);
  std::printf("%d mutants: %d imported, %d rejected with one line, %d "
              "unchanged\n",
              total, imported, rejected, unchanged);
}

} // namespace
