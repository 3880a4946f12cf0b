//===- ShardedCheckpoint.cpp - checkpoints written by every rank ----------===//

#include "ShardedCheckpoint.h"

#include "CheckpointFolder.h"
#include "FileIO.h"

#include "bmrt/Error.h"
#include "bmrt/Sharding.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

namespace bmrt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

/// Every rank must find the temporary folder without being told: its name
/// depends on `dir` alone.
std::string tempFolderOf(const std::string &dir) {
  return checkpointTempFolder(dir, "sharded");
}

json shardEntry(const TensorShard &shard) {
  json entry = {{"file", shardFileOf(shard.rank)},
                {"rank", shard.rank},
                {"offsets", shard.offsets},
                {"shape", shard.shape},
                {"coordinates", shard.coordinates}};
  if (shard.flat())
    entry["flat_range"] = {shard.flatBegin, shard.flatEnd};
  return entry;
}

json tensorEntry(const ShardedTensor &t) {
  json shards = json::array();
  for (const TensorShard &shard : t.shards)
    shards.push_back(shardEntry(shard));
  return {{"name", t.name},
          {"kind", nameOf(t.kind)},
          {"dtype", nameOf(t.dtype)},
          {"shape", t.global},
          {"shards", shards}};
}

std::string where(const std::string &dir) {
  return "checkpoint '" + dir + "': manifest.json";
}

ShardedTensor parseTensor(const std::string &dir, const json &entry) {
  ShardedTensor t;
  try {
    t.name = entry.at("name");
    std::string kind = entry.at("kind"), dtype = entry.at("dtype");
    t.kind = kind == nameOf(TensorKind::Parameter) ? TensorKind::Parameter
                                                    : TensorKind::OptimizerState;
    BMRT_CHECK(kind == nameOf(t.kind), where(dir) + ": tensor '" + t.name +
                                           "' has kind '" + kind + "'");
    BMRT_CHECK(parseDType(dtype, t.dtype), where(dir) + ": tensor '" +
                                               t.name + "' has dtype '" +
                                               dtype + "'");
    t.global = entry.at("shape").get<Shape>();
    for (const json &s : entry.at("shards")) {
      TensorShard shard;
      shard.rank = s.at("rank");
      shard.offsets = s.at("offsets").get<Shape>();
      shard.shape = s.at("shape").get<Shape>();
      if (s.contains("flat_range")) {
        shard.flatBegin = s["flat_range"].at(0);
        shard.flatEnd = s["flat_range"].at(1);
        BMRT_CHECK(shard.flatBegin >= 0 && shard.flatBegin <= shard.flatEnd &&
                       shard.flatEnd <= numElements(shard.shape),
                   where(dir) + ": a shard of '" + t.name +
                       "' has flat_range [" + std::to_string(shard.flatBegin) +
                       ", " + std::to_string(shard.flatEnd) + "] outside " +
                       formatShape(shard.shape));
      }
      t.shards.push_back(shard);
    }
  } catch (const json::exception &e) {
    BMRT_FAIL(where(dir) + " lacks a field or has one of the wrong type (" +
              e.what() + ")");
  }
  return t;
}

/// The shard files read so far, by name: each is read once.
class ShardFiles {
public:
  ShardFiles(const std::string &dir, const std::string &folder)
      : dir(dir), folder(folder) {}

  const HostTensor &shard(const ShardedTensor &t, const TensorShard &s) {
    std::string file = shardFileOf(s.rank);
    auto it = files.find(file);
    if (it == files.end()) {
      std::string path = (fs::path(folder) / file).string();
      std::error_code ec;
      BMRT_CHECK(fs::exists(path, ec), "checkpoint '" + dir +
                                           "': the shard file '" + path +
                                           "' is missing");
      it = files.emplace(file, readSafetensors(path).tensors).first;
    }
    const HostTensor *found = findTensor(it->second, t.name);
    std::string path = (fs::path(folder) / file).string();
    BMRT_CHECK(found, "checkpoint '" + dir + "': '" + path +
                          "' does not hold its shard of '" + t.name + "'");
    Shape held = s.flat() ? Shape{s.flatEnd - s.flatBegin} : s.shape;
    BMRT_CHECK(found->dtype == t.dtype && found->shape == held,
               "checkpoint '" + dir + "': '" + path + "' holds '" + t.name +
                   "' as " + nameOf(found->dtype) +
                   formatShape(found->shape) + " but manifest.json says " +
                   nameOf(t.dtype) + formatShape(held));
    return *found;
  }

private:
  std::string dir, folder;
  std::map<std::string, std::vector<HostTensor>> files;
};

/// The global tensor from its shards, which must tile it. Flat shards fill
/// their box first; each box, once whole, goes into place.
HostTensor assemble(const std::string &dir, const ShardedTensor &t,
                    ShardFiles &files) {
  HostTensor global;
  global.name = t.name;
  global.dtype = t.dtype;
  global.shape = t.global;
  global.data.resize(numElements(t.global) * sizeOf(t.dtype));
  size_t width = sizeOf(t.dtype);
  std::map<std::pair<Shape, Shape>, std::vector<uint8_t>> boxes;
  int64_t covered = 0;
  for (const TensorShard &s : t.shards) {
    const HostTensor &part = files.shard(t, s);
    BMRT_CHECK(s.offsets.size() == t.global.size() &&
                   s.shape.size() == t.global.size(),
               where(dir) + ": a shard of '" + t.name + "' has offsets " +
                   formatShape(s.offsets) + " for " + formatShape(t.global));
    std::vector<uint8_t> &box = boxes[{s.offsets, s.shape}];
    box.resize(numElements(s.shape) * width);
    std::memcpy(box.data() + (s.flat() ? s.flatBegin : 0) * width,
                part.data.data(), part.data.size());
    covered += numElements(part.shape);
  }
  BMRT_CHECK(covered == numElements(t.global),
             where(dir) + ": the shards of '" + t.name + "' hold " +
                 std::to_string(covered) + " elements of its " +
                 std::to_string(numElements(t.global)));
  for (const auto &[where, box] : boxes)
    copyBox(box.data(), where.second, Shape(where.second.size(), 0),
            global.data.data(), t.global, where.first, where.second, width);
  return global;
}

} // namespace

std::string shardFileOf(int rank) {
  char name[48];
  std::snprintf(name, sizeof name, "shards/rank%05d.safetensors", rank);
  return name;
}

void beginShardedSave(const std::string &dir) {
  std::string tmp = tempFolderOf(dir);
  createCheckpointTempFolder(dir, tmp);
  std::error_code ec;
  fs::create_directory(fs::path(tmp) / "shards", ec);
  BMRT_CHECK(!ec, "cannot create '" + tmp + "/shards': " + ec.message());
}

void writeRankShards(const std::string &dir, int rank,
                     const std::vector<TensorRef> &shards) {
  std::string tmp = tempFolderOf(dir);
  writeSafetensors((fs::path(tmp) / shardFileOf(rank)).string(), shards);
}

void finishShardedSave(const std::string &dir, const CheckpointInfo &info,
                       const std::map<std::string, int> &mesh,
                       const std::vector<ShardedTensor> &tensors) {
  std::string tmp = tempFolderOf(dir);
  syncDirectory((fs::path(tmp) / "shards").string());
  json list = json::array();
  for (const ShardedTensor &t : tensors)
    list.push_back(tensorEntry(t));
  publishCheckpointFolder(dir, tmp, info, list,
                          {{"sharded", true}, {"mesh", mesh}});
}

bool isShardedManifest(const json &manifest) {
  return manifest.value("sharded", false) == true;
}

void readShardedTensors(const std::string &dir, const std::string &folder,
                        const json &manifest,
                        std::vector<HostTensor> &parameters,
                        std::vector<HostTensor> &optimizerState) {
  BMRT_CHECK(manifest.contains("tensors") && manifest["tensors"].is_array(),
             where(dir) + " has no tensor list");
  ShardFiles files(dir, folder);
  for (const json &entry : manifest["tensors"]) {
    ShardedTensor t = parseTensor(dir, entry);
    (t.kind == TensorKind::Parameter ? parameters : optimizerState)
        .push_back(assemble(dir, t, files));
  }
}

} // namespace bmrt
