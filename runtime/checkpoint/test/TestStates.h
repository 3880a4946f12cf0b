//===- TestStates.h - training states to checkpoint in tests ----*- C++ -*-===//
//
// Test-only: a small model's state to save and load (two parameters and
// their AdamW moments), the folder of one of its versions, and edits that
// damage a saved version the way a disk or a person would.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_TEST_TESTSTATES_H
#define BMRT_CHECKPOINT_TEST_TESTSTATES_H

#include "Checkpoint.h"
#include "CheckpointVersions.h"

#include "TestFiles.h"

#include <algorithm>
#include <filesystem>

namespace bmrt::test {

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
  void save(const std::string &dir, int64_t keep = kDefaultKeep) const {
    saveCheckpoint(dir, info, parameters(), optimizerState(), keep);
  }
};

inline Checkpoint load(const std::string &dir) {
  return loadCheckpoint(dir, "tiny-mlp", "abc123");
}

/// The first element of the loaded fc.weight: which save a load read.
inline float firstWeight(const Checkpoint &c) {
  return c.tensor(TensorKind::Parameter, "fc.weight", DType::F32, {2, 3})
      .f32()[0];
}

/// DIR/step-N.
inline std::string versionOf(const std::string &dir, int64_t step) {
  return pathIn(dir, versionName(step));
}

/// The names in `folder`, sorted.
inline std::vector<std::string> entriesOf(const std::string &folder) {
  std::vector<std::string> names;
  for (const auto &entry : std::filesystem::directory_iterator(folder))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// Flips one bit of byte `at` of the file (from its end when negative), as
/// a failing disk would.
inline void flipBit(const std::string &path, long at) {
  std::string bytes = readBytes(path);
  size_t i = at >= 0 ? size_t(at) : bytes.size() - size_t(-at);
  bytes[i] = char(bytes[i] ^ 0x10);
  writeBytes(path, bytes);
}

inline nlohmann::json readJson(const std::string &path) {
  return nlohmann::json::parse(readBytes(path));
}

inline void writeJson(const std::string &path, const nlohmann::json &value) {
  writeBytes(path, value.dump(1));
}

/// Applies `edit` (a function of nlohmann::json &) to the JSON file.
template <typename F> void editJson(const std::string &path, F &&edit) {
  nlohmann::json j = readJson(path);
  edit(j);
  writeJson(path, j);
}

/// Moves `path` to `outside` and leaves a symbolic link to it in its place.
inline void replaceWithLink(const std::string &path,
                            const std::string &outside) {
  std::filesystem::rename(path, outside);
  std::filesystem::create_symlink(outside, path);
}

/// Replaces `file` of `version` with `tensors` and records the new file's
/// size and CRC in the manifest: a consistent version whose contents
/// disagree with its tensor list (what only a writer's bug would make).
inline void rewriteFile(const std::string &version, const std::string &file,
                        const std::vector<TensorRef> &tensors) {
  FileDigest digest = writeSafetensors(pathIn(version, file), tensors);
  editJson(pathIn(version, kManifest), [&](nlohmann::json &j) {
    j["files"][file] = {{"bytes", digest.bytes}, {"crc32", digest.crc32}};
  });
}

} // namespace bmrt::test

#endif // BMRT_CHECKPOINT_TEST_TESTSTATES_H
