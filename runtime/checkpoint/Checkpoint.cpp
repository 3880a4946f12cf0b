//===- Checkpoint.cpp - checkpoints as immutable versions -----------------===//

#include "Checkpoint.h"

#include "CheckpointFolder.h"
#include "CheckpointVersions.h"
#include "FileIO.h"
#include "ShardedCheckpoint.h"

#include "bmrt/Error.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

namespace bmrt {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char *nameOf(TensorKind kind) {
  return kind == TensorKind::Parameter ? "parameter" : "optimizer_state";
}

namespace {

constexpr const char *kModelFile = "model.safetensors";
constexpr const char *kOptimizerFile = "optimizer.safetensors";

/// The RNG state as "0x" and 16 hex digits: JSON readers that hold
/// numbers as doubles (JavaScript, jq) would round a uint64.
std::string formatState(uint64_t state) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", (unsigned long long)state);
  return text;
}

bool parseState(const std::string &text, uint64_t &state) {
  if (text.size() != 18 || text.compare(0, 2, "0x") != 0)
    return false;
  state = 0;
  for (char c : text.substr(2)) {
    int digit = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                       : -1;
    if (digit < 0)
      return false;
    state = state << 4 | uint64_t(digit);
  }
  return true;
}

json tensorEntries(const std::vector<TensorRef> &tensors, TensorKind kind) {
  json list = json::array();
  for (const TensorRef &t : tensors)
    list.push_back({{"name", t.name},
                    {"kind", nameOf(kind)},
                    {"dtype", nameOf(t.dtype)},
                    {"shape", t.shape}});
  return list;
}

} // namespace

//===----------------------------------------------------------------------===//
// Saving
//===----------------------------------------------------------------------===//

json buildManifest(const CheckpointInfo &info, json tensors,
                   const std::map<std::string, FileDigest> &files,
                   const json &extra) {
  json digests = json::object();
  for (const auto &[name, digest] : files)
    digests[name] = {{"bytes", digest.bytes}, {"crc32", digest.crc32}};
  json manifest = {
      {"format", kCheckpointFormat},
      {"model", info.model},
      {"model_hash", info.modelHash},
      {"model_path", info.modelPath},
      {"plan", info.plan},
      {"step", info.step},
      {"data",
       {{"position", info.dataPosition},
        {"rng_state", formatState(info.rngState)}}},
      {"optimizer", {{"name", info.optimizer}, {"config", info.optimizerConfig}}},
      {"tensors", std::move(tensors)},
      {"files", std::move(digests)}};
  manifest.update(extra);
  return manifest;
}

void saveCheckpoint(const std::string &dir, const CheckpointInfo &info,
                    const std::vector<TensorRef> &parameters,
                    const std::vector<TensorRef> &optimizerState,
                    int64_t keep) {
  VersionSave save(dir, info.step, SaveNonce::fresh());
  beginVersionSave(save);
  std::map<std::string, FileDigest> files;
  try {
    // "format": "pt" lets Hugging Face's loaders take the parameters as
    // PyTorch tensors.
    files[kModelFile] = writeSafetensors(pathIn(save.tmp, kModelFile),
                                         parameters, {{"format", "pt"}});
    files[kOptimizerFile] =
        writeSafetensors(pathIn(save.tmp, kOptimizerFile), optimizerState);
  } catch (...) {
    abandonVersionSave(save);
    throw;
  }
  json tensors = tensorEntries(parameters, TensorKind::Parameter);
  for (json &t : tensorEntries(optimizerState, TensorKind::OptimizerState))
    tensors.push_back(std::move(t));
  publishVersion(save, buildManifest(info, tensors, files, json::object()),
                 keep);
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

namespace {

json readManifest(const CheckpointVersion &version) {
  checkInsideVersion(version, kManifest);
  std::string path = pathIn(version.folder, kManifest);
  std::error_code ec;
  BMRT_CHECK(fs::exists(path, ec), checkpointLabel(version) + ": '" +
                                       version.folder + "' has no " +
                                       kManifest +
                                       " (an incomplete or foreign folder)");
  json manifest = json::parse(readTextFile(path), nullptr,
                              /*allow_exceptions=*/false);
  std::string where = manifestLabel(version);
  BMRT_CHECK(!manifest.is_discarded() && manifest.is_object(),
             where + " is not a valid JSON object");
  BMRT_CHECK(
      manifest.value("format", json()) == kCheckpointFormat,
      where + " has format " + manifest.value("format", json()).dump() +
          "; this runtime reads format " + std::to_string(kCheckpointFormat));
  return manifest;
}

CheckpointInfo parseFields(const std::string &where, const json &manifest) {
  CheckpointInfo info;
  std::string state;
  try {
    info.model = manifest.at("model");
    info.modelHash = manifest.at("model_hash");
    info.modelPath = manifest.value("model_path", std::string());
    info.plan = manifest.at("plan");
    info.step = manifest.at("step");
    info.dataPosition = manifest.at("data").at("position");
    state = manifest.at("data").at("rng_state");
    info.optimizer = manifest.at("optimizer").at("name");
    info.optimizerConfig = manifest.at("optimizer").at("config");
  } catch (const json::exception &e) {
    BMRT_FAIL(where + " lacks a field or has one of the wrong type (" +
              e.what() + ")");
  }
  BMRT_CHECK(parseState(state, info.rngState),
             where + ": rng_state '" + state +
                 "' is not 0x and 16 hex digits");
  return info;
}

/// The manifest's fields, whose step must be the version folder's: an
/// edited step would resume the data and schedule elsewhere.
CheckpointInfo parseInfo(const CheckpointVersion &version,
                         const json &manifest) {
  std::string where = manifestLabel(version);
  CheckpointInfo info = parseFields(where, manifest);
  BMRT_CHECK(version.step < 0 || info.step == version.step,
             where + " says step " + std::to_string(info.step) +
                 ", but its folder is '" + versionName(version.step) + "'");
  return info;
}

/// What the manifest says about one tensor.
struct ListedTensor {
  std::string name;
  TensorKind kind;
  DType dtype;
  Shape shape;
};

std::vector<ListedTensor> parseTensorList(const std::string &where,
                                          const json &manifest) {
  std::vector<ListedTensor> list;
  try {
    for (const json &t : manifest.at("tensors")) {
      ListedTensor l;
      l.name = t.at("name");
      std::string kind = t.at("kind"), dtype = t.at("dtype");
      l.shape = t.at("shape").get<Shape>();
      BMRT_CHECK(kind == nameOf(TensorKind::Parameter) ||
                     kind == nameOf(TensorKind::OptimizerState),
                 where + ": tensor '" + l.name + "' has kind '" + kind + "'");
      l.kind = kind == nameOf(TensorKind::Parameter)
                   ? TensorKind::Parameter
                   : TensorKind::OptimizerState;
      BMRT_CHECK(parseDType(dtype, l.dtype),
                 where + ": tensor '" + l.name + "' has dtype '" + dtype + "'");
      list.push_back(std::move(l));
    }
  } catch (const json::exception &e) {
    BMRT_FAIL(where + " has a malformed tensor list (" + e.what() + ")");
  }
  return list;
}

/// Checks that a safetensors file holds exactly the manifest's tensors of
/// its kind, with their dtypes and shapes.
void matchFile(const std::string &where, const char *file,
               const std::vector<HostTensor> &held,
               const std::vector<ListedTensor> &listed, TensorKind kind) {
  size_t count = 0;
  for (const ListedTensor &l : listed) {
    if (l.kind != kind)
      continue;
    ++count;
    const HostTensor *t = findTensor(held, l.name);
    BMRT_CHECK(t, where + " lists " + nameOf(kind) + " '" + l.name +
                      "' but '" + file + "' does not hold it");
    BMRT_CHECK(t->dtype == l.dtype && t->shape == l.shape,
               where + ": '" + file + "' holds '" + l.name + "' as " +
                   nameOf(t->dtype) + formatShape(t->shape) + " but " +
                   kManifest + " says " + nameOf(l.dtype) +
                   formatShape(l.shape));
  }
  BMRT_CHECK(count == held.size(),
             where + ": '" + file + "' holds " + std::to_string(held.size()) +
                 " tensors but " + kManifest + " lists " +
                 std::to_string(count));
}

/// The two files of an unsharded version, each checked against its digest.
void readUnshardedTensors(const CheckpointVersion &version,
                          const json &manifest, Checkpoint &c) {
  std::string where = manifestLabel(version);
  std::vector<ListedTensor> listed = parseTensorList(where, manifest);
  std::map<std::string, FileDigest> digests =
      parseFileDigests(version, manifest);
  for (const char *file : {kModelFile, kOptimizerFile})
    BMRT_CHECK(digests.count(file),
               where + " records no size and CRC of '" + file + "'");
  BMRT_CHECK(digests.size() == 2,
             where + " records files other than '" + kModelFile + "' and '" +
                 kOptimizerFile + "'");
  c.parameters =
      readVersionFile(version, kModelFile, digests[kModelFile]).tensors;
  c.optimizerState =
      readVersionFile(version, kOptimizerFile, digests[kOptimizerFile])
          .tensors;
  matchFile(where, kModelFile, c.parameters, listed, TensorKind::Parameter);
  matchFile(where, kOptimizerFile, c.optimizerState, listed,
            TensorKind::OptimizerState);
}

} // namespace

void withCheckpointVersion(
    const std::string &dir,
    const std::function<void(const CheckpointVersion &)> &read) {
  CheckpointVersion version = resolveCheckpoint(dir);
  try {
    read(version);
    return;
  } catch (const Error &) {
    // A version vanishes under a reader only when a trainer prunes it (at
    // its next save with --keep 1, the N-th with --keep N), and pruning
    // follows the publication of a newer version: resolve once more and
    // read that. Only a vanished version, and only once: one that is
    // still there is damaged, whatever its error says.
    std::error_code ec;
    if (!version.resolved || fs::exists(version.folder, ec))
      throw;
  }
  read(resolveCheckpoint(dir));
}

CheckpointInfo readCheckpointInfo(const CheckpointVersion &version) {
  return parseInfo(version, readManifest(version));
}

CheckpointInfo readCheckpointInfo(const std::string &dir) {
  CheckpointInfo info;
  withCheckpointVersion(dir, [&](const CheckpointVersion &version) {
    info = readCheckpointInfo(version);
  });
  return info;
}

Checkpoint loadCheckpoint(const CheckpointVersion &version,
                          const std::string &model,
                          const std::string &modelHash) {
  Checkpoint c;
  c.folder = version.folder;
  json manifest = readManifest(version);
  c.info = parseInfo(version, manifest);
  BMRT_CHECK(c.info.model == model && c.info.modelHash == modelHash,
             checkpointLabel(version) + " is of model '" + c.info.model +
                 "' (hash " + c.info.modelHash + "), not '" + model +
                 "' (hash " + modelHash + ")");
  if (isShardedManifest(manifest))
    readShardedTensors(version, manifest, c.parameters, c.optimizerState);
  else
    readUnshardedTensors(version, manifest, c);
  return c;
}

Checkpoint loadCheckpoint(const std::string &dir, const std::string &model,
                          const std::string &modelHash) {
  Checkpoint c;
  withCheckpointVersion(dir, [&](const CheckpointVersion &version) {
    c = loadCheckpoint(version, model, modelHash);
  });
  return c;
}

const HostTensor &Checkpoint::tensor(TensorKind kind, const std::string &name,
                                     DType dtype, const Shape &shape) const {
  const std::vector<HostTensor> &list =
      kind == TensorKind::Parameter ? parameters : optimizerState;
  const HostTensor *t = findTensor(list, name);
  std::string what =
      kind == TensorKind::Parameter ? "parameter" : "optimizer state";
  BMRT_CHECK(t, "checkpoint '" + folder + "' has no " + what + " '" + name +
                    "'" +
                    (kind == TensorKind::OptimizerState
                         ? " (was it written with another optimizer?)"
                         : ""));
  BMRT_CHECK(t->dtype == dtype && t->shape == shape,
             "checkpoint '" + folder + "' holds " + what + " '" + name +
                 "' as " + nameOf(t->dtype) + formatShape(t->shape) +
                 "; the model needs " + nameOf(dtype) + formatShape(shape));
  return *t;
}

} // namespace bmrt
