//===- CalibrationFileTest.cpp - the calibration keys of cluster files ----===//
//
// Reading the keys `bmc calibrate` writes (issue 15, section B) from YAML
// and JSON, one clear line for each kind of bad or partial file, and the
// writer: parse(write(c)) == c.
//
//===----------------------------------------------------------------------===//

#include "cost/Cluster.h"
#include "cost/test/SyntheticCalibration.h"

#include "gtest/gtest.h"

using namespace bm::cost;
using bm::cost::test::kSyntheticFlatKeys;
using bm::cost::test::syntheticCalibratedYaml;

namespace {

std::string errorOf(llvm::Expected<Cluster> cluster) {
  if (cluster)
    return "";
  return llvm::toString(cluster.takeError());
}

std::string errorOfYaml(const std::string &extra) {
  return errorOf(parseCluster(kSyntheticFlatKeys + extra, true, "lab.yaml"));
}

/// `text` with the first `from` replaced by `to`.
std::string replaced(std::string text, const std::string &from,
                     const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(CalibrationFileTest, ReadsEverySection) {
  Cluster c = cantFail(parseCluster(syntheticCalibratedYaml(), true, "l.yaml"));
  EXPECT_EQ(c.precision, "fp32");
  EXPECT_DOUBLE_EQ(c.gradReduceOverlap, 0.15);
  const Calibration &cal = c.calibration;
  EXPECT_TRUE(cal.present());
  EXPECT_EQ(cal.machine, "box (Xeon)");
  EXPECT_EQ(cal.date, "2026-11-23T18:00:00Z");
  EXPECT_EQ(cal.ranks, 2);
  EXPECT_EQ(cal.threadsPerRank, 1);
  EXPECT_EQ(cal.versions.at("openblas"), "0.3.21");
  ASSERT_EQ(cal.gemm.size(), 8u);
  EXPECT_DOUBLE_EQ(cal.gemm.back().m, 256);
  EXPECT_DOUBLE_EQ(cal.gemm.back().flopsPerSecond, 0.056e12);
  auto rate = [&](MemoryKernelClass k) {
    return cal.memoryKernelBandwidth[static_cast<int>(k)];
  };
  EXPECT_DOUBLE_EQ(rate(MemoryKernelClass::Elementwise), 4e9);
  EXPECT_DOUBLE_EQ(rate(MemoryKernelClass::Softmax), 1e9);
  EXPECT_EQ(rate(MemoryKernelClass::Normalization), 0);
  // Sorted by kind, then size.
  ASSERT_EQ(cal.collectives.size(), 3u);
  EXPECT_EQ(cal.collectives[0].kind, CollectiveKind::AllReduce);
  EXPECT_DOUBLE_EQ(cal.collectives[0].bytes, 1024);
  EXPECT_DOUBLE_EQ(cal.collectives[0].seconds, 10e-6);
  EXPECT_DOUBLE_EQ(cal.collectives[1].busBandwidth, 1.048576e9);
  EXPECT_EQ(cal.collectives[2].kind, CollectiveKind::SendRecv);
}

TEST(CalibrationFileTest, FlatFilesAndPresetsHaveNoCalibration) {
  Cluster flat = cantFail(parseCluster(kSyntheticFlatKeys, true, "f.yaml"));
  EXPECT_FALSE(flat.calibration.present());
  EXPECT_EQ(flat.precision, "");
  EXPECT_DOUBLE_EQ(flat.gradReduceOverlap, 1.0);
  for (const std::string &name : clusterPresetNames()) {
    Cluster preset = cantFail(getClusterPreset(name));
    EXPECT_FALSE(preset.calibration.present()) << name;
    EXPECT_DOUBLE_EQ(preset.gradReduceOverlap, 1.0) << name;
  }
}

TEST(CalibrationFileTest, JsonReadsTheSameKeys) {
  std::string json = R"x({"name": "lab", "gpu": "Xeon core", "gpus_per_node": 2,
    "peak_tflops_16bit": 1, "peak_tflops_fp32": 0.5, "memory_gib": 24,
    "hbm_gbps": 20, "intra_node_gbps": 5, "inter_node_gbps": 1,
    "precision": "fp32", "grad_reduce_overlap": 0.15,
    "calibration": {"machine": "box (Xeon)", "date": "2026-11-23T18:00:00Z",
      "ranks": 2, "threads_per_rank": 1,
      "versions": {"openblas": "0.3.21", "mpi": "Open MPI v4.1.4"}},
    "gemm_tflops": [)x";
  for (int m : {16, 256})
    for (int n : {16, 256})
      for (int k : {16, 256})
        json += "[" + std::to_string(m) + "," + std::to_string(n) + "," +
                std::to_string(k) + "," +
                std::to_string(test::syntheticGemmTflops(m, n, k)) + "]" +
                (m == 256 && n == 256 && k == 256 ? "" : ",");
  json += R"x(], "memory_kernel_gbps": {"elementwise": 4, "softmax": 1},
    "collectives": [
      {"op": "all_reduce", "link": "intra_node", "ranks": 2, "bytes": 1048576,
       "time_us": 1000, "busbw_gbps": 1.048576},
      {"op": "all_reduce", "link": "intra_node", "ranks": 2, "bytes": 1024,
       "time_us": 10, "busbw_gbps": 0.1024},
      {"op": "send_recv", "link": "intra_node", "ranks": 2, "bytes": 1024,
       "time_us": 5, "busbw_gbps": 0.2048}]})x";
  llvm::Expected<Cluster> fromJson = parseCluster(json, false, "lab.json");
  ASSERT_TRUE(!!fromJson) << llvm::toString(fromJson.takeError());
  Cluster fromYaml =
      cantFail(parseCluster(syntheticCalibratedYaml(), true, "lab.yaml"));
  EXPECT_TRUE(*fromJson == fromYaml);
  // A key repeated inside an entry is caught in JSON too.
  std::string repeated =
      replaced(json, R"("time_us": 5,)", R"("time_us": 5, "time_us": 6,)");
  EXPECT_EQ(errorOf(parseCluster(repeated, false, "lab.json")),
            "lab.json: key 'time_us' is given twice");
}

TEST(CalibrationFileTest, RoundTripsThroughTheWriter) {
  std::vector<Cluster> clusters;
  for (const std::string &name : clusterPresetNames())
    clusters.push_back(cantFail(getClusterPreset(name)));
  clusters.push_back(
      cantFail(parseCluster(syntheticCalibratedYaml(), true, "lab.yaml")));
  // Values whose decimal form is not short, and text to escape.
  Cluster odd = clusters.back();
  odd.name = "odd \"name\"\\ with\ttab";
  odd.intraNode.latency = 1.0 / 3 * 1e-6;
  odd.memoryBandwidth = 9.123456789012345e9;
  odd.calibration.collectives[0].seconds = 0.1 + 0.2;
  clusters.push_back(odd);
  for (const Cluster &c : clusters) {
    std::string text = writeClusterYaml(c);
    llvm::Expected<Cluster> back = parseCluster(text, true, "written.yaml");
    ASSERT_TRUE(!!back) << llvm::toString(back.takeError()) << "\n" << text;
    EXPECT_TRUE(*back == c) << text;
    EXPECT_EQ(writeClusterYaml(*back), text);
  }
  // Comments give the units.
  std::string text = writeClusterYaml(clusters.back());
  EXPECT_NE(text.find("hbm_gbps: 9.12345678901234"), std::string::npos) << text;
  EXPECT_NE(text.find("  # device memory bandwidth, GB/s\n"),
            std::string::npos);
  EXPECT_NE(text.find("bytes: 1048576, time_us: 1000,"), std::string::npos);
}

TEST(CalibrationFileTest, TrainingKeysOutOfRange) {
  EXPECT_EQ(errorOfYaml("precision: fp8\n"),
            "lab.yaml: key 'precision' must be bf16, fp16 or fp32, got 'fp8'");
  EXPECT_EQ(errorOfYaml("peak_tflops_bf16: 0\nprecision: bf16\n"),
            "lab.yaml: key 'precision' is bf16, but peak_tflops_bf16 is 0 "
            "(no bf16)");
  EXPECT_EQ(errorOfYaml("grad_reduce_overlap: 1.5\n"),
            "lab.yaml: key 'grad_reduce_overlap' must be in [0, 1], got 1.5");
  EXPECT_EQ(errorOfYaml("grad_reduce_overlap: -0.5\n"),
            "lab.yaml: key 'grad_reduce_overlap' must not be negative, got "
            "-0.5");
  EXPECT_EQ(errorOfYaml("grad_reduce_overlap: [1]\n"),
            "lab.yaml: key 'grad_reduce_overlap' must be a number, got a list");
}

TEST(CalibrationFileTest, ProvenanceChecks) {
  EXPECT_EQ(errorOfYaml("calibration:\n  host: box\n"),
            "lab.yaml: key 'calibration.host' is unknown (known keys: date, "
            "load_average, machine, ranks, single_rank, spread, "
            "threads_per_rank, versions)");
  EXPECT_EQ(errorOfYaml("calibration:\n  ranks: two\n"),
            "lab.yaml: key 'calibration.ranks' must be a number, got 'two'");
  EXPECT_EQ(errorOfYaml("calibration:\n  versions: [1, 2]\n"),
            "lab.yaml: key 'calibration.versions' must be a mapping, got a "
            "list");
  EXPECT_EQ(errorOfYaml("calibration: box\n"),
            "lab.yaml: key 'calibration' must be a mapping, got 'box'");
}

TEST(CalibrationFileTest, GemmGridChecks) {
  std::string full = syntheticCalibratedYaml();
  std::string last = "  - [256, 256, 256, 0.056000]\n";
  EXPECT_EQ(errorOf(parseCluster(replaced(full, last, ""), true, "g.yaml")),
            "g.yaml: key 'gemm_tflops' is not a full grid: no entry for "
            "(m, n, k) = (256, 256, 256)");
  EXPECT_EQ(errorOf(parseCluster(
                replaced(full, last, last + "  - [16, 16, 16, 0.5]\n"), true,
                "g.yaml")),
            "g.yaml: key 'gemm_tflops' gives (m, n, k) = (16, 16, 16) twice");
  EXPECT_EQ(errorOf(parseCluster(replaced(full, last, "  - [256, 256, 256]\n"),
                                 true, "g.yaml")),
            "g.yaml: key 'gemm_tflops[7]' must be a list [m, n, k, tflops] or "
            "[m, n, k, tflops, spread], got a list");
  EXPECT_EQ(
      errorOf(parseCluster(replaced(full, last, "  - [256, 256, 256, -1]\n"),
                           true, "g.yaml")),
      "g.yaml: key 'gemm_tflops[7]' must not be negative, got -1");
  EXPECT_EQ(
      errorOf(parseCluster(replaced(full, last, "  - [256, 256, 256, nan]\n"),
                           true, "g.yaml")),
      "g.yaml: key 'gemm_tflops[7]' must be a number, got 'nan'");
  EXPECT_EQ(errorOf(parseCluster(replaced(full, last, "  - [256, 0, 256, 1]\n"),
                                 true, "g.yaml")),
            "g.yaml: key 'gemm_tflops[7]' must be positive, got 0");
  EXPECT_EQ(errorOfYaml("gemm_tflops: 5\n"),
            "lab.yaml: key 'gemm_tflops' must be a list, got '5'");
}

TEST(CalibrationFileTest, KernelRateChecks) {
  EXPECT_EQ(errorOfYaml("memory_kernel_gbps:\n  warp: 3\n"),
            "lab.yaml: key 'memory_kernel_gbps.warp' is unknown (known keys: "
            "data_movement, elementwise, normalization, optimizer, "
            "reduction, softmax)");
  EXPECT_EQ(errorOfYaml("memory_kernel_gbps:\n  softmax: fast\n"),
            "lab.yaml: key 'memory_kernel_gbps.softmax' must be a number, "
            "got 'fast'");
  EXPECT_EQ(errorOfYaml("memory_kernel_gbps:\n  softmax: 0\n"),
            "lab.yaml: key 'memory_kernel_gbps.softmax' must be positive, "
            "got 0");
}

TEST(CalibrationFileTest, CollectiveChecks) {
  std::string entry = "{op: all_reduce, link: intra_node, ranks: 2, "
                      "bytes: 1024, time_us: 10, busbw_gbps: 0.1}";
  auto withEntry = [&](const std::string &from, const std::string &to) {
    return errorOfYaml("collectives:\n  - " + replaced(entry, from, to) + "\n");
  };
  EXPECT_EQ(withEntry("all_reduce", "broadcast"),
            "lab.yaml: key 'collectives[0].op' must be all_gather, "
            "all_reduce, all_to_all, reduce_scatter or send_recv, got "
            "'broadcast'");
  EXPECT_EQ(withEntry("intra_node", "nvlink"),
            "lab.yaml: key 'collectives[0].link' must be intra_node or "
            "inter_node, got 'nvlink'");
  EXPECT_EQ(withEntry("ranks: 2", "ranks: 1"),
            "lab.yaml: key 'collectives[0].ranks' must be at least 2, got 1");
  EXPECT_EQ(withEntry("time_us: 10", "time_us: -10"),
            "lab.yaml: key 'collectives[0].time_us' must not be negative, "
            "got -10");
  EXPECT_EQ(withEntry("bytes: 1024", "size: 1024"),
            "lab.yaml: key 'collectives[0].size' is unknown (known keys: "
            "busbw_gbps, bytes, link, op, ranks, spread, time_us)");
  EXPECT_EQ(withEntry("bytes: 1024, ", ""),
            "lab.yaml: key 'collectives[0]' lacks 'bytes'");
  EXPECT_EQ(errorOfYaml("collectives:\n  - " + entry + "\n  - " + entry + "\n"),
            "lab.yaml: key 'collectives' gives all_reduce over intra_node on "
            "2 ranks at 1024 bytes twice");
  EXPECT_EQ(errorOfYaml("collectives:\n  - 5\n"),
            "lab.yaml: key 'collectives[0]' must be a mapping, got '5'");
}

// bmc calibrate writes a few hundred collective entries: far more commas
// than the flat file had, each list still short.
TEST(CalibrationFileTest, HundredsOfEntriesAreAFile) {
  std::string yaml = std::string(kSyntheticFlatKeys) + "collectives:\n";
  for (int ranks = 2; ranks <= 5; ++ranks)
    for (int i = 0; i < 100; ++i)
      yaml += "  - {op: all_reduce, link: intra_node, ranks: " +
              std::to_string(ranks) + ", bytes: " + std::to_string(4 + i) +
              ", time_us: 10, busbw_gbps: 1}\n";
  llvm::Expected<Cluster> c = parseCluster(yaml, true, "big.yaml");
  ASSERT_TRUE(!!c) << llvm::toString(c.takeError());
  EXPECT_EQ(c->calibration.collectives.size(), 400u);
  // One flow list of empty entries is still refused before parsing.
  EXPECT_NE(errorOfYaml("gemm_tflops: [" + std::string(20000, ',') + "]\n")
                .find("not a cluster file"),
            std::string::npos);
  // Nesting deeper than any cluster file.
  std::string deep = "a:\n";
  for (int i = 1; i < 12; ++i)
    deep += std::string(2 * i, ' ') + "a:\n";
  EXPECT_EQ(errorOf(parseCluster(deep, true, "deep.yaml")),
            "deep.yaml: nested more than 8 deep");
}

} // namespace

TEST(CalibrationFileTest, SpreadLoadAndSingleRankRoundTrip) {
  Cluster c = cantFail(parseCluster(syntheticCalibratedYaml(), true, "l.yaml"));
  Calibration &cal = c.calibration;
  cal.gemm[0].spread = 0.015;
  cal.collectives[1].spread = 0.25;
  cal.spread = {{"gemm", 0.015},
                {"collectives", 0.25},
                {"largest", 0.25},
                {"median", 0.1325}};
  cal.loadAverage = {{"before", 0.07}, {"after", 1.93}, {"cores", 2}};
  cal.singleRank = {{"peak_tflops_fp32", 0.06},
                    {"hbm_gbps", 12.5},
                    {"elementwise_gbps", 5.5}};
  std::string text = writeClusterYaml(c);
  EXPECT_NE(text.find("  - [16, 16, 16, "), std::string::npos) << text;
  EXPECT_NE(text.find(", 0.015]\n"), std::string::npos) << text;
  EXPECT_NE(text.find(", spread: 0.25}"), std::string::npos) << text;
  EXPECT_NE(text.find("  load_average: {after: 1.93, before: 0.07, cores: 2}"),
            std::string::npos)
      << text;
  llvm::Expected<Cluster> back = parseCluster(text, true, "written.yaml");
  ASSERT_TRUE(!!back) << llvm::toString(back.takeError()) << "\n" << text;
  EXPECT_TRUE(*back == c) << text;
  EXPECT_EQ(writeClusterYaml(*back), text);
  // A point without a spread stays without one beside points with one.
  EXPECT_FALSE(back->calibration.gemm[1].spread.has_value());
}

TEST(CalibrationFileTest, FilesWithoutSpreadStillRead) {
  // The file as `bmc calibrate` wrote it before issue 24: no spread, no
  // load average, 4-item GEMM rows.
  Cluster c = cantFail(parseCluster(syntheticCalibratedYaml(), true, "l.yaml"));
  const Calibration &cal = c.calibration;
  EXPECT_TRUE(cal.spread.empty());
  EXPECT_TRUE(cal.loadAverage.empty());
  EXPECT_TRUE(cal.singleRank.empty());
  for (const GemmPoint &p : cal.gemm)
    EXPECT_FALSE(p.spread.has_value());
  for (const CollectivePoint &p : cal.collectives)
    EXPECT_FALSE(p.spread.has_value());
}

TEST(CalibrationFileTest, SpreadChecks) {
  EXPECT_EQ(errorOfYaml("calibration:\n  spread: {typical: 0.1}\n"),
            "lab.yaml: key 'calibration.spread.typical' is unknown (known "
            "keys: collectives, gemm, largest, median, memory)");
  EXPECT_EQ(errorOfYaml("calibration:\n  load_average: {before: -1}\n"),
            "lab.yaml: key 'calibration.load_average.before' must not be "
            "negative, got -1");
  EXPECT_EQ(errorOfYaml("calibration:\n  single_rank: 3\n"),
            "lab.yaml: key 'calibration.single_rank' must be a mapping, got "
            "'3'");
  std::string full = syntheticCalibratedYaml();
  std::string last = "  - [256, 256, 256, 0.056000]\n";
  EXPECT_EQ(errorOf(parseCluster(
                replaced(full, last, "  - [256, 256, 256, 0.056, -0.1]\n"),
                true, "g.yaml")),
            "g.yaml: key 'gemm_tflops[7]' must not be negative, got -0.1");
  EXPECT_EQ(errorOf(parseCluster(replaced(full, "busbw_gbps: 0.2048}",
                                          "busbw_gbps: 0.2048, spread: x}"),
                                 true, "g.yaml")),
            "g.yaml: key 'collectives[2].spread' must be a number, got 'x'");
}
