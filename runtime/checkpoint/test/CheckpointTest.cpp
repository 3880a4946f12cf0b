//===- CheckpointTest.cpp - round trips, refusals, atomic replacement -----===//

#include "Checkpoint.h"

#include "TestFiles.h"

#include <csignal>
#include <filesystem>

#include <sys/resource.h>

namespace bmrt::test {
namespace {

namespace fs = std::filesystem;

/// A small model's state: two parameters and their AdamW moments.
struct State {
  std::vector<float> w = {1, 2, 3, 4, 5, 6}, b = {0.5f, -0.5f};
  std::vector<float> mw = std::vector<float>(6, 0.1f),
                     vw = std::vector<float>(6, 0.01f);
  std::vector<float> mb = {0.2f, 0.3f}, vb = {0.04f, 0.09f};
  CheckpointInfo info;

  explicit State(int64_t step = 7) {
    info.model = "tiny-mlp";
    info.modelHash = "abc123";
    info.plan = {{"mesh", {{"data", 1}}}, {"micro_batch", 4}};
    info.step = step;
    info.dataPosition = 1234;
    // Above 2^53: a double would round it.
    info.rngState = UINT64_MAX - 5;
    info.optimizer = "adamw";
    info.optimizerConfig = {{"beta1", 0.9}, {"weight_decay", 0.1}};
  }
  std::vector<TensorRef> parameters() const {
    return {{"fc.weight", DType::F32, {2, 3}, w.data()},
            {"fc.bias", DType::F32, {2}, b.data()}};
  }
  std::vector<TensorRef> optimizerState() const {
    return {{"exp_avg.fc.weight", DType::F32, {2, 3}, mw.data()},
            {"exp_avg_sq.fc.weight", DType::F32, {2, 3}, vw.data()},
            {"exp_avg.fc.bias", DType::F32, {2}, mb.data()},
            {"exp_avg_sq.fc.bias", DType::F32, {2}, vb.data()}};
  }
  void save(const std::string &dir) const {
    saveCheckpoint(dir, info, parameters(), optimizerState());
  }
};

Checkpoint load(const std::string &dir) {
  return loadCheckpoint(dir, "tiny-mlp", "abc123");
}

/// The folder's entries other than `dir` itself: what saving left behind.
std::vector<std::string> siblings(const ScratchDir &scratch) {
  std::vector<std::string> names;
  for (const auto &entry : fs::directory_iterator(scratch.path("")))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Checkpoint, RoundTrip) {
  ScratchDir scratch;
  State s;
  s.save(scratch.path("ckpt"));
  Checkpoint c = load(scratch.path("ckpt"));
  EXPECT_EQ(c.folder, scratch.path("ckpt"));
  EXPECT_EQ(c.info.model, "tiny-mlp");
  EXPECT_EQ(c.info.modelHash, "abc123");
  EXPECT_EQ(c.info.plan, s.info.plan);
  EXPECT_EQ(c.info.step, 7);
  EXPECT_EQ(c.info.dataPosition, 1234);
  EXPECT_EQ(c.info.rngState, UINT64_MAX - 5);
  EXPECT_EQ(c.info.optimizer, "adamw");
  EXPECT_EQ(c.info.optimizerConfig, s.info.optimizerConfig);
  ASSERT_EQ(c.parameters.size(), 2u);
  ASSERT_EQ(c.optimizerState.size(), 4u);
  const HostTensor &w =
      c.tensor(TensorKind::Parameter, "fc.weight", DType::F32, {2, 3});
  EXPECT_EQ(std::vector<float>(w.f32(), w.f32() + 6), s.w);
  const HostTensor &vb = c.tensor(TensorKind::OptimizerState,
                                  "exp_avg_sq.fc.bias", DType::F32, {2});
  EXPECT_EQ(std::vector<float>(vb.f32(), vb.f32() + 2), s.vb);
  EXPECT_EQ(siblings(scratch), std::vector<std::string>{"ckpt"});
  EXPECT_TRUE(checkpointExists(scratch.path("ckpt")));
  EXPECT_FALSE(checkpointExists(scratch.path("other")));
}

TEST(Checkpoint, ManifestListsEveryTensor) {
  ScratchDir scratch;
  State().save(scratch.path("ckpt"));
  auto manifest =
      nlohmann::json::parse(readBytes(scratch.path("ckpt/manifest.json")));
  EXPECT_EQ(manifest.at("format"), 1);
  ASSERT_EQ(manifest.at("tensors").size(), 6u);
  EXPECT_EQ(manifest.at("tensors")[0], nlohmann::json({{"name", "fc.weight"},
                                                       {"kind", "parameter"},
                                                       {"dtype", "f32"},
                                                       {"shape", {2, 3}}}));
  EXPECT_EQ(manifest.at("tensors")[2].at("kind"), "optimizer_state");
  EXPECT_EQ(manifest.at("optimizer").at("name"), "adamw");
  EXPECT_EQ(manifest.at("data"),
            nlohmann::json(
                {{"position", 1234}, {"rng_state", "0xfffffffffffffffa"}}));
}

TEST(Checkpoint, TrailingSlashNamesTheSameFolder) {
  ScratchDir scratch;
  State(1).save(scratch.path("ckpt/"));
  State(2).save(scratch.path("ckpt"));
  EXPECT_EQ(load(scratch.path("ckpt/")).info.step, 2);
  EXPECT_EQ(siblings(scratch), std::vector<std::string>{"ckpt"});
}

TEST(Checkpoint, SavingReplacesThePreviousOne) {
  ScratchDir scratch;
  State first(10);
  first.save(scratch.path("ckpt"));
  State second(20);
  second.w[0] = 42;
  second.save(scratch.path("ckpt"));
  Checkpoint c = load(scratch.path("ckpt"));
  EXPECT_EQ(c.info.step, 20);
  EXPECT_EQ(
      c.tensor(TensorKind::Parameter, "fc.weight", DType::F32, {2, 3}).f32()[0],
      42);
  EXPECT_EQ(siblings(scratch), std::vector<std::string>{"ckpt"});
}

TEST(Checkpoint, OtherModelIsRefused) {
  ScratchDir scratch;
  State().save(scratch.path("ckpt"));
  EXPECT_ERROR(loadCheckpoint(scratch.path("ckpt/"), "gpt2", "ffff"),
               "checkpoint '" + scratch.path("ckpt/") +
                   "' is of model 'tiny-mlp' (hash abc123), not 'gpt2' "
                   "(hash ffff)");
  EXPECT_ERROR(loadCheckpoint(scratch.path("ckpt"), "tiny-mlp", "0000"),
               "is of model 'tiny-mlp' (hash abc123), not 'tiny-mlp' (hash "
               "0000)");
}

TEST(Checkpoint, MissingCheckpoint) {
  ScratchDir scratch;
  EXPECT_ERROR(load(scratch.path("none")), "there is no checkpoint in '" +
                                               scratch.path("none") +
                                               "': it does not exist");
}

TEST(Checkpoint, CorruptManifest) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  State().save(dir);
  std::string manifest = readBytes(dir + "/manifest.json");

  writeBytes(dir + "/manifest.json", "{\"format\": 1, ");
  EXPECT_ERROR(load(dir), "manifest.json is not a valid JSON object");

  writeBytes(dir + "/manifest.json", R"({"format": 2})");
  EXPECT_ERROR(load(dir), "has format 2; this runtime reads format 1");

  writeBytes(dir + "/manifest.json", R"({"format": 1, "model": "tiny-mlp"})");
  EXPECT_ERROR(load(dir), "manifest.json lacks a field or has one of the "
                          "wrong type");

  auto j = nlohmann::json::parse(manifest);
  j["tensors"][0]["kind"] = "gradient";
  writeBytes(dir + "/manifest.json", j.dump());
  EXPECT_ERROR(load(dir), "tensor 'fc.weight' has kind 'gradient'");

  j = nlohmann::json::parse(manifest);
  j["data"]["rng_state"] = 17;
  writeBytes(dir + "/manifest.json", j.dump());
  EXPECT_ERROR(load(dir), "lacks a field or has one of the wrong type");
  j["data"]["rng_state"] = "0x12";
  writeBytes(dir + "/manifest.json", j.dump());
  EXPECT_ERROR(load(dir), "rng_state '0x12' is not 0x and 16 hex digits");

  fs::remove(dir + "/manifest.json");
  EXPECT_ERROR(load(dir), "checkpoint '" + dir + "' has no manifest.json");
}

TEST(Checkpoint, TensorMissingOrOfAnotherShape) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  State s;
  s.save(dir);
  // model.safetensors without the bias the manifest lists.
  writeSafetensors(dir + "/model.safetensors", {s.parameters()[0]});
  EXPECT_ERROR(load(dir), "manifest.json lists parameter 'fc.bias' but "
                          "'model.safetensors' does not hold it");
  // ... and with the bias of another shape.
  writeSafetensors(
      dir + "/model.safetensors",
      {s.parameters()[0], {"fc.bias", DType::F32, {1, 2}, s.b.data()}});
  EXPECT_ERROR(load(dir), "'model.safetensors' holds 'fc.bias' as f32[1,2] "
                          "but manifest.json says f32[2]");
  // ... and with a tensor the manifest does not list.
  float extra = 0;
  std::vector<TensorRef> more = s.parameters();
  more.push_back({"stray", DType::F32, {1}, &extra});
  writeSafetensors(dir + "/model.safetensors", more);
  EXPECT_ERROR(load(dir), "'model.safetensors' holds 3 tensors but "
                          "manifest.json lists 2");
  // A corrupt tensor file reports the file.
  writeBytes(dir + "/optimizer.safetensors", "junk");
  EXPECT_ERROR(load(dir), "optimizer.safetensors' is not a valid safetensors "
                          "file");
}

TEST(Checkpoint, TensorLookupNamesWhatTheModelNeeds) {
  ScratchDir scratch;
  State().save(scratch.path("ckpt"));
  Checkpoint c = load(scratch.path("ckpt"));
  EXPECT_ERROR(c.tensor(TensorKind::Parameter, "fc2.weight", DType::F32, {2}),
               "has no parameter 'fc2.weight'");
  EXPECT_ERROR(c.tensor(TensorKind::OptimizerState, "momentum_buffer.fc.bias",
                        DType::F32, {2}),
               "has no optimizer state 'momentum_buffer.fc.bias' (was it "
               "written with another optimizer?)");
  EXPECT_ERROR(c.tensor(TensorKind::Parameter, "fc.weight", DType::F32, {3, 2}),
               "holds parameter 'fc.weight' as f32[2,3]; the model needs "
               "f32[3,2]");
}

TEST(Checkpoint, UnwritableLocations) {
  ScratchDir scratch;
  writeBytes(scratch.path("file"), "x");
  EXPECT_ERROR(State().save(scratch.path("file/ckpt")),
               "cannot save the checkpoint '" + scratch.path("file/ckpt") +
                   "': '" + scratch.path("file") + "' is not a folder");
  EXPECT_ERROR(State().save(scratch.path("none/ckpt")), "does not exist");
  // A user's folder named by mistake is never replaced.
  fs::create_directory(scratch.path("work"));
  writeBytes(scratch.path("work/notes.txt"), "keep me");
  EXPECT_ERROR(State().save(scratch.path("work")),
               "it exists and is not a checkpoint (no manifest.json)");
  EXPECT_EQ(readBytes(scratch.path("work/notes.txt")), "keep me");
}

/// Makes every write past `bytes` of a file fail with EFBIG, as a full disk
/// would fail it with ENOSPC (root ignores permissions, not this limit).
class FileSizeLimit {
public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved);
    previous = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved;
    limit.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, previous);
  }

private:
  rlimit saved;
  void (*previous)(int);
};

TEST(Checkpoint, FailedSaveKeepsThePreviousCheckpoint) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  State(5).save(dir);
  State bigger(6);
  bigger.w.assign(1 << 16, 1.0f);
  std::vector<TensorRef> params = {
      {"fc.weight", DType::F32, {1 << 16}, bigger.w.data()}};
  {
    FileSizeLimit limit(4096);
    EXPECT_ERROR(saveCheckpoint(dir, bigger.info, params, {}),
                 "cannot write '" + dir + ".tmp-" + std::to_string(::getpid()) +
                     "/model.safetensors': File too large");
  }
  Checkpoint c = load(dir);
  EXPECT_EQ(c.info.step, 5);
  EXPECT_EQ(c.parameters.size(), 2u);
  // The temporary folder is gone; nothing but the old checkpoint is left.
  EXPECT_EQ(siblings(scratch), std::vector<std::string>{"ckpt"});
}

TEST(Checkpoint, CrashBetweenRenamesFallsBackToOld) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  State(3).save(dir);
  // What a crash after "rename DIR to DIR.old" leaves, with the new
  // checkpoint still in its temporary folder.
  fs::rename(dir, dir + ".old");
  fs::create_directory(dir + ".tmp-99999");
  EXPECT_TRUE(checkpointExists(dir));
  Checkpoint c = load(dir);
  EXPECT_EQ(c.folder, dir + ".old");
  EXPECT_EQ(c.info.step, 3);
  // The next save puts a whole checkpoint in place and drops the old one.
  State(4).save(dir);
  EXPECT_EQ(load(dir).info.step, 4);
  EXPECT_FALSE(fs::exists(dir + ".old"));
}

TEST(Checkpoint, StaleTemporaryFolderOfOurPidIsReplaced) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
  fs::create_directory(tmp);
  writeBytes(tmp + "/model.safetensors", "half-written");
  State(8).save(dir);
  EXPECT_EQ(load(dir).info.step, 8);
  EXPECT_FALSE(fs::exists(tmp));
}

} // namespace
} // namespace bmrt::test
