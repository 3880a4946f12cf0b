//===- DeviceLoops.cuh - launches, loops, broadcasts -----------*- CUDA -*-===//
//
// Private to runtime/cuda's kernel files. The kernels are written llm.c
// style: one thread per output element in a grid-stride loop, so that one
// launch shape serves every size. Index arithmetic that depends on shapes
// is done once on the host: a broadcast or a strided window becomes a few
// merged dims and per-operand strides, passed to the kernel by value.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CUDA_DEVICELOOPS_CUH
#define BMRT_CUDA_DEVICELOOPS_CUH

#include "CudaBackend.h"
#include "CudaCheck.h"

#include "bmrt/Broadcast.h"
#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/Tensor.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

namespace bmrt::cuda {

constexpr int kThreads = 256;
/// Enough blocks to fill an H100 many times over; the grid-stride loop
/// covers whatever is left.
constexpr int64_t kMaxBlocks = 1 << 16;
/// The most dims a kernel's index struct holds (after merging).
constexpr int kMaxRank = 8;

/// i runs over [0, n), spread over every thread of the grid.
#define BMRT_GRID_STRIDE_LOOP(i, n)                                            \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n);    \
       i += int64_t(blockDim.x) * gridDim.x)

/// Launches `kernel(args...)` on `stream` with enough threads for n
/// elements (none for n == 0); `name` names it in an error.
template <typename... Params, typename... Args>
void launch(const char *name, cudaStream_t stream, int64_t n,
            void (*kernel)(Params...), Args &&...args) {
  if (n <= 0)
    return;
  int64_t blocks = std::min(kMaxBlocks, (n + kThreads - 1) / kThreads);
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<Params>(args)...);
  checkCuda(cudaGetLastError(), name, __FILE__, __LINE__);
}

inline cudaStream_t streamOf(Executor &e) { return cudaStreamOf(e.stream()); }

/// Throws bmrt::Error unless `rank` dims fit a kernel's index struct.
inline void checkRank(const char *op, int64_t rank) {
  BMRT_CHECK(rank <= kMaxRank,
             std::string("the CUDA ") + op + " kernel takes at most " +
                 std::to_string(kMaxRank) + " dims (after merging), not " +
                 std::to_string(rank));
}

/// Numpy broadcasting of N operands to one output: out's dims (size-1 dims
/// dropped, neighbours that every operand walks alike merged) and each
/// operand's element stride along them (0 where it is stretched).
template <int N> struct Broadcast {
  int rank = 0;
  /// Whether every output index fits 32 bits: the index arithmetic then
  /// divides in 32 bits, several times cheaper than 64 (an elementwise op
  /// on GPT-2's [8,16,1024,1024] scores spent half its time dividing).
  bool narrow = false;
  int64_t dims[kMaxRank];
  int64_t strides[N][kMaxRank];

  /// Each operand's element offset for output element i.
  __device__ void offsets(int64_t i, int64_t (&offset)[N]) const {
    if (rank == 1) { // same shapes, or a scalar: no division at all
      for (int k = 0; k < N; ++k)
        offset[k] = i * strides[k][0];
      return;
    }
    for (int k = 0; k < N; ++k)
      offset[k] = 0;
    if (narrow) {
      uint32_t rest = static_cast<uint32_t>(i);
      for (int d = rank - 1; d >= 0; --d) {
        uint32_t dim = static_cast<uint32_t>(dims[d]);
        uint32_t index = rest % dim;
        rest /= dim;
        for (int k = 0; k < N; ++k)
          offset[k] += int64_t(index) * strides[k][d];
      }
      return;
    }
    for (int d = rank - 1; d >= 0; --d) {
      int64_t index = i % dims[d];
      i /= dims[d];
      for (int k = 0; k < N; ++k)
        offset[k] += index * strides[k][d];
    }
  }
};

/// The shared merge (bmrt/Broadcast.h) in a kernel's index struct.
template <int N>
Broadcast<N> planBroadcast(const char *op, const Shape &out,
                           const std::array<const Shape *, N> &operands) {
  MergedBroadcast merged =
      mergeBroadcast(out, {operands.begin(), operands.end()});
  checkRank(op, static_cast<int64_t>(merged.dims.size()));
  Broadcast<N> plan;
  plan.rank = static_cast<int>(merged.dims.size());
  int64_t elements = 1;
  for (int d = 0; d < plan.rank; ++d) {
    plan.dims[d] = merged.dims[d];
    elements *= merged.dims[d];
    for (int k = 0; k < N; ++k)
      plan.strides[k][d] = merged.strides[k][d];
  }
  plan.narrow = elements <= int64_t(UINT32_MAX);
  return plan;
}

/// A strided walk: element i of a tensor of shape `dims` sits at
/// base + sum(index_d * strides[d]) of another buffer (slices, transposes).
struct StridedIndex {
  int rank = 0;
  /// Every index fits 32 bits: divide in 32 (Broadcast::narrow).
  bool narrow = false;
  int64_t base = 0;
  int64_t dims[kMaxRank];
  int64_t strides[kMaxRank];

  __device__ int64_t offset(int64_t i) const {
    int64_t offset = base;
    if (narrow) {
      uint32_t rest = static_cast<uint32_t>(i);
      for (int d = rank - 1; d >= 0; --d) {
        uint32_t dim = static_cast<uint32_t>(dims[d]);
        offset += int64_t(rest % dim) * strides[d];
        rest /= dim;
      }
      return offset;
    }
    for (int d = rank - 1; d >= 0; --d) {
      offset += (i % dims[d]) * strides[d];
      i /= dims[d];
    }
    return offset;
  }
};

} // namespace bmrt::cuda

#endif // BMRT_CUDA_DEVICELOOPS_CUH
