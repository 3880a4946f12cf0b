//===- KernelSupport.cuh - helpers of the CUDA math kernels ------*- CUDA
//-*-===//
//
// Private to runtime/cuda's contraction, normalisation and reduction
// kernels: block-wide reductions by warp shuffles, and the device-side flag
// through which a kernel reports a bad label (a kernel cannot throw: the
// launcher reads the flag back and throws the CPU's bmrt::Error). Their
// window geometry is bmrt/Window.h.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CUDA_KERNELSUPPORT_CUH
#define BMRT_CUDA_KERNELSUPPORT_CUH

#include "CudaBackend.h"
#include "CudaCheck.h"

#include "bmrt/Device.h"
#include "bmrt/Error.h"
#include "bmrt/Executor.h"
#include "bmrt/Window.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace bmrt::cuda {

namespace support {

using Ints = std::vector<int64_t>;

/// Threads per block of the one-block-per-row kernels and the flat ones.
inline constexpr int kBlock = 256;
inline constexpr int kWarp = 32;

inline int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Blocks for a grid-stride loop over n elements (capped: the loops stride).
inline unsigned gridFor(int64_t n) {
  return static_cast<unsigned>(
      std::clamp<int64_t>(ceilDiv(n, kBlock), 1, int64_t(1) << 20));
}

/// A reduction over the rows of a row-major [rows, cols] in two passes:
/// a thread per column and chunk of rows folds the chunk's rows in order,
/// then a thread per column folds the chunks in order (the same bits every
/// run, no atomics). 64 rows per chunk give rows / 64 times the columns'
/// threads; more where the chunks would pass the grid's 65535 in y.
struct ColumnChunks {
  int64_t rowsPerChunk = 64, chunks = 0;

  explicit ColumnChunks(int64_t rows) {
    rowsPerChunk = std::max<int64_t>(rowsPerChunk, ceilDiv(rows, 65535));
    chunks = ceilDiv(rows, rowsPerChunk);
  }
  /// The grid of the first pass: columns in x, chunks in y.
  dim3 grid(int64_t cols) const {
    return dim3(static_cast<unsigned>(ceilDiv(cols, kBlock)),
                static_cast<unsigned>(chunks));
  }
  /// The rows [first, last) of the calling block's chunk.
  __device__ void rowsOfBlock(int64_t rows, int64_t &first,
                              int64_t &last) const {
    first = blockIdx.y * rowsPerChunk;
    last = first + rowsPerChunk < rows ? first + rowsPerChunk : rows;
  }
};

//===----------------------------------------------------------------------===//
// Block reductions
//===----------------------------------------------------------------------===//

struct SumOp {
  template <typename T> __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
/// numpy's max: a NaN anywhere wins.
struct MaxOp {
  template <typename T> __device__ T operator()(T a, T b) const {
    return (b > a || b != b) ? b : a;
  }
};

template <typename T, typename Op> __device__ T warpReduce(T v, Op op) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// The reduction over the block of every thread's `v`, returned to every
/// thread. Safe to call several times in a row (it synchronises first, so
/// the shared slots of the previous call have been read).
template <typename T, typename Op>
__device__ T blockReduce(T v, Op op, T identity) {
  __shared__ T partial[kWarp];
  int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = warpReduce(v, op);
  __syncthreads();
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : identity;
  return warpReduce(v, op);
}

// The NC[spatial] geometry of convolution and pooling is bmrt/Window.h.
using bmrt::Geometry;
using bmrt::makeGeometry;

//===----------------------------------------------------------------------===//
// Labels
//===----------------------------------------------------------------------===//

/// PyTorch's ignore_index: rows with this label count for nothing.
inline constexpr int64_t kIgnoredLabel = -100;

/// Where kernels report the first label outside the classes: `bad` is set
/// to 1 by the first offender, which also stores its label.
struct LabelFlag {
  int bad;
  int64_t label;
};

/// Labels are i64 (or i32); kernels read them through this.
struct Labels {
  const void *data;
  bool wide;
  __device__ int64_t operator[](int64_t i) const {
    return wide ? static_cast<const int64_t *>(data)[i]
                : static_cast<const int32_t *>(data)[i];
  }
};

inline Labels labelsOf(const TensorView &labels) {
  BMRT_CHECK(labels.dtype == DType::I64 || labels.dtype == DType::I32,
             std::string("cross-entropy labels must be i64, not ") +
                 nameOf(labels.dtype));
  return {labels.data, labels.dtype == DType::I64};
}

/// Records `label` as out of range unless another was first.
__device__ inline void reportLabel(LabelFlag *flag, int64_t label) {
  if (atomicCAS(&flag->bad, 0, 1) == 0)
    flag->label = label;
}

/// Waits for the stream and throws the CPU's error if a kernel flagged a
/// label outside [0, classes).
inline void throwIfBadLabel(cudaStream_t stream, const LabelFlag *flag,
                            int64_t classes) {
  LabelFlag host{};
  BMRT_CUDA_CHECK(cudaMemcpyAsync(&host, flag, sizeof(host),
                                  cudaMemcpyDeviceToHost, stream));
  BMRT_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (host.bad)
    BMRT_FAIL("label " + std::to_string(host.label) +
              " is out of range for " + std::to_string(classes) + " classes");
}

//===----------------------------------------------------------------------===//
// Workspace
//===----------------------------------------------------------------------===//

/// Carves one executor scratch request into aligned pieces: Executor::scratch
/// is valid only until its next call, so a launcher sizes everything first
/// and asks once.
class Carver {
public:
  /// Reserves `bytes`; returns the piece's offset.
  size_t reserve(size_t bytes) {
    size_t at = total;
    total += (bytes + 255) / 256 * 256;
    return at;
  }
  void allocate(Executor &e) { base = static_cast<char *>(e.scratch(total)); }
  template <typename T> T *at(size_t offset) const {
    return reinterpret_cast<T *>(base + offset);
  }

private:
  size_t total = 0;
  char *base = nullptr;
};

} // namespace support
} // namespace bmrt::cuda

#endif // BMRT_CUDA_KERNELSUPPORT_CUH
