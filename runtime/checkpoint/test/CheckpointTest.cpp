//===- CheckpointTest.cpp - round trips, refusals, failed saves -----------===//

#include "Checkpoint.h"

#include "TestStates.h"

#include <csignal>
#include <filesystem>

#include <sys/resource.h>

namespace bmrt::test {
namespace {

namespace fs = std::filesystem;

TEST(Checkpoint, RoundTrip) {
  ScratchDir scratch;
  State s;
  s.save(scratch.path("ckpt"));
  Checkpoint c = load(scratch.path("ckpt"));
  EXPECT_EQ(c.folder, scratch.path("ckpt/step-00000007"));
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
  EXPECT_EQ(entriesOf(scratch.path("")), std::vector<std::string>{"ckpt"});
  EXPECT_EQ(entriesOf(scratch.path("ckpt")),
            (std::vector<std::string>{"latest", "step-00000007"}));
  EXPECT_EQ(readBytes(scratch.path("ckpt/latest")), "step-00000007\n");
  EXPECT_TRUE(checkpointExists(scratch.path("ckpt")));
  EXPECT_FALSE(checkpointExists(scratch.path("other")));
}

TEST(Checkpoint, ManifestListsEveryTensorAndFile) {
  ScratchDir scratch;
  State().save(scratch.path("ckpt"));
  std::string version = scratch.path("ckpt/step-00000007");
  auto manifest = readJson(version + "/manifest.json");
  EXPECT_EQ(manifest.at("format"), 2);
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
  // The recorded size and CRC are the files' as they lie on disk.
  for (const char *file : {"model.safetensors", "optimizer.safetensors"}) {
    FileDigest digest = digestOfFile(pathIn(version, file));
    EXPECT_EQ(
        manifest.at("files").at(file),
        nlohmann::json({{"bytes", digest.bytes}, {"crc32", digest.crc32}}));
  }
}

TEST(Checkpoint, TrailingSlashNamesTheSameFolder) {
  ScratchDir scratch;
  State(1).save(scratch.path("ckpt/"));
  State(2).save(scratch.path("ckpt"));
  EXPECT_EQ(load(scratch.path("ckpt/")).info.step, 2);
  EXPECT_EQ(entriesOf(scratch.path("")), std::vector<std::string>{"ckpt"});
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
  fs::create_directory(scratch.path("empty"));
  EXPECT_FALSE(checkpointExists(scratch.path("empty")));
  EXPECT_ERROR(load(scratch.path("empty")),
               "there is no 'latest', and no version is complete");
}

TEST(Checkpoint, CorruptManifest) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  State().save(dir);
  std::string path = dir + "/step-00000007/manifest.json";
  std::string manifest = readBytes(path);

  writeBytes(path, "{\"format\": 2, ");
  EXPECT_ERROR(load(dir), "checkpoint '" + dir +
                              "': step-00000007/manifest.json is not a "
                              "valid JSON object");

  writeBytes(path, R"({"format": 2, "model": "tiny-mlp"})");
  EXPECT_ERROR(load(dir), "manifest.json lacks a field or has one of the "
                          "wrong type");

  auto edited = [&](auto edit) {
    writeBytes(path, manifest);
    editJson(path, edit);
  };
  using json = nlohmann::json;
  edited([](json &j) { j["tensors"][0]["kind"] = "gradient"; });
  EXPECT_ERROR(load(dir), "tensor 'fc.weight' has kind 'gradient'");
  edited([](json &j) { j["data"]["rng_state"] = 17; });
  EXPECT_ERROR(load(dir), "lacks a field or has one of the wrong type");
  edited([](json &j) { j["data"]["rng_state"] = "0x12"; });
  EXPECT_ERROR(load(dir), "rng_state '0x12' is not 0x and 16 hex digits");
  edited([](json &j) { j.erase("files"); });
  EXPECT_ERROR(load(dir), "has no valid \"files\"");
  edited([](json &j) { j["format"] = 1; });
  EXPECT_ERROR(load(dir), "has format 1; this runtime reads format 2");

  // A version without its manifest is incomplete: never read.
  fs::remove(path);
  EXPECT_ERROR(load(dir), "'latest' names 'step-00000007', which is "
                          "incomplete (no manifest.json), and no version is "
                          "complete");
}

TEST(Checkpoint, EditedStepIsRefused) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  State().save(dir);
  editJson(dir + "/step-00000007/manifest.json",
           [](nlohmann::json &j) { j["step"] = 8; });
  EXPECT_ERROR(load(dir), "checkpoint '" + dir +
                              "': step-00000007/manifest.json says step 8, "
                              "but its folder is 'step-00000007'");
  EXPECT_ERROR(readCheckpointInfo(dir), "says step 8");
}

TEST(Checkpoint, FlippedBitIsAChecksumMismatch) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  State().save(dir);
  std::string file = dir + "/step-00000007/optimizer.safetensors";
  std::string mismatch = "checkpoint '" + dir + "': '" + file +
                         "': checksum mismatch (the file changed after it "
                         "was written)";
  std::string good = readBytes(file);
  // In the data, where the file still parses...
  flipBit(file, -3);
  EXPECT_ERROR(load(dir), mismatch);
  // ... and in the header, where it does not: the damage is named.
  writeBytes(file, good);
  flipBit(file, 12);
  EXPECT_ERROR(load(dir), mismatch);
  writeBytes(file, good.substr(0, good.size() - 4));
  EXPECT_ERROR(load(dir), "'" + file + "' has " +
                              std::to_string(good.size() - 4) +
                              " bytes, not the " + std::to_string(good.size()) +
                              " the manifest records");
}

TEST(Checkpoint, TensorMissingOrOfAnotherShape) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  std::string version = dir + "/step-00000007";
  State s;
  s.save(dir);
  // model.safetensors without the bias the manifest lists.
  rewriteFile(version, "model.safetensors", {s.parameters()[0]});
  EXPECT_ERROR(load(dir), "manifest.json lists parameter 'fc.bias' but "
                          "'model.safetensors' does not hold it");
  // ... and with the bias of another shape.
  rewriteFile(version, "model.safetensors",
              {s.parameters()[0], {"fc.bias", DType::F32, {1, 2}, s.b.data()}});
  EXPECT_ERROR(load(dir), "'model.safetensors' holds 'fc.bias' as f32[1,2] "
                          "but manifest.json says f32[2]");
  // ... and with a tensor the manifest does not list.
  float extra = 0;
  std::vector<TensorRef> more = s.parameters();
  more.push_back({"stray", DType::F32, {1}, &extra});
  rewriteFile(version, "model.safetensors", more);
  EXPECT_ERROR(load(dir), "'model.safetensors' holds 3 tensors but "
                          "manifest.json lists 2");
}

TEST(Checkpoint, SymlinkedFileIsRefused) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  State().save(dir);
  std::string file = dir + "/step-00000007/model.safetensors";
  replaceWithLink(file, scratch.path("elsewhere.safetensors"));
  EXPECT_ERROR(load(dir), "checkpoint '" + dir + "': '" + file +
                              "' is a symbolic link; every file of a "
                              "checkpoint lies inside its version folder");
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
  // A user's folder named by mistake is never written into.
  fs::create_directory(scratch.path("work"));
  writeBytes(scratch.path("work/notes.txt"), "keep me");
  EXPECT_ERROR(State().save(scratch.path("work")),
               "it exists and is not a checkpoint folder");
  EXPECT_EQ(entriesOf(scratch.path("work")),
            std::vector<std::string>{"notes.txt"});
  // Nor is a version, named directly.
  State().save(scratch.path("ckpt"));
  EXPECT_ERROR(State(8).save(scratch.path("ckpt/step-00000007")),
               "it is one checkpoint version (it holds manifest.json), and "
               "versions are read-only");
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
    std::string message =
        errorOf([&] { saveCheckpoint(dir, bigger.info, params, {}); });
    EXPECT_NE(message.find("cannot write '" + dir + "/.tmp-step-00000006-"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("/model.safetensors': File too large"),
              std::string::npos)
        << message;
  }
  Checkpoint c = load(dir);
  EXPECT_EQ(c.info.step, 5);
  EXPECT_EQ(c.parameters.size(), 2u);
  // The temporary folder is gone; nothing but the old version is left.
  EXPECT_EQ(entriesOf(dir),
            (std::vector<std::string>{"latest", "step-00000005"}));
}

} // namespace
} // namespace bmrt::test
