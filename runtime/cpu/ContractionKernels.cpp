//===- ContractionKernels.cpp - matmul, gemm and einsum through OpenBLAS --===//
//
// Every contraction ends in cblas_sgemm. matmul maps numpy's broadcast batch
// onto a loop of GEMMs (or one GEMM when the batch folds into M); einsum
// gathers each pair of operands into [batch, M, K] / [batch, K, N] (skipping
// the copy when an operand is already laid out that way) and runs the same
// batched GEMM.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Error.h"
#include "runtime/cpu/Kernels.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <climits>

namespace bmrt::cpu {
namespace {

/// Elements a loop must touch before it forks an OpenMP team: below this
/// the fork costs more than the copy.
constexpr int64_t kParallelWork = 1 << 15;

/// OpenBLAS (interface/gemm.c) runs a GEMM with m * n * k below
/// SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD = 65536 * 4 on the calling
/// thread. A batch of such GEMMs is worth spreading over OpenMP threads
/// ourselves; bigger ones are threaded by OpenBLAS and must not be nested
/// inside our threads (that would oversubscribe the cores).
constexpr int64_t kBlasSingleThreadWork = 65536 * 4;

blasint toBlas(int64_t value) {
  BMRT_CHECK(value <= INT_MAX, "GEMM dimension " + std::to_string(value) +
                                   " exceeds OpenBLAS's 32-bit indices");
  return static_cast<blasint>(value);
}

/// The shape of one row-major GEMM: c[m, n] = alpha op(a) op(b) + beta c,
/// op(a) [m, k], op(b) [k, n], with leading dimensions as stored.
struct GemmShape {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int64_t work() const { return m * n * k; }
};

void sgemm(const GemmShape &g, float alpha, const float *a, const float *b,
           float beta, float *c) {
  if (g.m == 0 || g.n == 0)
    return;
  if (g.k == 0) {
    // An empty contraction: BLAS would reject lda = 0; the product is 0.
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        float &cij = c[i * g.ldc + j];
        cij = beta == 0.f ? 0.f : beta * cij;
      }
    return;
  }
  // BLAS wants every leading dimension >= 1 even where it is never stepped.
  auto ld = [](int64_t v) { return toBlas(std::max<int64_t>(v, 1)); };
  cblas_sgemm(CblasRowMajor, g.transA ? CblasTrans : CblasNoTrans,
              g.transB ? CblasTrans : CblasNoTrans, toBlas(g.m), toBlas(g.n),
              toBlas(g.k), alpha, a, ld(g.lda), b, ld(g.ldb), beta, c,
              ld(g.ldc));
}

/// Runs `count` GEMMs of one shape; `offsets(i, aOff, bOff, cOff)` places
/// the i-th. Small GEMMs run side by side on OpenMP threads (each then stays
/// on its own thread inside OpenBLAS); large ones run in turn, each threaded
/// by OpenBLAS.
template <typename Offsets>
void gemmBatch(const GemmShape &g, int64_t count, const float *a,
               const float *b, float *c, Offsets offsets) {
  bool spread = count > 1 && g.work() < kBlasSingleThreadWork &&
                count * g.work() >= kParallelWork && !omp_in_parallel();
#pragma omp parallel for if (spread) schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    int64_t aOff, bOff, cOff;
    offsets(i, aOff, bOff, cOff);
    sgemm(g, 1.f, a + aOff, b + bOff, 0.f, c + cOff);
  }
}

/// Row-major strides of `shape`, with 0 for dims of size 1 so that a
/// broadcast dim re-reads the same elements; right-aligned to `rank` dims.
std::vector<int64_t> broadcastStrides(const Shape &shape, size_t rank) {
  std::vector<int64_t> strides(rank, 0);
  int64_t stride = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    size_t dim = shape.size() - 1 - i;
    size_t at = rank - 1 - i;
    strides[at] = shape[dim] == 1 ? 0 : stride;
    stride *= shape[dim];
  }
  return strides;
}

} // namespace

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

void matmul(Stream &, const TensorView &a, const TensorView &b,
            const TensorView &out, bool transA, bool transB) {
  // A rank-1 a is a row [1, K], a rank-1 b a column [K, 1]; neither is
  // transposed (the header allows trans only from rank 2).
  GemmShape g;
  Shape aBatch, bBatch;
  if (a.rank() == 1) {
    transA = false;
    g.m = 1;
    g.k = a.shape[0];
    g.lda = g.k;
  } else {
    aBatch.assign(a.shape.begin(), a.shape.end() - 2);
    int64_t rows = a.shape[a.rank() - 2], cols = a.shape[a.rank() - 1];
    g.m = transA ? cols : rows;
    g.k = transA ? rows : cols;
    g.lda = cols;
  }
  if (b.rank() == 1) {
    transB = false;
    g.n = 1;
    g.ldb = 1;
  } else {
    bBatch.assign(b.shape.begin(), b.shape.end() - 2);
    int64_t rows = b.shape[b.rank() - 2], cols = b.shape[b.rank() - 1];
    g.n = transB ? rows : cols;
    g.ldb = cols;
  }
  g.transA = transA;
  g.transB = transB;
  g.ldc = g.n;

  const float *aData = a.f32(), *bData = b.f32();
  float *cData = out.f32();
  int64_t aBatchCount = numElements(aBatch);
  int64_t bBatchCount = numElements(bBatch);

  // b shared by the whole batch and a stored [batch, M, K]: the batch is
  // just more rows of M, so one large GEMM (what OpenBLAS does best).
  if (bBatchCount == 1 && !transA) {
    GemmShape folded = g;
    folded.m = g.m * aBatchCount;
    sgemm(folded, 1.f, aData, bData, 0.f, cData);
    return;
  }

  // The broadcast batch: out's batch shape, and where each operand's matrix
  // for a batch index starts (strides computed once, 0 on broadcast dims).
  size_t rank = std::max(aBatch.size(), bBatch.size());
  Shape batch(rank, 1);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da =
        i + aBatch.size() >= rank ? aBatch[i + aBatch.size() - rank] : 1;
    int64_t db =
        i + bBatch.size() >= rank ? bBatch[i + bBatch.size() - rank] : 1;
    batch[i] = da == 1 ? db : da;
  }
  std::vector<int64_t> aStrides = broadcastStrides(aBatch, rank);
  std::vector<int64_t> bStrides = broadcastStrides(bBatch, rank);
  int64_t aMatrix = g.m * g.k, bMatrix = g.k * g.n, cMatrix = g.m * g.n;
  gemmBatch(g, numElements(batch), aData, bData, cData,
            [&](int64_t i, int64_t &aOff, int64_t &bOff, int64_t &cOff) {
              int64_t aIndex = 0, bIndex = 0, rest = i;
              for (size_t d = rank; d-- > 0;) {
                int64_t coord = rest % batch[d];
                rest /= batch[d];
                aIndex += coord * aStrides[d];
                bIndex += coord * bStrides[d];
              }
              aOff = aIndex * aMatrix;
              bOff = bIndex * bMatrix;
              cOff = i * cMatrix;
            });
}

//===----------------------------------------------------------------------===//
// gemm
//===----------------------------------------------------------------------===//

void gemm(Stream &, const TensorView &a, const TensorView &b,
          const TensorView *c, const TensorView &out, float alpha, float beta,
          bool transA, bool transB) {
  GemmShape g;
  g.transA = transA;
  g.transB = transB;
  g.m = transA ? a.shape[1] : a.shape[0];
  g.k = transA ? a.shape[0] : a.shape[1];
  g.n = transB ? b.shape[0] : b.shape[1];
  g.lda = a.shape[1];
  g.ldb = b.shape[1];
  g.ldc = g.n;
  float *o = out.f32();
  if (!c || beta == 0.f) {
    sgemm(g, alpha, a.f32(), b.f32(), 0.f, o);
    return;
  }
  // Spread c over out (ONNX's unidirectional broadcast), then let the GEMM
  // add alpha op(a) op(b) to beta times it.
  std::vector<int64_t> strides = broadcastStrides(c->shape, 2);
  const float *cData = c->f32();
#pragma omp parallel for if (g.m * g.n >= kParallelWork) schedule(static)
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j)
      o[i * g.n + j] = cData[i * strides[0] + j * strides[1]];
  sgemm(g, alpha, a.f32(), b.f32(), beta, o);
}

//===----------------------------------------------------------------------===//
// einsum
//===----------------------------------------------------------------------===//

namespace {

/// One axis of a strided walk: its extent and how far one step moves in the
/// source.
struct Axis {
  int64_t extent;
  int64_t stride;
};

/// dst (contiguous, dims `kept` in order) = the sum over `summed` of src.
/// A transpose when nothing is summed; a diagonal when an axis' stride is
/// the sum of two source dims' strides. Sums accumulate in double.
void gatherSum(const float *src, float *dst, const std::vector<Axis> &kept,
               const std::vector<Axis> &summed) {
  Axis inner = kept.empty() ? Axis{1, 0} : kept.back();
  size_t outerRank = kept.empty() ? 0 : kept.size() - 1;
  int64_t outer = 1;
  for (size_t d = 0; d < outerRank; ++d)
    outer *= kept[d].extent;
  int64_t sumCount = 1;
  for (const Axis &axis : summed)
    sumCount *= axis.extent;
  int64_t work = outer * inner.extent * sumCount;

#pragma omp parallel for if (work >= kParallelWork) schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t base = 0, rest = o;
    for (size_t d = outerRank; d-- > 0;) {
      base += (rest % kept[d].extent) * kept[d].stride;
      rest /= kept[d].extent;
    }
    float *row = dst + o * inner.extent;
    if (summed.empty()) {
      for (int64_t j = 0; j < inner.extent; ++j)
        row[j] = src[base + j * inner.stride];
      continue;
    }
    // Walk the summed space with an odometer: letters are a-zA-Z, so at
    // most 52 summed axes.
    std::array<int64_t, 52> index;
    for (int64_t j = 0; j < inner.extent; ++j) {
      index.fill(0);
      int64_t at = base + j * inner.stride;
      double sum = 0;
      for (int64_t s = 0; s < sumCount; ++s) {
        sum += src[at];
        for (size_t d = summed.size(); d-- > 0;) {
          at += summed[d].stride;
          if (++index[d] < summed[d].extent)
            break;
          at -= summed[d].extent * summed[d].stride;
          index[d] = 0;
        }
      }
      row[j] = static_cast<float>(sum);
    }
  }
}

/// An einsum operand: row-major data with one letter per dim (letters may
/// repeat in an input, meaning its diagonal).
struct Operand {
  const float *data = nullptr;
  std::string letters;
  Shape shape;
};

std::string uniqueLetters(const std::string &letters) {
  std::string unique;
  for (char c : letters)
    if (unique.find(c) == std::string::npos)
      unique += c;
  return unique;
}

bool has(const std::string &letters, char c) {
  return letters.find(c) != std::string::npos;
}

/// The letters of `from` that satisfy `keep`, in the order of `order`
/// (every one of them must appear in `order`).
template <typename Pred>
std::string select(const std::string &from, const std::string &order,
                   Pred keep) {
  std::string selected;
  for (char c : order)
    if (has(from, c) && keep(c) && !has(selected, c))
      selected += c;
  return selected;
}

/// The extents of every letter, from the inputs.
using Extents = std::array<int64_t, 128>;

/// The walk that reads `op` as a tensor with dims `order` (unique letters),
/// summing its other letters away.
void axesFor(const Operand &op, const std::string &order,
             const Extents &extents, std::vector<Axis> &kept,
             std::vector<Axis> &summed) {
  std::vector<int64_t> strides(op.shape.size());
  int64_t stride = 1;
  for (size_t d = op.shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= op.shape[d];
  }
  // A letter's stride is the sum over its dims: a repeated letter walks the
  // diagonal.
  auto axisOf = [&](char c) {
    Axis axis{extents[static_cast<unsigned char>(c)], 0};
    for (size_t d = 0; d < op.letters.size(); ++d)
      if (op.letters[d] == c)
        axis.stride += strides[d];
    return axis;
  };
  kept.clear();
  summed.clear();
  for (char c : order)
    kept.push_back(axisOf(c));
  for (char c : uniqueLetters(op.letters))
    if (!has(order, c))
      summed.push_back(axisOf(c));
}

/// Whether `op` already is the tensor with dims `order`: no copy needed.
bool laidOutAs(const Operand &op, const std::string &order) {
  return op.letters == order;
}

/// Makes `op` the tensor with dims `order`: itself when it already is, else
/// a gather into `storage`.
const float *prepare(const Operand &op, const std::string &order,
                     const Extents &extents, std::vector<float> &storage) {
  if (laidOutAs(op, order))
    return op.data;
  std::vector<Axis> kept, summed;
  axesFor(op, order, extents, kept, summed);
  int64_t size = 1;
  for (const Axis &axis : kept)
    size *= axis.extent;
  storage.resize(size);
  gatherSum(op.data, storage.data(), kept, summed);
  return storage.data();
}

int64_t extentOf(const std::string &letters, const Extents &extents) {
  int64_t n = 1;
  for (char c : letters)
    n *= extents[static_cast<unsigned char>(c)];
  return n;
}

/// The parsed equation: input letters and output letters.
struct Equation {
  std::vector<std::string> inputs;
  std::string output;
};

Equation parseEquation(const std::string &text, size_t numInputs) {
  Equation eq;
  std::string spec;
  for (char c : text)
    if (c != ' ')
      spec += c;
  size_t arrow = spec.find("->");
  std::string lhs = spec.substr(0, arrow);
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    eq.inputs.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  BMRT_CHECK(eq.inputs.size() == numInputs,
             "einsum '" + text + "' names " + std::to_string(eq.inputs.size()) +
                 " inputs but has " + std::to_string(numInputs));
  if (arrow != std::string::npos) {
    eq.output = spec.substr(arrow + 2);
  } else {
    // numpy's implicit output: the letters used once, in ASCII order (upper
    // case before lower case, as numpy).
    std::array<int, 128> uses{};
    for (const std::string &in : eq.inputs)
      for (char c : in)
        ++uses[static_cast<unsigned char>(c)];
    for (int c = 0; c < 128; ++c)
      if (uses[c] == 1)
        eq.output += static_cast<char>(c);
  }
  auto valid = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  };
  for (const std::string &in : eq.inputs)
    for (char c : in)
      BMRT_CHECK(valid(c), "einsum '" + text + "': '" + std::string(1, c) +
                               "' is not a letter (no ellipsis support)");
  for (char c : eq.output)
    BMRT_CHECK(valid(c) && eq.output.find(c) == eq.output.rfind(c),
               "einsum '" + text + "': bad output letter '" +
                   std::string(1, c) + "'");
  return eq;
}

/// The result of contracting a pair: `letters` of `data` (in `storage`
/// unless written straight to the kernel's output).
struct Contracted {
  Operand operand;
  std::vector<float> storage;
};

/// Contracts a and b into a tensor over the letters in `keep` that they
/// hold. Letters of both in `keep` are the GEMM's batch, letters of both
/// not in `keep` its K; letters of one (in `keep`) its M or N; letters of
/// one not in `keep` are summed away while gathering. With `finalOut`, the
/// result is the einsum's output with letters `keep` and goes there.
void contractPair(const Operand &a, const Operand &b, const std::string &keep,
                  const Extents &extents, float *finalOut, Contracted &result) {
  std::string ua = uniqueLetters(a.letters), ub = uniqueLetters(b.letters);
  bool final = finalOut != nullptr;
  auto inKeep = [&](char c) { return has(keep, c); };
  // Group orders: the output's order for the final step, so that the GEMM
  // can write the output in place; else the operands' own orders.
  std::string batch = select(ub, final ? keep : ua,
                             [&](char c) { return has(ua, c) && inKeep(c); });
  std::string freeA = select(ua, final ? keep : ua,
                             [&](char c) { return !has(ub, c) && inKeep(c); });
  std::string freeB = select(ub, final ? keep : ub,
                             [&](char c) { return !has(ua, c) && inKeep(c); });

  // The output laid out [batch, freeB, freeA] is the transposed product:
  // swap the operands instead of permuting the result.
  bool swap =
      final && keep != batch + freeA + freeB && keep == batch + freeB + freeA;
  const Operand &left = swap ? b : a, &right = swap ? a : b;
  const std::string &mLetters = swap ? freeB : freeA;
  const std::string &nLetters = swap ? freeA : freeB;
  std::string uLeft = swap ? ub : ua, uRight = swap ? ua : ub;

  // K's order: as in the left or the right operand, whichever needs fewer
  // elements copied (each operand may be read transposed as it is).
  auto contracted = [&](const std::string &order) {
    return select(uLeft, order,
                  [&](char c) { return has(uRight, c) && !inKeep(c); });
  };
  auto leftCopy = [&](const std::string &k) {
    bool asIs = laidOutAs(left, batch + mLetters + k) ||
                laidOutAs(left, batch + k + mLetters);
    return asIs ? 0 : extentOf(batch + mLetters + k, extents);
  };
  auto rightCopy = [&](const std::string &k) {
    bool asIs = laidOutAs(right, batch + k + nLetters) ||
                laidOutAs(right, batch + nLetters + k);
    return asIs ? 0 : extentOf(batch + k + nLetters, extents);
  };
  std::string kByLeft = contracted(uLeft), kByRight = contracted(uRight);
  std::string k = leftCopy(kByLeft) + rightCopy(kByLeft) <=
                          leftCopy(kByRight) + rightCopy(kByRight)
                      ? kByLeft
                      : kByRight;

  GemmShape g;
  g.m = extentOf(mLetters, extents);
  g.n = extentOf(nLetters, extents);
  g.k = extentOf(k, extents);
  std::vector<float> leftStorage, rightStorage;
  const float *leftData, *rightData;
  if (laidOutAs(left, batch + k + mLetters) && !mLetters.empty() &&
      !k.empty()) {
    g.transA = true;
    leftData = left.data;
  } else {
    leftData = prepare(left, batch + mLetters + k, extents, leftStorage);
  }
  if (laidOutAs(right, batch + nLetters + k) && !nLetters.empty() &&
      !k.empty()) {
    g.transB = true;
    rightData = right.data;
  } else {
    rightData = prepare(right, batch + k + nLetters, extents, rightStorage);
  }
  g.lda = g.transA ? g.m : g.k;
  g.ldb = g.transB ? g.k : g.n;
  g.ldc = g.n;

  std::string resultLetters = batch + mLetters + nLetters;
  int64_t resultSize = extentOf(resultLetters, extents);
  bool inPlace = final && resultLetters == keep;
  float *resultData = finalOut;
  if (!inPlace) {
    result.storage.resize(resultSize);
    resultData = result.storage.data();
  }
  int64_t aMatrix = g.m * g.k, bMatrix = g.k * g.n, cMatrix = g.m * g.n;
  gemmBatch(g, extentOf(batch, extents), leftData, rightData, resultData,
            [&](int64_t i, int64_t &aOff, int64_t &bOff, int64_t &cOff) {
              aOff = i * aMatrix;
              bOff = i * bMatrix;
              cOff = i * cMatrix;
            });

  result.operand.letters = resultLetters;
  result.operand.shape.clear();
  for (char c : resultLetters)
    result.operand.shape.push_back(extents[static_cast<unsigned char>(c)]);
  result.operand.data = resultData;
  if (final && !inPlace) {
    // The output interleaves the groups: one more permuting copy.
    std::vector<Axis> kept, summed;
    axesFor(result.operand, keep, extents, kept, summed);
    gatherSum(resultData, finalOut, kept, summed);
  }
}

} // namespace

void einsum(Stream &, const std::string &equation,
            const std::vector<TensorView> &inputs, const TensorView &out) {
  Equation eq = parseEquation(equation, inputs.size());
  BMRT_CHECK(!inputs.empty(), "einsum '" + equation + "' has no inputs");

  Extents extents{};
  std::vector<Operand> operands(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    BMRT_CHECK(static_cast<int64_t>(eq.inputs[i].size()) == inputs[i].rank(),
               "einsum '" + equation + "': input " + std::to_string(i) +
                   " has rank " + std::to_string(inputs[i].rank()));
    operands[i] = {inputs[i].f32(), eq.inputs[i], inputs[i].shape};
    for (size_t d = 0; d < eq.inputs[i].size(); ++d)
      extents[static_cast<unsigned char>(eq.inputs[i][d])] = inputs[i].shape[d];
  }
  for (char c : eq.output) {
    bool used = false;
    for (const std::string &in : eq.inputs)
      used |= has(in, c);
    BMRT_CHECK(used, "einsum '" + equation + "': output letter '" +
                         std::string(1, c) + "' is in no input");
  }

  if (operands.size() == 1) {
    // Transpose, diagonal and sums: one strided walk.
    std::vector<Axis> kept, summed;
    axesFor(operands[0], eq.output, extents, kept, summed);
    gatherSum(operands[0].data, out.f32(), kept, summed);
    return;
  }

  // Left to right: the running result keeps the letters the output or a
  // later input still needs.
  Contracted running[2];
  Operand acc = operands[0];
  for (size_t i = 1; i < operands.size(); ++i) {
    bool last = i + 1 == operands.size();
    std::string keep = eq.output;
    for (size_t j = i + 1; j < operands.size(); ++j)
      for (char c : uniqueLetters(eq.inputs[j]))
        if (!has(keep, c))
          keep += c;
    Contracted &next = running[i % 2];
    contractPair(acc, operands[i], keep, extents, last ? out.f32() : nullptr,
                 next);
    acc = next.operand;
  }
}

} // namespace bmrt::cpu
