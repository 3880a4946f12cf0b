//===- ShardedCheckpointLoad.cpp - reading every rank's shards ------------===//
//
// The manifest is checked whole before any shard file is read (ranks,
// file names, tiling); each file is then read once, checked against its
// size and CRC, and every tensor in it must be claimed by exactly one
// shard, so that nothing in a version goes unread or is read twice.
//
//===----------------------------------------------------------------------===//

#include "ShardedCheckpoint.h"

#include "CheckpointFolder.h"
#include "CheckpointVersions.h"
#include "ShardTiling.h"

#include "bmrt/Error.h"
#include "bmrt/Sharding.h"

#include <cstring>
#include <set>

namespace bmrt {

using json = nlohmann::json;

namespace {

/// The rank count of the manifest's mesh: the product of its axis sizes.
int meshRanksOf(const std::string &where, const json &manifest) {
  int64_t ranks = 1;
  try {
    for (const auto &[axis, size] : manifest.at("mesh").items()) {
      int64_t n = size.get<int64_t>();
      BMRT_CHECK(n >= 1 && n <= (int64_t(1) << 20), where + ": mesh axis '" +
                                                        axis + "' has size " +
                                                        std::to_string(n));
      ranks *= n;
      BMRT_CHECK(ranks <= (int64_t(1) << 20),
                 where + ": the mesh has more than 2^20 ranks");
    }
  } catch (const json::exception &e) {
    BMRT_FAIL(where + " has no valid \"mesh\" (" + e.what() + ")");
  }
  return int(ranks);
}

TensorShard parseShard(const std::string &where, const std::string &name,
                       const json &entry, int meshRanks) {
  TensorShard shard;
  shard.rank = entry.at("rank");
  std::string file = entry.at("file");
  std::string of = where + ": a shard of '" + name + "' on rank " +
                   std::to_string(shard.rank);
  BMRT_CHECK(shard.rank >= 0 && shard.rank < meshRanks,
             of + " lies outside the mesh's " + std::to_string(meshRanks) +
                 " ranks");
  BMRT_CHECK(file == shardFileOf(shard.rank),
             of + " names the file '" + file + "', not '" +
                 shardFileOf(shard.rank) + "'");
  shard.offsets = entry.at("offsets").get<Shape>();
  shard.shape = entry.at("shape").get<Shape>();
  if (entry.contains("flat_range")) {
    shard.flatBegin = entry["flat_range"].at(0);
    shard.flatEnd = entry["flat_range"].at(1);
    BMRT_CHECK(shard.flatBegin >= 0 && shard.flatBegin <= shard.flatEnd &&
                   shard.flatEnd <= numElements(shard.shape),
               of + " has flat_range [" + std::to_string(shard.flatBegin) +
                   ", " + std::to_string(shard.flatEnd) + "] outside " +
                   formatShape(shard.shape));
  }
  return shard;
}

ShardedTensor parseTensor(const std::string &where, const json &entry,
                          int meshRanks) {
  ShardedTensor t;
  try {
    t.name = entry.at("name");
    std::string kind = entry.at("kind"), dtype = entry.at("dtype");
    t.kind = kind == nameOf(TensorKind::Parameter) ? TensorKind::Parameter
                                                   : TensorKind::OptimizerState;
    BMRT_CHECK(kind == nameOf(t.kind),
               where + ": tensor '" + t.name + "' has kind '" + kind + "'");
    BMRT_CHECK(parseDType(dtype, t.dtype),
               where + ": tensor '" + t.name + "' has dtype '" + dtype + "'");
    t.global = entry.at("shape").get<Shape>();
    for (const json &s : entry.at("shards"))
      t.shards.push_back(parseShard(where, t.name, s, meshRanks));
  } catch (const json::exception &e) {
    BMRT_FAIL(where + " lacks a field or has one of the wrong type (" +
              e.what() + ")");
  }
  return t;
}

/// Whether `file` is "shards/rankNNNNN.safetensors" of a rank of the mesh.
bool isShardFile(const std::string &file, int meshRanks) {
  const char *prefix = "shards/rank";
  if (file.compare(0, std::strlen(prefix), prefix) != 0)
    return false;
  int rank = std::atoi(file.c_str() + std::strlen(prefix));
  return rank >= 0 && rank < meshRanks && file == shardFileOf(rank);
}

/// The shard files, each read once (checked against its size and CRC) when
/// a shard first needs it, and the (file, tensor) pairs shards claimed.
class ShardFiles {
public:
  ShardFiles(const CheckpointVersion &version, const std::string &where,
             const json &manifest, int meshRanks)
      : version(version), where(where),
        digests(parseFileDigests(version, manifest)) {
    for (const auto &[file, digest] : digests)
      BMRT_CHECK(isShardFile(file, meshRanks),
                 where + " records '" + file +
                     "', which is no shard file of the mesh");
  }

  /// The tensor holding shard `s` of `t`, claimed: a second claim of it is
  /// refused.
  const HostTensor &claim(const ShardedTensor &t, const TensorShard &s) {
    std::string file = shardFileOf(s.rank);
    std::string path = pathIn(version.folder, file);
    BMRT_CHECK(claimed.insert({file, t.name}).second,
               where + " lists two shards of '" + t.name + "' in '" + path +
                   "'");
    const HostTensor *found = findTensor(tensorsOf(file), t.name);
    BMRT_CHECK(found, checkpointLabel(version) + ": '" + path +
                          "' does not hold its shard of '" + t.name + "'");
    Shape held = s.flat() ? Shape{s.flatEnd - s.flatBegin} : s.shape;
    BMRT_CHECK(found->dtype == t.dtype && found->shape == held,
               checkpointLabel(version) + ": '" + path + "' holds '" + t.name +
                   "' as " + nameOf(found->dtype) + formatShape(found->shape) +
                   " but " + kManifest + " says " + nameOf(t.dtype) +
                   formatShape(held));
    return *found;
  }

  /// Refuses a recorded file holding a tensor that no shard claims: the
  /// manifest would not describe the version whole.
  void checkEveryTensorClaimed() {
    for (const auto &[file, digest] : digests)
      for (const HostTensor &t : tensorsOf(file))
        BMRT_CHECK(claimed.count({file, t.name}),
                   checkpointLabel(version) + ": '" +
                       pathIn(version.folder, file) + "' holds '" + t.name +
                       "', which no shard in " + kManifest + " claims");
  }

private:
  const std::vector<HostTensor> &tensorsOf(const std::string &file) {
    auto it = files.find(file);
    if (it != files.end())
      return it->second;
    auto digest = digests.find(file);
    BMRT_CHECK(digest != digests.end(),
               where + " records no size and CRC of '" + file + "'");
    return files[file] = readVersionFile(version, file, digest->second).tensors;
  }

  const CheckpointVersion &version;
  std::string where;
  std::map<std::string, FileDigest> digests;
  std::map<std::string, std::vector<HostTensor>> files;
  std::set<std::pair<std::string, std::string>> claimed;
};

/// The global tensor from its shards, which checkTiling found to tile it.
/// Flat shards fill their box first; each box, once whole, goes into place.
HostTensor assemble(const ShardedTensor &t, ShardFiles &files) {
  HostTensor global;
  global.name = t.name;
  global.dtype = t.dtype;
  global.shape = t.global;
  global.data.resize(numElements(t.global) * sizeOf(t.dtype));
  size_t width = sizeOf(t.dtype);
  std::map<std::pair<Shape, Shape>, std::vector<uint8_t>> boxes;
  for (const TensorShard &s : t.shards) {
    const HostTensor &part = files.claim(t, s);
    std::vector<uint8_t> &box = boxes[{s.offsets, s.shape}];
    box.resize(numElements(s.shape) * width);
    std::memcpy(box.data() + (s.flat() ? s.flatBegin : 0) * width,
                part.data.data(), part.data.size());
  }
  for (const auto &[where, box] : boxes)
    copyBox(box.data(), where.second, Shape(where.second.size(), 0),
            global.data.data(), t.global, where.first, where.second, width);
  return global;
}

/// Every tensor of the manifest, its shards checked against the mesh and
/// each other before any file is read.
std::vector<ShardedTensor> parseTensors(const std::string &where,
                                        const json &manifest) {
  BMRT_CHECK(manifest.contains("tensors") && manifest["tensors"].is_array(),
             where + " has no tensor list");
  int meshRanks = meshRanksOf(where, manifest);
  std::vector<ShardedTensor> tensors;
  std::set<std::string> names;
  for (const json &entry : manifest["tensors"]) {
    ShardedTensor t = parseTensor(where, entry, meshRanks);
    BMRT_CHECK(names.insert(t.name).second,
               where + " lists tensor '" + t.name + "' twice");
    checkTiling(where, t);
    tensors.push_back(std::move(t));
  }
  return tensors;
}

} // namespace

void readShardedTensors(const CheckpointVersion &version, const json &manifest,
                        std::vector<HostTensor> &parameters,
                        std::vector<HostTensor> &optimizerState) {
  std::string where = manifestLabel(version);
  std::vector<ShardedTensor> tensors = parseTensors(where, manifest);
  ShardFiles files(version, where, manifest, meshRanksOf(where, manifest));
  for (const ShardedTensor &t : tensors)
    (t.kind == TensorKind::Parameter ? parameters : optimizerState)
        .push_back(assemble(t, files));
  files.checkEveryTensorClaimed();
}

} // namespace bmrt
