//===- Bf16Pack.cu - fp32 GEMM operands rounded to bf16 -------------------===//
//
// Private to CublasLt.cpp: the one place where the CUDA backend makes bf16
// values. Under the plan's bf16 (ContractionPrecision::BF16) each GEMM
// reads its fp32 operands through a packed bf16 copy made here, rounded to
// nearest even (__float2bfloat16_rn: what PyTorch's autocast does when it
// casts an fp32 tensor to bf16); NaN and infinities carry over. The copy is
// dense, so that a strided or shared operand costs only what it holds.
//
//===----------------------------------------------------------------------===//

#include "CublasLt.h"
#include "CudaCheck.h"

#include <cuda_bf16.h>

#include <algorithm>

namespace bmrt::cuda {
namespace {

constexpr int kPackBlock = 256;

/// One thread per element (grid-stride); consecutive threads read and write
/// consecutive columns of a row.
__global__ void packBf16Kernel(StoredMatrix m, __nv_bfloat16 *out,
                               int64_t outLd, int64_t total) {
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       idx < total; idx += int64_t(gridDim.x) * blockDim.x) {
    int64_t col = idx % m.cols, rest = idx / m.cols;
    int64_t row = rest % m.rows, matrix = rest / m.rows;
    out[(matrix * m.rows + row) * outLd + col] = __float2bfloat16_rn(
        m.data[matrix * m.stride + row * m.ld + col]);
  }
}

} // namespace

void packBf16(cudaStream_t stream, const StoredMatrix &m, void *out,
              int64_t outLd) {
  int64_t total = m.batch * m.rows * m.cols;
  if (total == 0)
    return;
  int64_t blocks = (total + kPackBlock - 1) / kPackBlock;
  unsigned grid = static_cast<unsigned>(std::min<int64_t>(blocks, 1 << 20));
  packBf16Kernel<<<grid, kPackBlock, 0, stream>>>(
      m, static_cast<__nv_bfloat16 *>(out), outLd, total);
  BMRT_CUDA_CHECK_LAUNCH("rounding a GEMM operand to bf16");
}

} // namespace bmrt::cuda
