//===- ClusterTest.cpp - presets and the cluster file loader --------------===//

#include "cost/Cluster.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

using namespace bm::cost;

namespace {

std::string errorOf(llvm::Expected<Cluster> cluster) {
  if (cluster)
    return "";
  return llvm::toString(cluster.takeError());
}

const char *kValidYaml = R"(
name: lab
gpu: A100
gpus_per_node: 4
peak_tflops_16bit: 312
peak_tflops_fp32: 19.5
memory_gib: 40
hbm_gbps: 1555
intra_node_gbps: 200
inter_node_gbps: 50
)";

TEST(ClusterTest, PresetsAreAlphabeticalAndLoad) {
  std::vector<std::string> names = clusterPresetNames();
  ASSERT_EQ(names.size(), 3u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const std::string &name : names) {
    llvm::Expected<Cluster> cluster = getClusterPreset(name);
    ASSERT_TRUE(!!cluster) << llvm::toString(cluster.takeError());
    EXPECT_EQ(cluster->name, name);
    EXPECT_EQ(cluster->gpusPerNode, 8);
  }
}

TEST(ClusterTest, DgxA100NumbersFromTheDatasheet) {
  Cluster c = cantFail(getClusterPreset("dgx-a100-80g"));
  EXPECT_DOUBLE_EQ(c.peakFlops16, 312e12);
  EXPECT_DOUBLE_EQ(c.memoryBytes, 80.0 * (1 << 30));
  // 8 x 200 Gb/s per node: at most 25 GB/s per GPU.
  EXPECT_LE(c.interNodeBandwidthPerGpu(), 25e9);
  EXPECT_GT(c.intraNode.busBandwidth, c.interNodeBandwidthPerGpu());
}

// Volta has fp16 tensor cores and no bf16; Ampere and Hopper have both at
// the same peak.
TEST(ClusterTest, Bf16OnlyWhereTheGpuHasIt) {
  Cluster v100 = cantFail(getClusterPreset("alpa-v100"));
  EXPECT_FALSE(v100.hasBf16());
  EXPECT_DOUBLE_EQ(v100.peakFlops16, 125e12);
  for (const char *name : {"dgx-a100-80g", "dgx-h100-80g"}) {
    Cluster c = cantFail(getClusterPreset(name));
    EXPECT_TRUE(c.hasBf16()) << name;
    EXPECT_DOUBLE_EQ(c.peakFlopsBf16, c.peakFlops16) << name;
  }
  // In a file, bf16 defaults to the 16-bit peak; 0 says there is none.
  Cluster fromFile = cantFail(parseCluster(kValidYaml, true, "lab.yaml"));
  EXPECT_DOUBLE_EQ(fromFile.peakFlopsBf16, 312e12);
  std::string volta = std::string(kValidYaml) + "peak_tflops_bf16: 0\n";
  Cluster noBf16 = cantFail(parseCluster(volta, true, "volta.yaml"));
  EXPECT_FALSE(noBf16.hasBf16());
  EXPECT_DOUBLE_EQ(noBf16.peakFlops16, 312e12);
  std::string negative = std::string(kValidYaml) + "peak_tflops_bf16: -1\n";
  EXPECT_EQ(errorOf(parseCluster(negative, true, "lab.yaml")),
            "lab.yaml: key 'peak_tflops_bf16' must not be negative, got -1");
}

TEST(ClusterTest, UnknownPreset) {
  std::string error = errorOf(loadCluster("dgx-z9000"));
  EXPECT_NE(error.find("unknown cluster preset 'dgx-z9000'"), std::string::npos)
      << error;
  EXPECT_NE(error.find("dgx-a100-80g"), std::string::npos);
}

TEST(ClusterTest, ParsesYaml) {
  llvm::Expected<Cluster> c = parseCluster(kValidYaml, true, "lab.yaml");
  ASSERT_TRUE(!!c) << llvm::toString(c.takeError());
  EXPECT_EQ(c->name, "lab");
  EXPECT_EQ(c->gpusPerNode, 4);
  EXPECT_DOUBLE_EQ(c->interNode.busBandwidth, 50e9);
  EXPECT_DOUBLE_EQ(c->memoryBytes, 40.0 * (1 << 30));
}

TEST(ClusterTest, ParsesJsonWithTheSameKeys) {
  const char *json = R"({"gpus_per_node": 2, "peak_tflops_16bit": 100,
    "peak_tflops_fp32": 10, "memory_gib": 24, "hbm_gbps": 900,
    "intra_node_gbps": 50, "inter_node_gbps": 10, "name": "small"})";
  llvm::Expected<Cluster> c = parseCluster(json, false, "small.json");
  ASSERT_TRUE(!!c) << llvm::toString(c.takeError());
  EXPECT_EQ(c->name, "small");
  EXPECT_EQ(c->gpusPerNode, 2);
}

TEST(ClusterTest, MalformedFiles) {
  EXPECT_NE(errorOf(parseCluster("{\"gpus_per_node\": ", false, "a.json"))
                .find("a.json: malformed JSON"),
            std::string::npos);
  EXPECT_NE(errorOf(parseCluster("gpus_per_node: [1, 2", true, "b.yaml"))
                .find("b.yaml: "),
            std::string::npos);
  EXPECT_NE(errorOf(parseCluster("- 1\n- 2\n", true, "c.yaml"))
                .find("expected a YAML mapping"),
            std::string::npos);
}

TEST(ClusterTest, MissingField) {
  std::string yaml = kValidYaml;
  yaml.replace(yaml.find("hbm_gbps: 1555"), 14, "");
  std::string error = errorOf(parseCluster(yaml, true, "lab.yaml"));
  EXPECT_EQ(error, "lab.yaml: missing key 'hbm_gbps' (device memory "
                   "bandwidth, GB/s)");
}

TEST(ClusterTest, NegativeValue) {
  std::string yaml = kValidYaml;
  yaml.replace(yaml.find("memory_gib: 40"), 14, "memory_gib: -40");
  EXPECT_EQ(errorOf(parseCluster(yaml, true, "lab.yaml")),
            "lab.yaml: key 'memory_gib' must not be negative, got -40");
}

TEST(ClusterTest, UnknownKey) {
  std::string yaml = std::string(kValidYaml) + "nvlink_speed: 9000\n";
  std::string error = errorOf(parseCluster(yaml, true, "lab.yaml"));
  EXPECT_NE(error.find("lab.yaml: unknown key 'nvlink_speed'"),
            std::string::npos)
      << error;
}

TEST(ClusterTest, NotANumber) {
  std::string yaml = kValidYaml;
  yaml.replace(yaml.find("gpus_per_node: 4"), 16, "gpus_per_node: four");
  EXPECT_EQ(errorOf(parseCluster(yaml, true, "lab.yaml")),
            "lab.yaml: key 'gpus_per_node' must be a number, got 'four'");
  yaml = kValidYaml;
  yaml.replace(yaml.find("gpus_per_node: 4"), 16, "gpus_per_node: 4.5");
  EXPECT_EQ(errorOf(parseCluster(yaml, true, "lab.yaml")),
            "lab.yaml: key 'gpus_per_node' must be an integer, got 4.5");
}

TEST(ClusterTest, RepeatedKey) {
  std::string yaml = std::string(kValidYaml) + "gpus_per_node: 8\n";
  EXPECT_EQ(errorOf(parseCluster(yaml, true, "lab.yaml")),
            "lab.yaml: key 'gpus_per_node' is given twice");
  const char *json = R"({"gpus_per_node": 2, "peak_tflops_16bit": 100,
    "peak_tflops_fp32": 10, "memory_gib": 24, "hbm_gbps": 900,
    "intra_node_gbps": 50, "inter_node_gbps": 10, "memory_gib": 80})";
  EXPECT_EQ(errorOf(parseCluster(json, false, "small.json")),
            "small.json: key 'memory_gib' is given twice");
  // Equal keys inside a string value are not keys.
  const char *named = R"({"gpus_per_node": 2, "peak_tflops_16bit": 100,
    "peak_tflops_fp32": 10, "memory_gib": 24, "hbm_gbps": 900,
    "intra_node_gbps": 50, "inter_node_gbps": 10,
    "name": "memory_gib: 24"})";
  EXPECT_EQ(errorOf(parseCluster(named, false, "named.json")), "");
}

TEST(ClusterTest, IntegerTooLarge) {
  std::string yaml = kValidYaml;
  yaml.replace(yaml.find("gpus_per_node: 4"), 16,
               "gpus_per_node: 99999999999");
  EXPECT_EQ(errorOf(parseCluster(yaml, true, "lab.yaml")),
            "lab.yaml: key 'gpus_per_node' must be at most 16777216, got "
            "99999999999");
}

// Optimizer offload (issue 29): every preset has a host link, host memory
// and a host optimizer rate, each below what its hardware could reach at
// best (PCIe x16 per GPU, the node's memory and memory bandwidth over 8).
TEST(ClusterTest, PresetsCanOffloadAtEffectiveRates) {
  struct Limits {
    const char *name;
    double pcieGBps, nodeMemoryGiB, nodeMemoryGBps;
  };
  for (const Limits &limits : {Limits{"alpa-v100", 15.75, 488, 153.6},
                               Limits{"dgx-a100-80g", 31.5, 2048, 409.6},
                               Limits{"dgx-h100-80g", 63, 2048, 614.4}}) {
    Cluster c = cantFail(getClusterPreset(limits.name));
    EXPECT_TRUE(c.canOffload()) << limits.name;
    EXPECT_GT(c.hostLinkBandwidth, 0) << limits.name;
    EXPECT_LT(c.hostLinkBandwidth, limits.pcieGBps * 1e9) << limits.name;
    EXPECT_GT(c.hostMemoryBytes, 0) << limits.name;
    EXPECT_LT(c.hostMemoryBytes, limits.nodeMemoryGiB / 8 * kGiB)
        << limits.name;
    EXPECT_GT(c.hostOptimizerBandwidth, 0) << limits.name;
    EXPECT_LT(c.hostOptimizerBandwidth, limits.nodeMemoryGBps / 8 * 1e9)
        << limits.name;
  }
}

TEST(ClusterTest, HostKeysAreOptionalAndChecked) {
  Cluster none = cantFail(parseCluster(kValidYaml, true, "lab.yaml"));
  EXPECT_FALSE(none.canOffload());
  EXPECT_EQ(none.hostMemoryBytes, 0);
  std::string host = std::string(kValidYaml) +
                     "host_link_gbps: 20\nhost_memory_gib: 100\n"
                     "host_optimizer_gbps: 30\n";
  Cluster c = cantFail(parseCluster(host, true, "lab.yaml"));
  EXPECT_TRUE(c.canOffload());
  EXPECT_FALSE(c.offloadSharesDeviceMemory());
  EXPECT_DOUBLE_EQ(c.hostLinkBandwidth, 20e9);
  EXPECT_DOUBLE_EQ(c.hostMemoryBytes, 100 * kGiB);
  EXPECT_DOUBLE_EQ(c.hostOptimizerBandwidth, 30e9);
  EXPECT_TRUE(cantFail(parseCluster(writeClusterYaml(c), true, "w.yaml")) == c);
  // A link of 0 is a cluster that does not offload, whatever else it says.
  std::string noLink =
      std::string(kValidYaml) + "host_link_gbps: 0\nhost_memory_gib: 100\n";
  EXPECT_FALSE(cantFail(parseCluster(noLink, true, "lab.yaml")).canOffload());
  // A link without host memory: the host's memory is the device's (a
  // CPU), and offloaded state counts in it.
  Cluster shared = cantFail(parseCluster(
      std::string(kValidYaml) + "host_link_gbps: 20\nhost_optimizer_gbps: 30\n",
      true, "lab.yaml"));
  EXPECT_TRUE(shared.canOffload());
  EXPECT_TRUE(shared.offloadSharesDeviceMemory());
  EXPECT_EQ(
      errorOf(parseCluster(std::string(kValidYaml) + "host_link_gbps: -2\n",
                           true, "lab.yaml")),
      "lab.yaml: key 'host_link_gbps' must not be negative, got -2");
  EXPECT_EQ(
      errorOf(parseCluster(std::string(kValidYaml) + "host_memory_gib: lots\n",
                           true, "lab.yaml")),
      "lab.yaml: key 'host_memory_gib' must be a number, got 'lots'");
  EXPECT_EQ(
      errorOf(parseCluster(std::string(kValidYaml) + "host_link_gbps: 20\n"
                                                     "host_memory_gib: 100\n",
                           true, "lab.yaml")),
      "lab.yaml: host_link_gbps is 20 but host_optimizer_gbps is not "
      "given: offloading the optimizer needs the host's step rate "
      "(without host_link_gbps, or with it 0, the cluster does not "
      "offload)");
  EXPECT_EQ(
      errorOf(parseCluster(std::string(kValidYaml) + "host_link_gbps: 20\n"
                                                     "host_optimizer_gbps: 0\n",
                           true, "lab.yaml")),
      "lab.yaml: host_link_gbps is 20 but host_optimizer_gbps is 0: "
      "offloading the optimizer needs the host's step rate (without "
      "host_link_gbps, or with it 0, the cluster does not offload)");
}

TEST(ClusterTest, LoadsFilesByExtension) {
  llvm::SmallString<128> path;
  ASSERT_FALSE(
      llvm::sys::fs::createTemporaryFile("cluster", "yaml", path));
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(path, ec);
    out << kValidYaml;
  }
  llvm::Expected<Cluster> c = loadCluster(path);
  ASSERT_TRUE(!!c) << llvm::toString(c.takeError());
  EXPECT_EQ(c->gpusPerNode, 4);
  llvm::sys::fs::remove(path);
  EXPECT_NE(errorOf(loadCluster("/nonexistent/cluster.yaml"))
                .find("cannot read cluster file"),
            std::string::npos);
}

} // namespace
