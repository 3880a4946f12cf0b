//===- Checkpoint.cpp - atomic training checkpoints -----------------------===//

#include "Checkpoint.h"

#include "CheckpointFolder.h"
#include "FileIO.h"
#include "ShardedCheckpoint.h"

#include "bmrt/Error.h"

#include <cstdio>
#include <filesystem>
#include <system_error>

#include <unistd.h>

namespace bmrt {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char *nameOf(TensorKind kind) {
  return kind == TensorKind::Parameter ? "parameter" : "optimizer_state";
}

namespace {

constexpr const char *kManifest = "manifest.json";
constexpr const char *kModelFile = "model.safetensors";
constexpr const char *kOptimizerFile = "optimizer.safetensors";

/// "ckpt/" and "ckpt" are one folder; the temporary and old siblings hang
/// off the name without its slashes.
std::string withoutTrailingSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  return dir;
}

std::string join(const std::string &dir, const char *file) {
  return (fs::path(dir) / file).string();
}

/// A folder saving may replace or delete: one holding a manifest, or an
/// empty one. Anything else could be a user's folder named by mistake.
bool isReplaceable(const std::string &dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return false;
  return fs::exists(join(dir, kManifest), ec) || fs::is_empty(dir, ec);
}

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

//===----------------------------------------------------------------------===//
// Saving
//===----------------------------------------------------------------------===//

json tensorEntries(const std::vector<TensorRef> &tensors, TensorKind kind) {
  json list = json::array();
  for (const TensorRef &t : tensors)
    list.push_back({{"name", t.name},
                    {"kind", nameOf(kind)},
                    {"dtype", nameOf(t.dtype)},
                    {"shape", t.shape}});
  return list;
}

json buildManifest(const CheckpointInfo &info, json tensors) {
  return {{"format", kCheckpointFormat},
          {"model", info.model},
          {"model_hash", info.modelHash},
          {"model_path", info.modelPath},
          {"plan", info.plan},
          {"step", info.step},
          {"data",
           {{"position", info.dataPosition},
            {"rng_state", formatState(info.rngState)}}},
          {"optimizer",
           {{"name", info.optimizer}, {"config", info.optimizerConfig}}},
          {"tensors", std::move(tensors)}};
}

/// Writes the tensor files into the fresh folder `tmp`.
void writeTensorFiles(const std::string &tmp,
                      const std::vector<TensorRef> &parameters,
                      const std::vector<TensorRef> &optimizerState) {
  // "format": "pt" lets Hugging Face's loaders take the parameters as
  // PyTorch tensors.
  writeSafetensors(join(tmp, kModelFile), parameters, {{"format", "pt"}});
  writeSafetensors(join(tmp, kOptimizerFile), optimizerState);
}

void renameOrFail(const std::string &from, const std::string &to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  BMRT_CHECK(!ec,
             "cannot rename '" + from + "' to '" + to + "': " + ec.message());
}

/// Puts the complete folder `tmp` in the place of `base`, keeping the
/// previous checkpoint as `base`.old until the new one is there.
void publish(const std::string &tmp, const std::string &base,
             const std::string &parent) {
  std::string old = base + ".old";
  std::error_code ec;
  bool movedOld = false;
  if (fs::exists(base, ec)) {
    BMRT_CHECK(!fs::exists(old, ec) || isReplaceable(old),
               "cannot save the checkpoint: '" + old +
                   "' exists and is not a checkpoint");
    fs::remove_all(old, ec);
    BMRT_CHECK(!ec, "cannot remove '" + old + "': " + ec.message());
    renameOrFail(base, old);
    movedOld = true;
  }
  fs::rename(tmp, base, ec);
  if (ec) {
    std::error_code ignored;
    if (movedOld)
      fs::rename(old, base, ignored);
    BMRT_FAIL("cannot rename '" + tmp + "' to '" + base + "': " + ec.message());
  }
  syncDirectory(parent);
  // Losing this removal to a crash is harmless: loading prefers `base`,
  // and the next save removes `old` again. (A crash between the renames
  // leaves an `old` that this save did not move; it is ours too.)
  if (isReplaceable(old))
    fs::remove_all(old, ec);
}

std::string parentOf(const std::string &base) {
  std::string parent = fs::path(base).parent_path().string();
  return parent.empty() ? "." : parent;
}

} // namespace

std::string checkpointTempFolder(const std::string &dir,
                                 const std::string &tag) {
  return withoutTrailingSlashes(dir) + ".tmp-" + tag;
}

void createCheckpointTempFolder(const std::string &dir,
                                const std::string &tmp) {
  std::string base = withoutTrailingSlashes(dir);
  BMRT_CHECK(!base.empty(), "the checkpoint folder name is empty");
  std::string parent = parentOf(base);
  std::error_code ec;
  BMRT_CHECK(
      fs::is_directory(parent, ec),
      "cannot save the checkpoint '" + dir + "': '" + parent + "' " +
          (fs::exists(parent, ec) ? "is not a folder" : "does not exist"));
  BMRT_CHECK(!fs::exists(base, ec) || isReplaceable(base),
             "cannot save the checkpoint '" + dir +
                 "': it exists and is not a checkpoint (no " + kManifest +
                 "); choose another folder");
  // A folder of this name is a crashed save: never a checkpoint, since it
  // was never renamed.
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  BMRT_CHECK(!ec, "cannot create the checkpoint folder '" + tmp +
                      "': " + ec.message());
}

void publishCheckpointFolder(const std::string &dir, const std::string &tmp,
                             const CheckpointInfo &info,
                             const nlohmann::json &tensors,
                             const nlohmann::json &extra) {
  std::string base = withoutTrailingSlashes(dir);
  try {
    // The manifest goes last: a folder without one is never a checkpoint.
    json manifest = buildManifest(info, tensors);
    manifest.update(extra);
    writeTextFile(join(tmp, kManifest), manifest.dump(2) + "\n");
    syncDirectory(tmp);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  publish(tmp, base, parentOf(base));
}

void saveCheckpoint(const std::string &dir, const CheckpointInfo &info,
                    const std::vector<TensorRef> &parameters,
                    const std::vector<TensorRef> &optimizerState) {
  std::string tmp = checkpointTempFolder(dir, std::to_string(::getpid()));
  createCheckpointTempFolder(dir, tmp);
  try {
    writeTensorFiles(tmp, parameters, optimizerState);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
  json tensors = tensorEntries(parameters, TensorKind::Parameter);
  for (json &t : tensorEntries(optimizerState, TensorKind::OptimizerState))
    tensors.push_back(std::move(t));
  publishCheckpointFolder(dir, tmp, info, tensors, json::object());
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

namespace {

/// The folder to load: `base`, or `base`.old when a save crashed between
/// moving the old checkpoint aside and putting the new one in place.
std::string folderToLoad(const std::string &dir) {
  std::string base = withoutTrailingSlashes(dir);
  std::error_code ec;
  if (fs::exists(base, ec))
    return base;
  if (fs::exists(join(base + ".old", kManifest), ec))
    return base + ".old";
  BMRT_FAIL("there is no checkpoint in '" + dir + "': it does not exist");
}

/// The manifest's one-line error prefix.
std::string where(const std::string &dir) {
  return "checkpoint '" + dir + "': " + kManifest;
}

json readManifest(const std::string &dir, const std::string &folder) {
  std::string path = join(folder, kManifest);
  std::error_code ec;
  BMRT_CHECK(fs::exists(path, ec), "checkpoint '" + dir + "' has no " +
                                       kManifest +
                                       " (an incomplete or foreign folder)");
  json manifest = json::parse(readTextFile(path), nullptr,
                              /*allow_exceptions=*/false);
  BMRT_CHECK(!manifest.is_discarded() && manifest.is_object(),
             where(dir) + " is not a valid JSON object");
  BMRT_CHECK(
      manifest.value("format", json()) == kCheckpointFormat,
      where(dir) + " has format " + manifest.value("format", json()).dump() +
          "; this runtime reads format " + std::to_string(kCheckpointFormat));
  return manifest;
}

CheckpointInfo parseInfo(const std::string &dir, const json &manifest) {
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
    BMRT_FAIL(where(dir) + " lacks a field or has one of the wrong type (" +
              e.what() + ")");
  }
  BMRT_CHECK(parseState(state, info.rngState),
             where(dir) + ": rng_state '" + state +
                 "' is not 0x and 16 hex digits");
  return info;
}

/// What the manifest says about one tensor.
struct ListedTensor {
  std::string name;
  TensorKind kind;
  DType dtype;
  Shape shape;
};

std::vector<ListedTensor> parseTensorList(const std::string &dir,
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
                 where(dir) + ": tensor '" + l.name + "' has kind '" + kind +
                     "'");
      l.kind = kind == nameOf(TensorKind::Parameter)
                   ? TensorKind::Parameter
                   : TensorKind::OptimizerState;
      BMRT_CHECK(parseDType(dtype, l.dtype), where(dir) + ": tensor '" +
                                                 l.name + "' has dtype '" +
                                                 dtype + "'");
      list.push_back(std::move(l));
    }
  } catch (const json::exception &e) {
    BMRT_FAIL(where(dir) + " has a malformed tensor list (" + e.what() + ")");
  }
  return list;
}

/// Checks that a safetensors file holds exactly the manifest's tensors of
/// its kind, with their dtypes and shapes.
void matchFile(const std::string &dir, const char *file,
               const std::vector<HostTensor> &held,
               const std::vector<ListedTensor> &listed, TensorKind kind) {
  size_t count = 0;
  for (const ListedTensor &l : listed) {
    if (l.kind != kind)
      continue;
    ++count;
    const HostTensor *t = findTensor(held, l.name);
    BMRT_CHECK(t, "checkpoint '" + dir + "': " + kManifest + " lists " +
                      nameOf(kind) + " '" + l.name + "' but '" + file +
                      "' does not hold it");
    BMRT_CHECK(t->dtype == l.dtype && t->shape == l.shape,
               "checkpoint '" + dir + "': '" + file + "' holds '" + l.name +
                   "' as " + nameOf(t->dtype) + formatShape(t->shape) +
                   " but " + kManifest + " says " + nameOf(l.dtype) +
                   formatShape(l.shape));
  }
  BMRT_CHECK(count == held.size(),
             "checkpoint '" + dir + "': '" + file + "' holds " +
                 std::to_string(held.size()) + " tensors but " + kManifest +
                 " lists " + std::to_string(count));
}

} // namespace

bool checkpointExists(const std::string &dir) {
  std::string base = withoutTrailingSlashes(dir);
  std::error_code ec;
  return fs::exists(join(base, kManifest), ec) ||
         fs::exists(join(base + ".old", kManifest), ec);
}

CheckpointInfo readCheckpointInfo(const std::string &dir) {
  std::string folder = folderToLoad(dir);
  return parseInfo(dir, readManifest(dir, folder));
}

Checkpoint loadCheckpoint(const std::string &dir, const std::string &model,
                          const std::string &modelHash) {
  Checkpoint c;
  c.folder = folderToLoad(dir);
  json manifest = readManifest(dir, c.folder);
  c.info = parseInfo(dir, manifest);
  BMRT_CHECK(c.info.model == model && c.info.modelHash == modelHash,
             "checkpoint '" + dir + "' is of model '" + c.info.model +
                 "' (hash " + c.info.modelHash + "), not '" + model +
                 "' (hash " + modelHash + ")");
  if (isShardedManifest(manifest)) {
    readShardedTensors(dir, c.folder, manifest, c.parameters,
                       c.optimizerState);
    return c;
  }
  std::vector<ListedTensor> listed = parseTensorList(dir, manifest);
  c.parameters = readSafetensors(join(c.folder, kModelFile)).tensors;
  c.optimizerState = readSafetensors(join(c.folder, kOptimizerFile)).tensors;
  matchFile(dir, kModelFile, c.parameters, listed, TensorKind::Parameter);
  matchFile(dir, kOptimizerFile, c.optimizerState, listed,
            TensorKind::OptimizerState);
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
