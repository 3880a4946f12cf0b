//===- MeasurementsTest.cpp - bmrt-calibrate's JSON into a cluster ---------===//

#include "cost/Measurements.h"
#include "cost/CostModel.h"

#include "llvm/Support/FormatVariadic.h"
#include "gtest/gtest.h"

#include <string>

using namespace bm::cost;

namespace {

/// What bmrt-calibrate writes for two ranks on one host: a 2 x 2 x 2 GEMM
/// grid, the kernel classes, an all-reduce at two sizes.
/// With `twoRanks` false, what one rank writes: no collectives, no overlap.
std::string measurements(bool twoRanks = true) {
  std::string gemm;
  for (int m : {16, 256})
    for (int n : {16, 256})
      for (int k : {16, 256})
        gemm += llvm::formatv(R"({{"m": {0}, "n": {1}, "k": {2}, "seconds": 1e-5,
                                 "flops_per_second": {3}},)",
                              m, n, k, 1e9 * (m + n + k))
                    .str();
  gemm.pop_back();
  std::string kernels;
  for (const char *name : {"data_movement", "elementwise", "normalization",
                           "optimizer", "reduction", "softmax"})
    kernels += llvm::formatv(R"({{"class": "{0}", "bytes": 1e8, "seconds": 0.1,
                                 "bytes_per_second": 1e9},)",
                             name)
                   .str();
  kernels.pop_back();
  return R"({"format": "bmrt-calibration-1", "date": "2026-11-23T18:00:00Z",
    "machine": {"host": "box", "cpu": "Some CPU", "cores": 2,
                "memory_bytes": 8589934592, "hosts": 1},
    "versions": {"openblas": "0.3.21", "mpi": "Open MPI v4.1.4"},
    "ranks": )" + std::string(twoRanks ? "2" : "1") + R"(, "threads_per_rank": 1,
    "gemm": [)" + gemm + R"(],
    "memory": {"stream_copy_bytes_per_second": 8e9},
    "kernels": [)" + kernels + "]" + (twoRanks ? R"(,
    "collectives": [
      {"kind": "all_reduce", "ranks": 2, "bytes": 4, "seconds": 4e-6,
       "algbw_bytes_per_second": 1e6, "busbw_bytes_per_second": 1e6},
      {"kind": "all_reduce", "ranks": 2, "bytes": 67108864, "seconds": 0.02,
       "algbw_bytes_per_second": 3.3e9, "busbw_bytes_per_second": 3.3e9}],
    "overlap": {"grad_reduce": 0.25})" : "") + "}";
}

std::string errorOf(const std::string &json) {
  auto cluster = clusterFromMeasurements(json, "m.json");
  return cluster ? std::string() : llvm::toString(cluster.takeError());
}

} // namespace

TEST(MeasurementsTest, FitsTheFlatKeysAndKeepsTheCurves) {
  Cluster c = llvm::cantFail(clusterFromMeasurements(measurements(), "m.json"));
  EXPECT_EQ(c.name, "calibrated-box");
  EXPECT_EQ(c.gpusPerNode, 2);
  EXPECT_DOUBLE_EQ(c.memoryBytes, 4.0 * kGiB);
  EXPECT_EQ(c.precision, "fp32");
  // The fastest GEMM is the peak; links from the all-reduce curve: the
  // largest message's bus bandwidth, the smallest's time per ring step.
  EXPECT_DOUBLE_EQ(c.peakFlops32, 1e9 * 768);
  EXPECT_DOUBLE_EQ(c.intraNode.busBandwidth, 3.3e9);
  EXPECT_DOUBLE_EQ(c.intraNode.latency, 2e-6);
  EXPECT_DOUBLE_EQ(c.gradReduceOverlap, 0.25);
  EXPECT_EQ(c.calibration.gemm.size(), 8u);
  EXPECT_EQ(c.calibration.collectives.size(), 2u);
  EXPECT_EQ(c.calibration.versions.at("openblas"), "0.3.21");
  // The cost model reads the measured GEMM rate at a grid point.
  CostModel model(c, Precision::Fp32);
  EXPECT_NEAR(model.gemmTime(2.0 * 16 * 256 * 256, 16, 256, 256),
              2.0 * 16 * 256 * 256 / (1e9 * 528), 1e-15);
}

TEST(MeasurementsTest, TheClusterFileRoundTrips) {
  Cluster c = llvm::cantFail(clusterFromMeasurements(measurements(), "m.json"));
  Cluster again = llvm::cantFail(
      parseCluster(writeClusterYaml(c), /*isYaml=*/true, "again.yaml"));
  EXPECT_TRUE(c == again);
}

TEST(MeasurementsTest, OneRankMeasuresNoLinkAndNoOverlap) {
  Cluster c = llvm::cantFail(
      clusterFromMeasurements(measurements(/*twoRanks=*/false), "m.json"));
  EXPECT_EQ(c.gradReduceOverlap, 0);
  EXPECT_DOUBLE_EQ(c.intraNode.busBandwidth, 4e9);
}

// bmrt-calibrate measures what offloading the optimizer costs (issue 29):
// files with the three keys give a cluster that offloads at those rates,
// files without them (older ones) a cluster that does not.
TEST(MeasurementsTest, HostRatesWhereMeasured) {
  Cluster without =
      llvm::cantFail(clusterFromMeasurements(measurements(), "m.json"));
  EXPECT_FALSE(without.canOffload());
  EXPECT_EQ(without.hostMemoryBytes, 0);
  EXPECT_EQ(without.hostOptimizerBandwidth, 0);
  std::string json = measurements();
  // The CPU backend's: its device memory is the host's, none apart.
  json.insert(json.rfind('}'), R"(, "host_link_gbps": 6.5,
    "host_optimizer_gbps": 3.25, "host_memory_gib": 0)");
  Cluster with = llvm::cantFail(clusterFromMeasurements(json, "m.json"));
  EXPECT_TRUE(with.canOffload());
  EXPECT_DOUBLE_EQ(with.hostLinkBandwidth, 6.5e9);
  EXPECT_DOUBLE_EQ(with.hostOptimizerBandwidth, 3.25e9);
  EXPECT_EQ(with.hostMemoryBytes, 0);
  EXPECT_TRUE(with.offloadSharesDeviceMemory());
  std::string apart = measurements();
  apart.insert(apart.rfind('}'), R"(, "host_link_gbps": 6.5,
    "host_optimizer_gbps": 3.25, "host_memory_gib": 2)");
  Cluster device = llvm::cantFail(clusterFromMeasurements(apart, "m.json"));
  EXPECT_DOUBLE_EQ(device.hostMemoryBytes, 2 * kGiB);
  EXPECT_FALSE(device.offloadSharesDeviceMemory());
  EXPECT_TRUE(llvm::cantFail(parseCluster(writeClusterYaml(with), true,
                                          "again.yaml")) == with);
  std::string negative = measurements();
  negative.insert(negative.rfind('}'), R"(, "host_link_gbps": -1)");
  EXPECT_EQ(errorOf(negative),
            "m.json: 'host_link_gbps' must be a non-negative number");
  std::string noStep = measurements();
  noStep.insert(noStep.rfind('}'), R"(, "host_link_gbps": 6.5)");
  EXPECT_EQ(errorOf(noStep),
            "m.json: host_link_gbps is 6.5 but host_optimizer_gbps is 0: "
            "offloading the optimizer needs the host's step rate (without "
            "host_link_gbps, or with it 0, the cluster does not offload)");
}

TEST(MeasurementsTest, BadMeasurementsAreOneLine) {
  EXPECT_NE(errorOf("{").find("m.json: not the JSON bmrt-calibrate writes"),
            std::string::npos);
  EXPECT_EQ(errorOf("[]"), "m.json: expected a JSON object");
  EXPECT_EQ(errorOf(R"({"format": "other"})"),
            "m.json: 'format' must be \"bmrt-calibration-1\"");
  std::string noCopy = measurements();
  noCopy.replace(noCopy.find("stream_copy"), 4, "strm");
  EXPECT_EQ(errorOf(noCopy),
            "m.json: missing 'memory.stream_copy_bytes_per_second'");
  std::string badClass = measurements();
  badClass.replace(badClass.find("\"softmax\""), 9, "\"sofmax\"");
  EXPECT_EQ(errorOf(badClass), "m.json: unknown kernel class 'sofmax'");
  std::string negative = measurements();
  negative.replace(negative.find("\"seconds\": 0.02"), 15, "\"seconds\": -1");
  EXPECT_EQ(errorOf(negative),
            "m.json: 'collectives[1].seconds' must be a non-negative number");
}

namespace {

/// measurements() with a spread on each GEMM point, kernel class, the copy
/// and each collective, as bmrt-calibrate writes them since issue 24.
std::string measurementsWithSpread() {
  std::string text = measurements();
  auto addAfter = [&](const std::string &key, const std::string &spread) {
    for (size_t at = text.find(key); at != std::string::npos;
         at = text.find(key, at + 1)) {
      size_t end = text.find_first_of(",}", at + key.size());
      text.insert(end, ", \"spread\": " + spread);
    }
  };
  addAfter("\"flops_per_second\":", "0.02");
  addAfter("\"bytes_per_second\": 1e9", "0.04");
  addAfter("\"busbw_bytes_per_second\":", "0.3");
  size_t copy = text.find("8e9");
  text.insert(copy + 3, ", \"stream_copy_spread\": 0.01");
  return text;
}

} // namespace

TEST(MeasurementsTest, KeepsTheSpreadOfEveryPointAndSummarizesIt) {
  Cluster c = llvm::cantFail(
      clusterFromMeasurements(measurementsWithSpread(), "m.json"));
  const Calibration &cal = c.calibration;
  ASSERT_TRUE(cal.gemm.front().spread.has_value());
  EXPECT_DOUBLE_EQ(*cal.gemm.front().spread, 0.02);
  ASSERT_TRUE(cal.collectives.front().spread.has_value());
  EXPECT_DOUBLE_EQ(*cal.collectives.front().spread, 0.3);
  EXPECT_DOUBLE_EQ(cal.spread.at("gemm"), 0.02);
  EXPECT_DOUBLE_EQ(cal.spread.at("memory"), 0.04);
  EXPECT_DOUBLE_EQ(cal.spread.at("collectives"), 0.3);
  EXPECT_DOUBLE_EQ(cal.spread.at("largest"), 0.3);
  // The copy (0.01), 8 GEMM points (0.02), 6 kernel classes (0.04), 2
  // collectives (0.3): the 9th of the 17 is a GEMM point's.
  EXPECT_DOUBLE_EQ(cal.spread.at("median"), 0.02);
  Cluster again = llvm::cantFail(
      parseCluster(writeClusterYaml(c), /*isYaml=*/true, "again.yaml"));
  EXPECT_TRUE(c == again) << writeClusterYaml(c);
}

TEST(MeasurementsTest, MeasurementsWithoutSpreadHaveNone) {
  Cluster c = llvm::cantFail(clusterFromMeasurements(measurements(), "m.json"));
  EXPECT_TRUE(c.calibration.spread.empty());
  EXPECT_FALSE(c.calibration.gemm.front().spread.has_value());
  std::string text = writeClusterYaml(c);
  EXPECT_EQ(text.find("spread:"), std::string::npos) << text;
  EXPECT_NE(text.find("  - [16, 16, 16, 0.048]\n"), std::string::npos) << text;
}

TEST(MeasurementsTest, SummarizeSpreadTakesTheMedianOfAnEvenCount) {
  std::vector<GemmPoint> gemm(2);
  gemm[0].spread = 0.1;
  gemm[1].spread = 0.3;
  std::map<std::string, double> summary = summarizeSpread(gemm, {0.2, 0.0}, {});
  EXPECT_DOUBLE_EQ(summary.at("gemm"), 0.3);
  EXPECT_DOUBLE_EQ(summary.at("memory"), 0.2);
  EXPECT_EQ(summary.count("collectives"), 0u);
  EXPECT_DOUBLE_EQ(summary.at("largest"), 0.3);
  EXPECT_DOUBLE_EQ(summary.at("median"), 0.15);
  EXPECT_TRUE(summarizeSpread({GemmPoint{}}, {}, {}).empty());
}
