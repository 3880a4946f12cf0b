//===- ShardedCheckpoint.cpp - checkpoints written by every rank ----------===//

#include "ShardedCheckpoint.h"

#include "CheckpointFolder.h"
#include "CheckpointVersions.h"
#include "FileIO.h"

#include "bmrt/Error.h"

#include <cstdio>
#include <filesystem>

namespace bmrt {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

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

//===----------------------------------------------------------------------===//
// Saving
//===----------------------------------------------------------------------===//

/// Rank 0 creates the temporary folder and every rank learns its name,
/// rank 0's nonce, through the sum (the others add zeros).
VersionSave beginOnEveryRank(const std::string &dir, int64_t step,
                             const SaveRanks &ranks) {
  std::vector<int64_t> nonce(2, 0);
  if (ranks.rank == 0) {
    SaveNonce fresh = SaveNonce::fresh();
    VersionSave save(dir, step, fresh);
    beginVersionSave(save);
    std::error_code ec;
    fs::create_directory(fs::path(save.tmp) / "shards", ec);
    BMRT_CHECK(!ec, "cannot create '" + save.tmp + "/shards': " + ec.message());
    nonce = {fresh.pid, fresh.time};
  }
  ranks.sum(nonce);
  return VersionSave(dir, step, {nonce[0], nonce[1]});
}

/// Every rank writes its file; rank 0 learns each file's size and CRC
/// through the sum, each rank filling its own two entries: no file is read
/// back.
std::map<std::string, FileDigest>
writeOnEveryRank(const VersionSave &save, const std::vector<TensorRef> &mine,
                 const SaveRanks &ranks) {
  std::vector<int64_t> digests(2 * size_t(ranks.size), 0);
  if (!mine.empty()) {
    FileDigest d = writeSafetensors(
        (fs::path(save.tmp) / shardFileOf(ranks.rank)).string(), mine);
    digests[2 * ranks.rank] = int64_t(d.bytes);
    digests[2 * ranks.rank + 1] = int64_t(d.crc32);
  }
  ranks.sum(digests);
  std::map<std::string, FileDigest> files;
  // A safetensors file has at least its 8-byte header length: a size of 0
  // is a rank that wrote nothing.
  for (int r = 0; r < ranks.size; ++r)
    if (digests[2 * r] > 0)
      files[shardFileOf(r)] = {uint64_t(digests[2 * r]),
                               uint32_t(digests[2 * r + 1])};
  return files;
}

/// Rank 0: the manifest, then the version goes into place.
void finishOnRankZero(const VersionSave &save, const CheckpointInfo &info,
                      const std::map<std::string, int> &mesh,
                      const std::vector<ShardedTensor> &tensors,
                      const std::map<std::string, FileDigest> &files,
                      int64_t keep) {
  json list = json::array();
  try {
    syncDirectory((fs::path(save.tmp) / "shards").string());
    for (const ShardedTensor &t : tensors) {
      for (const TensorShard &s : t.shards)
        BMRT_CHECK(files.count(shardFileOf(s.rank)),
                   "cannot save the checkpoint '" + save.dir + "': rank " +
                       std::to_string(s.rank) + " holds a shard of '" + t.name +
                       "' but wrote no file");
      list.push_back(tensorEntry(t));
    }
  } catch (...) {
    abandonVersionSave(save);
    throw;
  }
  publishVersion(save,
                 buildManifest(info, list, files,
                               {{"sharded", true}, {"mesh", mesh}}),
                 keep);
}

} // namespace

std::string shardFileOf(int rank) {
  char name[48];
  std::snprintf(name, sizeof name, "shards/rank%05d.safetensors", rank);
  return name;
}

void saveShardedCheckpoint(const std::string &dir, const CheckpointInfo &info,
                           const std::map<std::string, int> &mesh,
                           const std::vector<ShardedTensor> &tensors,
                           const std::vector<TensorRef> &mine,
                           const SaveRanks &ranks, int64_t keep) {
  VersionSave save = beginOnEveryRank(dir, info.step, ranks);
  std::map<std::string, FileDigest> files = writeOnEveryRank(save, mine, ranks);
  if (ranks.rank == 0)
    finishOnRankZero(save, info, mesh, tensors, files, keep);
}

bool isShardedManifest(const json &manifest) {
  return manifest.value("sharded", false) == true;
}

} // namespace bmrt
