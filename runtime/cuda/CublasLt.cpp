//===- CublasLt.cpp - row-major strided-batched GEMM on cuBLASLt ----------===//
//
// One cuBLASLt handle and one workspace per (thread, device), made on first
// use and kept for the thread's life: a handle is not safe to share between
// threads, and creating one per call costs more than most GEMMs. The
// algorithm comes from cuBLASLt's heuristic (no autotuning), asked once per
// GEMM shape and kept with the handle: a step repeats its shapes every
// layer and every step, and the heuristic's query costs tens of
// microseconds of host time per call.
//
// Both precisions end in the one `matmul` below, which differs only in the
// element type of A and B; bf16 first packs the fp32 operands into a
// stream-ordered temporary (StreamBuffer, freed in stream order after the
// GEMM: the executor's scratch is not used, since the convolutions hold
// their columns there while they call gemm).
//
//===----------------------------------------------------------------------===//

#include "CublasLt.h"
#include "CudaBackend.h"

#include "bmrt/Error.h"

#include <cublasLt.h>

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <tuple>

namespace bmrt::cuda {
namespace {

/// cuBLASLt's workspace: 32 MiB is what NVIDIA recommends for Hopper.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

#define BMRT_CUBLAS(call)                                                      \
  do {                                                                         \
    cublasStatus_t status_ = (call);                                           \
    BMRT_CHECK(status_ == CUBLAS_STATUS_SUCCESS,                               \
               std::string("cuBLASLt: ") + #call + " failed: " +               \
                   cublasLtGetStatusString(status_));                          \
  } while (false)

void checkCudaCall(cudaError_t status, const char *what) {
  BMRT_CHECK(status == cudaSuccess,
             std::string(what) + ": " + cudaGetErrorString(status));
}

/// What the heuristic's choice depends on: the element types and the
/// layouts (sizes, leading dims, batch strides, transposes).
using AlgoKey =
    std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
               int64_t, int64_t, int64_t, int64_t, bool, bool>;

struct Context {
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
};

AlgoKey algoKey(const GemmShape &g, cudaDataType_t inputs) {
  return {static_cast<int>(inputs),
          g.m,
          g.n,
          g.k,
          g.batch,
          g.lda,
          g.ldb,
          g.ldc,
          g.strideA,
          g.strideB,
          g.strideC,
          g.transA,
          g.transB};
}

/// This thread's handle and workspace for the current device. They are
/// never freed: they live as long as the thread, and freeing them at exit
/// could run after the CUDA runtime has shut down.
Context &contextForDevice() {
  thread_local std::map<int, Context> contexts;
  int device = 0;
  checkCudaCall(cudaGetDevice(&device), "cudaGetDevice");
  Context &context = contexts[device];
  if (!context.handle) {
    BMRT_CUBLAS(cublasLtCreate(&context.handle));
    checkCudaCall(cudaMalloc(&context.workspace, kWorkspaceBytes),
                  "allocating the cuBLASLt workspace");
  }
  return context;
}

/// Owns the descriptors of one call.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~Descriptors() {
    if (preference)
      cublasLtMatmulPreferenceDestroy(preference);
    if (c)
      cublasLtMatrixLayoutDestroy(c);
    if (b)
      cublasLtMatrixLayoutDestroy(b);
    if (a)
      cublasLtMatrixLayoutDestroy(a);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

/// A column-major layout of rows x cols elements of `type` with leading dim
/// ld, batched.
void makeLayout(cublasLtMatrixLayout_t &layout, cudaDataType_t type,
                int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                int64_t stride) {
  BMRT_CUBLAS(cublasLtMatrixLayoutCreate(&layout, type, rows, cols,
                                         std::max<int64_t>(ld, 1)));
  if (batch == 1)
    return;
  BMRT_CHECK(batch <= INT_MAX, "GEMM batch " + std::to_string(batch) +
                                   " exceeds cuBLASLt's 32-bit count");
  int32_t count = static_cast<int32_t>(batch);
  BMRT_CUBLAS(cublasLtMatrixLayoutSetAttribute(
      layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  BMRT_CUBLAS(cublasLtMatrixLayoutSetAttribute(
      layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
      sizeof(stride)));
}

/// C = beta C where the contraction is empty (k = 0): cuBLASLt rejects it.
void scaleOnly(cudaStream_t stream, const GemmShape &g, float beta, float *c) {
  BMRT_CHECK(beta == 0.f || beta == 1.f,
             "GEMM with an empty contraction and beta " +
                 std::to_string(beta) + " is not supported on cuda");
  if (beta == 1.f)
    return;
  for (int64_t i = 0; i < g.batch; ++i)
    checkCudaCall(cudaMemset2DAsync(c + i * g.strideC, g.ldc * sizeof(float),
                                    0, g.n * sizeof(float), g.m, stream),
                  "zeroing an empty GEMM's output");
}

/// The GEMMs of `g` on cuBLASLt, A and B of element type `inputs` (F32 or
/// 16BF), C and D F32, accumulated in F32 (CUBLAS_COMPUTE_32F).
void matmul(cudaStream_t stream, const GemmShape &g, cudaDataType_t inputs,
            float alpha, const void *a, const void *b, float beta, float *c) {
  Context &context = contextForDevice();
  Descriptors d;
  BMRT_CUBLAS(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Swapped operands (see the header): cuBLASLt's A is our B.
  cublasOperation_t opA = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  BMRT_CUBLAS(cublasLtMatmulDescSetAttribute(
      d.op, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)));
  BMRT_CUBLAS(cublasLtMatmulDescSetAttribute(
      d.op, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)));
  // Our row-major B (k x n, or n x k transposed) is column-major n x k (or
  // k x n); our A likewise; C is column-major n x m.
  makeLayout(d.a, inputs, g.transB ? g.k : g.n, g.transB ? g.n : g.k, g.ldb,
             g.batch, g.strideB);
  makeLayout(d.b, inputs, g.transA ? g.m : g.k, g.transA ? g.k : g.m, g.lda,
             g.batch, g.strideA);
  makeLayout(d.c, CUDA_R_32F, g.n, g.m, g.ldc, g.batch, g.strideC);

  AlgoKey key = algoKey(g, inputs);
  auto known = context.algos.find(key);
  if (known == context.algos.end()) {
    BMRT_CUBLAS(cublasLtMatmulPreferenceCreate(&d.preference));
    size_t workspace = kWorkspaceBytes;
    BMRT_CUBLAS(cublasLtMatmulPreferenceSetAttribute(
        d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
        sizeof(workspace)));
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    BMRT_CUBLAS(cublasLtMatmulAlgoGetHeuristic(context.handle, d.op, d.a, d.b,
                                               d.c, d.c, d.preference, 1,
                                               &heuristic, &found));
    BMRT_CHECK(found > 0,
               std::string("cuBLASLt has no algorithm for a GEMM of ") +
                   (inputs == CUDA_R_16BF ? "bf16" : "fp32") + " inputs, m " +
                   std::to_string(g.m) + " n " + std::to_string(g.n) + " k " +
                   std::to_string(g.k) + " batch " + std::to_string(g.batch));
    known = context.algos.emplace(key, heuristic.algo).first;
  }
  BMRT_CUBLAS(cublasLtMatmul(context.handle, d.op, &alpha, b, d.a, a, d.b,
                             &beta, c, d.c, c, d.c, &known->second,
                             context.workspace, kWorkspaceBytes, stream));
}

/// bf16 rows are padded to 8 elements (16 bytes), so that every row of a
/// packed operand starts where cuBLASLt's 16-byte loads want it.
constexpr int64_t kBf16RowElements = 8;
/// Where the second packed operand starts: cudaMallocAsync's alignment.
constexpr size_t kPackAlignment = 256;

int64_t roundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/// Our A and B as stored (row-major, op() not applied); a shared operand
/// (stride 0) is one matrix.
StoredMatrix storedA(const GemmShape &g, const float *a) {
  return {a, g.strideA == 0 ? 1 : g.batch, g.strideA, g.transA ? g.k : g.m,
          g.transA ? g.m : g.k, g.lda};
}
StoredMatrix storedB(const GemmShape &g, const float *b) {
  return {b, g.strideB == 0 ? 1 : g.batch, g.strideB, g.transB ? g.n : g.k,
          g.transB ? g.k : g.n, g.ldb};
}

/// Bytes of `m` packed as bf16 with rows of `ld` elements.
size_t packedBytes(const StoredMatrix &m, int64_t ld) {
  return static_cast<size_t>(m.batch * m.rows * ld) * 2;
}

/// The GEMMs of `g` with A and B rounded to bf16 first (the header).
void matmulBf16(cudaStream_t stream, const GemmShape &g, float alpha,
                const float *a, const float *b, float beta, float *c) {
  StoredMatrix ma = storedA(g, a), mb = storedB(g, b);
  GemmShape packed = g;
  packed.lda = roundUp(ma.cols, kBf16RowElements);
  packed.ldb = roundUp(mb.cols, kBf16RowElements);
  packed.strideA = g.strideA == 0 ? 0 : ma.rows * packed.lda;
  packed.strideB = g.strideB == 0 ? 0 : mb.rows * packed.ldb;
  size_t aBytes = roundUp(packedBytes(ma, packed.lda), kPackAlignment);
  StreamBuffer buffer(aBytes + packedBytes(mb, packed.ldb), stream);
  char *aPacked = static_cast<char *>(buffer.data()), *bPacked = aPacked + aBytes;
  packBf16(stream, ma, aPacked, packed.lda);
  packBf16(stream, mb, bPacked, packed.ldb);
  matmul(stream, packed, CUDA_R_16BF, alpha, aPacked, bPacked, beta, c);
}

} // namespace

void gemm(cudaStream_t stream, const GemmShape &g, float alpha, const float *a,
          const float *b, float beta, float *c,
          ContractionPrecision precision) {
  if (g.m == 0 || g.n == 0 || g.batch == 0)
    return;
  if (g.k == 0)
    return scaleOnly(stream, g, beta, c);
  switch (precision) {
  case ContractionPrecision::F32:
    return matmul(stream, g, CUDA_R_32F, alpha, a, b, beta, c);
  case ContractionPrecision::BF16:
    return matmulBf16(stream, g, alpha, a, b, beta, c);
  case ContractionPrecision::F16:
    break;
  }
  BMRT_FAIL(std::string("the CUDA GEMM does not compute in ") +
            nameOf(precision));
}

} // namespace bmrt::cuda
