//===- CheckpointManifestFuzzer.cpp - fuzz the checkpoint manifest reader -===//
//
// The input is a checkpoint's manifest.json, in a folder (one version,
// named directly) whose two safetensors files hold one parameter "w" (f32
// [2]) and its Adam state: readCheckpointInfo, then loadCheckpoint for the
// model the manifest names, so that the recorded sizes and CRCs (the seed
// has the files' own) and the tensor list are matched against the files.
//
//===----------------------------------------------------------------------===//

#include "FuzzInput.h"

#include "runtime/checkpoint/Checkpoint.h"

#include "bmrt/Error.h"

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace {

/// The checkpoint folder, with its tensor files written once.
const std::string &checkpointFolder() {
  static const std::string folder = [] {
    std::string dir = bm::fuzz::scratchFolder() + "/checkpoint";
    std::filesystem::create_directories(dir);
    float w[2] = {1.0f, 2.0f};
    bmrt::writeSafetensors(dir + "/model.safetensors",
                           {{"w", bmrt::DType::F32, {2}, w}});
    bmrt::writeSafetensors(dir + "/optimizer.safetensors",
                           {{"exp_avg.w", bmrt::DType::F32, {2}, w},
                            {"exp_avg_sq.w", bmrt::DType::F32, {2}, w}});
    return dir;
  }();
  return folder;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &dir = checkpointFolder();
  bm::fuzz::writeWholeFile(dir + "/manifest.json",
                           std::string(reinterpret_cast<const char *>(data),
                                       size));
  try {
    bmrt::CheckpointInfo info = bmrt::readCheckpointInfo(dir);
    bmrt::loadCheckpoint(dir, info.model, info.modelHash);
  } catch (const bmrt::Error &) {
  }
  return 0;
}
