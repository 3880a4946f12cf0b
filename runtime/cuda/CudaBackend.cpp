//===- CudaBackend.cpp - the backend registered as "cuda" -----------------===//
//
// cuBLASLt for GEMMs, hand-written kernels for the rest (one file per
// family, KernelFamilies.h), checked against the CPU backend by the
// conformance suite. Built into every binary where nvcc was found; a
// machine without a GPU just has no device (available() is false).
//
//===----------------------------------------------------------------------===//

#include "CudaBackend.h"
#include "KernelFamilies.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace bmrt::cuda {

namespace {

/// Every family's launchers in one array sorted by name. Two families
/// naming one op is a bug in this backend: it stops the process at once,
/// before any program runs.
std::vector<KernelTable::Entry> mergeFamilies() {
  std::vector<KernelTable::Entry> all;
  for (KernelFamily family :
       {attentionKernels(), contractionKernels(), dataMovementKernels(),
        elementwiseKernels(), normKernels(), reductionKernels()})
    all.insert(all.end(), family.entries, family.entries + family.count);
  auto byName = [](const KernelTable::Entry &a, const KernelTable::Entry &b) {
    return std::strcmp(a.op, b.op) < 0;
  };
  std::sort(all.begin(), all.end(), byName);
  for (size_t k = 1; k < all.size(); ++k)
    if (std::strcmp(all[k - 1].op, all[k].op) == 0) {
      std::fprintf(stderr, "bmrt: the CUDA backend has two kernels for '%s'\n",
                   all[k].op);
      std::abort();
    }
  return all;
}

const KernelTable &kernelTable() {
  static const std::vector<KernelTable::Entry> entries = mergeFamilies();
  static const KernelTable table(entries.data(), entries.size());
  return table;
}

std::unique_ptr<Device> create(const DeviceOptions &options) {
  return createDevice(cudaBackend(), options);
}

bool available() { return deviceCount() > 0; }

} // namespace
} // namespace bmrt::cuda

namespace bmrt {

const Backend &cudaBackend() {
  static const Backend backend{"cuda", cuda::create, cuda::available,
                               cuda::kernelTable(), cuda::trainerKernels()};
  return backend;
}

} // namespace bmrt
