//===- kernel_gemm_bench.cpp - bmrt's GEMMs against OpenBLAS, direct ------===//
//
// Every contraction of a step program ends in cblas_sgemm, so the runtime's
// matmul and gemm should run at OpenBLAS's speed: what they add (shape
// bookkeeping, folding a batch into M, the loop over a broadcast batch,
// spreading Gemm's bias over the output) is the framework's overhead, and
// this measures it. Each shape is timed through bmrt::cpu::matmul / gemm and
// through cblas_sgemm on the same buffers, at 1 and 2 threads
// (bmrt::cpu::setThreads sets OpenBLAS's count for both); the summary prints
// GFLOP/s of both and the time ratio runtime/direct.
//
//   build/bin/kernel_gemm_bench [--benchmark_filter=mlp]
//
// By default every benchmark runs 10 short repetitions (0.1 s), all of them
// in one random order (a burst of load on the shared machine then hits both
// sides alike), and the summary uses each benchmark's best.
//
//===----------------------------------------------------------------------===//

#include "bmrt/Backend.h"
#include "bmrt/Device.h"
#include "runtime/cpu/Kernels.h"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace bmrt;

namespace {

/// Overhead the runtime may add to the same GEMM called directly before the
/// summary says MISSED.
constexpr double kTargetRatio = 1.05;

/// One benchmarked contraction: out[batch, M, N] = a[batch, M, K] b[bBatch,
/// K, N] (+ bias[N] when `bias`), row-major, no transposes.
struct Case {
  const char *name;
  int64_t batch, m, k, n;
  /// b has its own matrix per batch entry (attention) or one shared (a
  /// linear layer: the batch folds into M).
  bool batchedB;
  /// The runtime side is ONNX Gemm with a bias row instead of matmul.
  bool bias;

  double flops() const { return 2.0 * batch * m * n * k; }
};

/// Square GEMMs, then GPT-2-small's shapes at 8 sequences of 1024 tokens:
/// the MLP's up and down projections and the attention scores of 8 x 12
/// heads.
const Case kCases[] = {
    {"square_256", 1, 256, 256, 256, false, false},
    {"square_512", 1, 512, 512, 512, false, false},
    {"square_1024", 1, 1024, 1024, 1024, false, false},
    {"mlp_up_8x1024x768x3072", 8, 1024, 768, 3072, false, false},
    {"mlp_down_8x1024x3072x768", 8, 1024, 3072, 768, false, false},
    {"attn_scores_96x1024x64x1024", 96, 1024, 64, 1024, true, false},
    {"gemm_bias_8192x768x3072", 1, 8192, 768, 3072, false, true},
};

const int kThreadCounts[] = {1, 2};

/// Operands in device memory (64-byte aligned, as a step program's), filled
/// with uniform values in [-1, 1) so no denormals slow either side.
struct Operands {
  explicit Operands(const Case &c) : device(createDevice("cpu")) {
    Shape aShape = {c.batch, c.m, c.k};
    Shape bShape = c.batchedB ? Shape{c.batch, c.k, c.n} : Shape{c.k, c.n};
    if (c.bias) // ONNX Gemm is 2-D.
      aShape = {c.batch * c.m, c.k};
    a = make(aShape);
    b = make(bShape);
    out = make(c.bias ? Shape{c.batch * c.m, c.n} : Shape{c.batch, c.m, c.n});
    bias = make({c.n});
  }
  ~Operands() {
    for (TensorView *v : {&a, &b, &out, &bias})
      device->deallocate(v->data, v->bytes(), MemoryKind::Workspace);
  }
  Operands(const Operands &) = delete;
  Operands &operator=(const Operands &) = delete;

  TensorView make(const Shape &shape) {
    TensorView v{nullptr, DType::F32, shape};
    v.data = device->allocate(v.bytes(), MemoryKind::Workspace);
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    std::generate(v.f32(), v.f32() + v.size(), [&] { return uniform(rng); });
    return v;
  }

  std::unique_ptr<Device> device;
  std::mt19937 rng{42};
  TensorView a, b, out, bias;
};

/// The runtime's kernel, as a step program's instruction would call it.
void runRuntime(const Case &c, Operands &ops) {
  Stream &stream = ops.device->computeStream();
  if (c.bias)
    cpu::gemm(stream, ops.a, ops.b, &ops.bias, ops.out, 1.f, 1.f, false,
              false);
  else
    cpu::matmul(stream, ops.a, ops.b, ops.out);
}

/// The least a caller of OpenBLAS has to do for the same result: one GEMM
/// when b is shared (the batch is more rows), else one per batch entry; with
/// a bias, copy it into every row and let the GEMM add to it (beta = 1).
void runDirect(const Case &c, Operands &ops) {
  const float *a = ops.a.f32(), *b = ops.b.f32();
  float *out = ops.out.f32();
  if (!c.batchedB) {
    int64_t rows = c.batch * c.m;
    if (c.bias)
      for (int64_t i = 0; i < rows; ++i)
        std::memcpy(out + i * c.n, ops.bias.f32(), c.n * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, c.n, c.k,
                1.f, a, c.k, b, c.n, c.bias ? 1.f : 0.f, out, c.n);
    return;
  }
  for (int64_t i = 0; i < c.batch; ++i)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c.m, c.n, c.k, 1.f,
                a + i * c.m * c.k, c.k, b + i * c.k * c.n, c.n, 0.f,
                out + i * c.m * c.n, c.n);
}

void benchmarkCase(benchmark::State &state, const Case &c, int threads,
                   bool runtime) {
  cpu::setThreads(threads);
  Operands ops(c);
  for (auto _ : state) {
    if (runtime)
      runRuntime(c, ops);
    else
      runDirect(c, ops);
    benchmark::DoNotOptimize(ops.out.data);
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP"] = benchmark::Counter(
      c.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

std::string benchmarkName(const Case &c, int threads, bool runtime) {
  return std::string(runtime ? "runtime/" : "direct/") + c.name +
         "/threads:" + std::to_string(threads);
}

double minimum(const std::vector<double> &values) {
  return *std::min_element(values.begin(), values.end());
}

/// Runtime and direct of one shape and thread count, registered next to each
/// other. Each also reports the best of its repetitions.
void registerBenchmarks() {
  for (int threads : kThreadCounts)
    for (const Case &c : kCases)
      for (bool runtime : {true, false})
        benchmark::RegisterBenchmark(benchmarkName(c, threads, runtime).c_str(),
                                     benchmarkCase, c, threads, runtime)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->ComputeStatistics("min", minimum);
}

/// The console report, then the summary. Each benchmark's time is the best
/// of its repetitions (the "min" statistic), or its one run: on two cores
/// shared with other jobs a repetition runs either alone or with a core
/// taken, and the best is the kernel's own speed (as bench/plan_bench's
/// best of N rounds).
class SummaryReporter : public benchmark::ConsoleReporter {
public:
  // Tabular without colour: the output is often kept in a file.
  SummaryReporter() : ConsoleReporter(OO_Tabular) {}

  void ReportRuns(const std::vector<Run> &runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run &run : runs) {
      if (run.error_occurred)
        continue;
      // Milliseconds per iteration (the unit every benchmark uses).
      double ms = run.GetAdjustedRealTime();
      const std::string &name = run.run_name.function_name;
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "min")
        bestMs[name] = ms;
      else if (run.run_type == Run::RT_Iteration && !bestMs.count(name))
        bestMs.emplace(name, ms);
    }
  }

  void printSummary() const {
    std::printf("\n%-30s %7s %12s %12s %9s\n", "shape", "threads",
                "runtime GF/s", "direct GF/s", "rt/direct");
    bool allOk = true;
    for (int threads : kThreadCounts)
      for (const Case &c : kCases) {
        auto rt = bestMs.find(benchmarkName(c, threads, true));
        auto direct = bestMs.find(benchmarkName(c, threads, false));
        if (rt == bestMs.end() || direct == bestMs.end())
          continue; // filtered out
        double ratio = rt->second / direct->second;
        allOk &= ratio <= kTargetRatio;
        std::printf("%-30s %7d %12.1f %12.1f %9.3f %s\n", c.name, threads,
                    gflops(c, rt->second), gflops(c, direct->second), ratio,
                    ratio <= kTargetRatio ? "ok" : "MISSED");
      }
    std::printf("target: runtime/direct <= %.2f (the runtime adds at most "
                "%.0f%% to OpenBLAS): %s\n",
                kTargetRatio, (kTargetRatio - 1) * 100,
                allOk ? "ok" : "MISSED");
    // The kernels OpenBLAS chose for this CPU set both columns' speed; a CPU
    // it does not know gets an older core's (OPENBLAS_CORETYPE overrides).
    std::printf("OpenBLAS %s, core %s\n", openblas_get_config(),
                openblas_get_corename());
  }

private:
  static double gflops(const Case &c, double ms) {
    return c.flops() * 1e-9 / (ms * 1e-3);
  }

  /// An iteration run is replaced by the best once repetitions report it.
  std::map<std::string, double> bestMs;
};

} // namespace

int main(int argc, char **argv) {
  // Defaults for a shared, noisy machine (see the file's comment), with
  // only the statistics on screen. Flags on the command line come later and
  // win.
  static char repetitions[] = "--benchmark_repetitions=10";
  static char minTime[] = "--benchmark_min_time=0.1";
  static char interleave[] = "--benchmark_enable_random_interleaving=true";
  static char aggregates[] = "--benchmark_display_aggregates_only=true";
  std::vector<char *> args(argv, argv + argc);
  args.insert(args.begin() + 1, {repetitions, minTime, interleave, aggregates});
  int count = static_cast<int>(args.size());
  registerBenchmarks();
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data()))
    return 1;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.printSummary();
  benchmark::Shutdown();
  return 0;
}
