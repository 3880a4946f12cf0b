//===- Overlap.cpp - how much of a gradient all-reduce hides behind compute ===//
//
// The trainer's overlapped gradient reduction starts an all-reduce
// non-blocking and polls it once between consecutive instructions; MPI
// moves the data only inside MPI calls (no progress thread), so what hides
// depends on how often it is polled. This measures the same pattern:
//   T_ar   a blocking all-reduce of 4 MiB (a gradient bucket),
//   T_c    a run of GEMMs lasting about as long,
//   T_both the all-reduce started with Communicator::allReduceAsync, the
//          same GEMMs with one test() between consecutive ones, wait() at
//          the end;
//   hidden = clamp((T_c + T_ar - T_both) / T_ar, 0, 1).
//
//===----------------------------------------------------------------------===//

#include "Calibrate.h"

#include "bmrt/SingleOp.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace bmrt::calibrate {
namespace {

/// A bucket of gradients: 4 MiB of fp32.
constexpr int64_t kFloats = int64_t(1) << 20;
/// The GEMMs between polls: 256^3 (34 MFLOP, 0.3 ms on one core here),
/// the scale of a small transformer's matmul instructions.
constexpr int64_t kGemmSize = 256;

/// T_both: the all-reduce started, `gemms` calls of `gemm` with one test
/// between consecutive ones, then the wait.
double overlappedSeconds(Bench &bench, float *gradients, int64_t gemms,
                         const std::function<void()> &gemm) {
  return bench.time([&] {
    PendingCollective reduction = bench.world().allReduceAsync(
        gradients, gradients, kFloats, DType::F32, bench.stream());
    for (int64_t i = 0; i < gemms; ++i) {
      if (i > 0)
        reduction.test();
      gemm();
    }
    reduction.wait();
  });
}

} // namespace

void measureOverlap(Bench &bench, nlohmann::ordered_json &out) {
  Stream &stream = bench.stream();
  Buffer gradients(bench.device(), kFloats);
  TensorType square{DType::F32, {kGemmSize, kGemmSize}};
  SingleOp matmul(bench.device(), {"matmul", {}, {square, square}, {square}, {}},
                  "calibration overlap");
  auto gemm = [&] { matmul.enqueue(); };
  double allReduce = bench.time([&] {
    bench.world().allReduce(gradients.data(), gradients.data(), kFloats,
                            DType::F32, stream);
  });
  int64_t gemms =
      std::max<int64_t>(2, std::llround(allReduce / bench.time(gemm)));
  double compute = bench.time([&] {
    for (int64_t i = 0; i < gemms; ++i)
      gemm();
  });
  double both = overlappedSeconds(bench, gradients.data(), gemms, gemm);
  double hidden =
      std::clamp((compute + allReduce - both) / allReduce, 0.0, 1.0);
  out["overlap"] = {{"grad_reduce", hidden}};
  char line[200];
  std::snprintf(line, sizeof line,
                "overlap: all_reduce 4 MiB %.2f ms, %lld GEMMs of %lld^3 "
                "%.2f ms, both %.2f ms: %.2f hidden",
                allReduce * 1e3, static_cast<long long>(gemms),
                static_cast<long long>(kGemmSize), compute * 1e3, both * 1e3,
                hidden);
  bench.progress(line);
}

} // namespace bmrt::calibrate
