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

/// Calls fn with a value of the unsigned integer type as wide as one
/// element: data movement never looks inside an element, so one
/// instantiation per width serves every dtype.
template <typename Fn> void withElementWidth(DType dtype, Fn &&fn) {
  switch (sizeOf(dtype)) {
  case 1:
    return fn(uint8_t{});
  case 2:
    return fn(uint16_t{});
  case 4:
    return fn(uint32_t{});
  default:
    return fn(uint64_t{});
  }
}

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
  int64_t dims[kMaxRank];
  int64_t strides[N][kMaxRank];

  /// Each operand's element offset for output element i.
  __device__ void offsets(int64_t i, int64_t (&offset)[N]) const {
    for (int k = 0; k < N; ++k)
      offset[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t index = i % dims[d];
      i /= dims[d];
      for (int k = 0; k < N; ++k)
        offset[k] += index * strides[k][d];
    }
  }
};

/// The CPU backend's merge (runtime/cpu/Broadcast.h), so that a bias add
/// [N, C] + [C] is a rank-2 loop whatever the model's rank.
template <int N>
Broadcast<N> planBroadcast(const char *op, const Shape &out,
                           const std::array<const Shape *, N> &operands) {
  int64_t rank = static_cast<int64_t>(out.size());
  std::array<Shape, N> aligned;
  for (int k = 0; k < N; ++k) {
    const Shape &shape = *operands[k];
    int64_t shift = rank - static_cast<int64_t>(shape.size());
    aligned[k].assign(rank, 0);
    int64_t stride = 1;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (shape[d] != 1)
        aligned[k][shift + d] = stride;
      stride *= shape[d];
    }
  }
  Shape dims;
  std::array<Shape, N> strides;
  for (int64_t d = 0; d < rank; ++d) {
    if (out[d] == 1)
      continue;
    bool merges = !dims.empty();
    for (int k = 0; k < N && merges; ++k)
      merges = strides[k].back() == aligned[k][d] * out[d];
    if (merges) {
      dims.back() *= out[d];
      for (int k = 0; k < N; ++k)
        strides[k].back() = aligned[k][d];
      continue;
    }
    dims.push_back(out[d]);
    for (int k = 0; k < N; ++k)
      strides[k].push_back(aligned[k][d]);
  }
  checkRank(op, static_cast<int64_t>(dims.size()));
  Broadcast<N> plan;
  plan.rank = static_cast<int>(dims.size());
  for (int d = 0; d < plan.rank; ++d) {
    plan.dims[d] = dims[d];
    for (int k = 0; k < N; ++k)
      plan.strides[k][d] = strides[k][d];
  }
  return plan;
}

/// A strided walk: element i of a tensor of shape `dims` sits at
/// base + sum(index_d * strides[d]) of another buffer (slices, transposes).
struct StridedIndex {
  int rank = 0;
  int64_t base = 0;
  int64_t dims[kMaxRank];
  int64_t strides[kMaxRank];

  __device__ int64_t offset(int64_t i) const {
    int64_t offset = base;
    for (int d = rank - 1; d >= 0; --d) {
      offset += (i % dims[d]) * strides[d];
      i /= dims[d];
    }
    return offset;
  }
};

} // namespace bmrt::cuda

#endif // BMRT_CUDA_DEVICELOOPS_CUH
