//===- MeasuredCurvesTest.cpp - the cost model on a calibrated cluster ----===//
//
// The semantics of section B of issue 15 on the synthetic curves of
// SyntheticCalibration.h, whose answers are known in closed form. Times are
// compared to a relative 1e-12: the interpolation is a few exp / log / log2
// calls away from the closed form, i.e. rounding only.
//
//===----------------------------------------------------------------------===//

#include "cost/CostModel.h"
#include "cost/test/SyntheticCalibration.h"

#include "gtest/gtest.h"

using namespace bm::cost;
using bm::cost::test::syntheticCalibratedYaml;
using bm::cost::test::syntheticGemmTflops;

namespace {

constexpr double kRelative = 1e-12;

Cluster calibrated() {
  return llvm::cantFail(
      parseCluster(syntheticCalibratedYaml(), true, "lab.yaml"));
}

Cluster uncalibrated() {
  Cluster c = calibrated();
  c.calibration = Calibration();
  return c;
}

void expectRelative(double actual, double expected) {
  EXPECT_NEAR(actual, expected, kRelative * expected);
}

TEST(MeasuredCurvesTest, GemmExactAtGridPoints) {
  CostModel model(calibrated(), Precision::Fp32);
  for (double m : {16, 256})
    for (double n : {16, 256})
      for (double k : {16, 256}) {
        double flops = 2 * m * n * k;
        expectRelative(model.gemmTime(flops, m, n, k),
                       flops / (syntheticGemmTflops(m, n, k) * 1e12));
      }
}

// The synthetic rate is linear in log2 of the sizes, which multilinear
// interpolation reproduces between grid points.
TEST(MeasuredCurvesTest, GemmInterpolatesInLogSizes) {
  CostModel model(calibrated(), Precision::Fp32);
  double flops = 1e6;
  expectRelative(model.gemmTime(flops, 64, 16, 16),
                 flops / (syntheticGemmTflops(64, 16, 16) * 1e12));
  expectRelative(model.gemmTime(flops, 100, 30, 200),
                 flops / (syntheticGemmTflops(100, 30, 200) * 1e12));
  // gemmEfficiency reports the measured rate against the fp32 peak.
  expectRelative(model.gemmEfficiency(64, 64, 64),
                 syntheticGemmTflops(64, 64, 64) * 1e12 / 0.5e12);
}

TEST(MeasuredCurvesTest, GemmClampsToTheGrid) {
  CostModel model(calibrated(), Precision::Fp32);
  double flops = 1e6;
  expectRelative(model.gemmTime(flops, 4, 16, 16),
                 flops / (syntheticGemmTflops(16, 16, 16) * 1e12));
  expectRelative(model.gemmTime(flops, 1 << 20, 4096, 1),
                 flops / (syntheticGemmTflops(256, 256, 16) * 1e12));
}

TEST(MeasuredCurvesTest, MemoryKernelClassesAndFallback) {
  Cluster cluster = calibrated();
  CostModel model(cluster, Precision::Fp32);
  double bytes = 1e9;
  expectRelative(model.memoryTime(bytes, MemoryKernelClass::Elementwise),
                 bytes / 4e9);
  expectRelative(model.memoryTime(bytes), bytes / 4e9);
  expectRelative(model.memoryTime(bytes, MemoryKernelClass::Softmax),
                 bytes / 1e9);
  // Not measured: the streaming rate of the flat keys.
  expectRelative(model.memoryTime(bytes, MemoryKernelClass::Normalization),
                 bytes / (20e9 * cluster.memoryEfficiency));
  EXPECT_EQ(model.memoryTime(0, MemoryKernelClass::Softmax), 0);
}

TEST(MeasuredCurvesTest, CollectivesInterpolateInLogLog) {
  CostModel model(calibrated(), Precision::Fp32);
  CommGroup pair{2, 2, false};
  auto allReduce = [&](double bytes) {
    return model.collectiveTime(CollectiveKind::AllReduce, bytes, pair);
  };
  expectRelative(allReduce(1024), 10e-6);
  expectRelative(allReduce(1048576), 1000e-6);
  // Halfway in log(bytes) between 1 KiB and 1 MiB: halfway in log(time).
  expectRelative(allReduce(32768), 100e-6);
  // Below the smallest size: its time.
  expectRelative(allReduce(4), 10e-6);
  // Above the largest: its time, plus the extra bytes at its busbw with the
  // all-reduce factor 2(n-1)/n = 1 for n = 2.
  expectRelative(allReduce(2 * 1048576), 2000e-6);
  expectRelative(model.sendRecvTime(1024, false), 5e-6);
  expectRelative(model.sendRecvTime(2048, false), 5e-6 + 1024 / 0.2048e9);
}

TEST(MeasuredCurvesTest, CollectivesWithoutEntriesStayAnalytic) {
  CostModel measured(calibrated(), Precision::Fp32);
  CostModel analytic(uncalibrated(), Precision::Fp32);
  double bytes = 1 << 20;
  // Another kind, another group size, another link.
  CommGroup pair{2, 2, false}, four{4, 2, true}, crossing{2, 1, true};
  for (auto [kind, group] : {std::pair{CollectiveKind::AllGather, pair},
                             std::pair{CollectiveKind::AllReduce, four},
                             std::pair{CollectiveKind::AllReduce, crossing}})
    EXPECT_DOUBLE_EQ(measured.collectiveTime(kind, bytes, group),
                     analytic.collectiveTime(kind, bytes, group));
  EXPECT_DOUBLE_EQ(measured.sendRecvTime(bytes, true),
                   analytic.sendRecvTime(bytes, true));
  // Without a grid the GEMM curve is the analytic one.
  EXPECT_DOUBLE_EQ(analytic.gemmEfficiency(64, 64, 64),
                   uncalibrated().gemmEfficiency * std::pow(64.0 / 112, 3));
}

TEST(MeasuredCurvesTest, PrecisionDefaultsToTheClusters) {
  Cluster cluster = calibrated();
  EXPECT_EQ(defaultPrecision(cluster), Precision::Fp32);
  cluster.precision = "";
  EXPECT_EQ(defaultPrecision(cluster), Precision::Bf16Mixed);
  cluster.peakFlopsBf16 = 0;
  EXPECT_EQ(defaultPrecision(cluster), Precision::Fp16Mixed);
}

} // namespace
