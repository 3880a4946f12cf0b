//===- ClusterFuzzer.cpp - fuzz the cluster-file reader -------------------===//
//
// parseCluster, what `--cluster FILE` reads: built twice, as fuzz-cluster-json
// and as fuzz-cluster-yaml (BMC_FUZZ_CLUSTER_YAML=1), since the two syntaxes
// go through different parsers before the shared key checks. Anything
// malformed (syntax, unknown keys, missing or negative numbers) is an
// llvm::Error.
//
//===----------------------------------------------------------------------===//

#include "cost/Cluster.h"

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<bm::cost::Cluster> cluster = bm::cost::parseCluster(
      text, /*isYaml=*/BMC_FUZZ_CLUSTER_YAML, "fuzz-cluster-file");
  if (!cluster)
    llvm::consumeError(cluster.takeError());
  return 0;
}
