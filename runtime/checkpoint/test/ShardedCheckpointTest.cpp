//===- ShardedCheckpointTest.cpp - every rank's shards, validated ---------===//
//
// Two ranks, run as threads that meet in an all-reduce, save a version of
// tp = 2 shards (row blocks, a replicated tensor, ZeRO-style flat ranges);
// each test then damages it as a disk or an edit would, and the load must
// refuse it in one line naming the file or tensor.
//
//===----------------------------------------------------------------------===//

#include "ShardedCheckpoint.h"

#include "TestStates.h"

#include <condition_variable>
#include <exception>
#include <filesystem>
#include <mutex>
#include <numeric>
#include <thread>

namespace bmrt::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

/// The all-reduce of a job of threads: each call returns, with the sums,
/// once every rank has made it.
class ThreadSum {
public:
  explicit ThreadSum(int ranks) : ranks(ranks) {}
  void operator()(std::vector<int64_t> &values) {
    std::unique_lock<std::mutex> lock(mutex);
    int64_t round = rounds;
    if (arrived == 0)
      total.assign(values.size(), 0);
    for (size_t i = 0; i < values.size(); ++i)
      total[i] += values[i];
    if (++arrived == ranks) {
      arrived = 0;
      result = total;
      ++rounds;
      done.notify_all();
    } else {
      done.wait(lock, [&] { return rounds != round; });
    }
    values = result;
  }

private:
  int ranks, arrived = 0;
  int64_t rounds = 0;
  std::vector<int64_t> total, result;
  std::mutex mutex;
  std::condition_variable done;
};

/// w [4, 2] split by rows over tp = 2, b [2] written by rank 0 alone, and
/// exp_avg.w as two flat ranges of its one box.
struct ShardedState {
  std::vector<float> w = std::vector<float>(8), m = std::vector<float>(8),
                     b = {0.5f, -0.5f};
  State base;

  ShardedState() {
    std::iota(w.begin(), w.end(), 0.0f);
    std::iota(m.begin(), m.end(), 100.0f);
  }
  std::vector<ShardedTensor> tensors() const {
    ShardedTensor tw{"w", TensorKind::Parameter, DType::F32, {4, 2}, {}};
    for (int r = 0; r < 2; ++r)
      tw.shards.push_back({r, {2 * r, 0}, {2, 2}, 0, -1, {{"tp", r}}});
    ShardedTensor tb{"b", TensorKind::Parameter, DType::F32, {2}, {}};
    tb.shards.push_back({0, {0}, {2}, 0, -1, {{"tp", 0}}});
    ShardedTensor tm{
        "exp_avg.w", TensorKind::OptimizerState, DType::F32, {4, 2}, {}};
    for (int r = 0; r < 2; ++r)
      tm.shards.push_back({r, {0, 0}, {4, 2}, 4 * r, 4 * r + 4, {{"tp", r}}});
    return {tw, tb, tm};
  }
  std::vector<TensorRef> mine(int rank) const {
    std::vector<TensorRef> refs = {
        {"w", DType::F32, {2, 2}, w.data() + 4 * rank},
        {"exp_avg.w", DType::F32, {4}, m.data() + 4 * rank}};
    if (rank == 0)
      refs.push_back({"b", DType::F32, {2}, b.data()});
    return refs;
  }
  void save(const std::string &dir) const {
    ThreadSum sum(2);
    std::exception_ptr failed[2];
    auto rank = [&](int r) {
      try {
        saveShardedCheckpoint(dir, base.info, {{"tp", 2}}, tensors(), mine(r),
                              {r, 2, std::ref(sum)}, kDefaultKeep);
      } catch (...) {
        failed[r] = std::current_exception();
      }
    };
    std::thread one(rank, 1);
    rank(0);
    one.join();
    for (const std::exception_ptr &e : failed)
      if (e)
        std::rethrow_exception(e);
  }
};

/// A saved sharded version and the paths the tests damage.
struct Saved {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  std::string version = versionOf(dir, 7);
  std::string manifest = version + "/manifest.json";
  std::string shard1 = version + "/shards/rank00001.safetensors";

  Saved() { ShardedState().save(dir); }
  /// The manifest with `edit` applied to it.
  template <typename F> void editManifest(F &&edit) {
    editJson(manifest, edit);
  }
  /// Shard `shard` of the manifest's tensor `index` (0 w, 1 b, 2 exp_avg.w).
  static json &shard(json &j, int index, int shard) {
    return j["tensors"][index]["shards"][shard];
  }
  /// Loads once `field` of that shard is `value`.
  Checkpoint loadWith(int index, int which, const char *field,
                      const json &value) {
    editManifest([&](json &j) { shard(j, index, which)[field] = value; });
    return load(dir);
  }
};

TEST(ShardedCheckpoint, RoundTrip) {
  Saved saved;
  Checkpoint c = load(saved.dir);
  const HostTensor &w =
      c.tensor(TensorKind::Parameter, "w", DType::F32, {4, 2});
  EXPECT_EQ(std::vector<float>(w.f32(), w.f32() + 8), ShardedState().w);
  const HostTensor &m =
      c.tensor(TensorKind::OptimizerState, "exp_avg.w", DType::F32, {4, 2});
  EXPECT_EQ(std::vector<float>(m.f32(), m.f32() + 8), ShardedState().m);
  // Rank 0 recorded both files' sizes and CRCs without reading them back.
  json files = readJson(saved.manifest).at("files");
  ASSERT_EQ(files.size(), 2u);
  FileDigest digest = digestOfFile(saved.shard1);
  EXPECT_EQ(files.at("shards/rank00001.safetensors"),
            json({{"bytes", digest.bytes}, {"crc32", digest.crc32}}));
  EXPECT_EQ(entriesOf(saved.dir),
            (std::vector<std::string>{"latest", "step-00000007"}));
}

TEST(ShardedCheckpoint, FlippedBitInAShard) {
  Saved saved;
  flipBit(saved.shard1, -5);
  EXPECT_ERROR(load(saved.dir), "checkpoint '" + saved.dir + "': '" +
                                    saved.shard1 +
                                    "': checksum mismatch (the file changed "
                                    "after it was written)");
}

TEST(ShardedCheckpoint, MissingShardFileIsNamed) {
  Saved saved;
  fs::remove(saved.shard1);
  EXPECT_ERROR(load(saved.dir), "'" + saved.shard1 + "' is missing");
}

TEST(ShardedCheckpoint, TwoShardsClaimingTheSameOffsets) {
  Saved saved;
  EXPECT_ERROR(saved.loadWith(0, 1, "offsets", {0, 0}),
               "step-00000007/manifest.json: rank 0's box at [0,0] of shape "
               "[2,2] and rank 1's box at [0,0] of shape [2,2] of 'w' overlap");
  EXPECT_ERROR(saved.loadWith(0, 1, "offsets", {1, 0}),
               "rank 1's box at [1,0] of shape [2,2] of 'w' overlap");
  EXPECT_ERROR(saved.loadWith(0, 1, "offsets", {3, 0}),
               "rank 1's box at [3,0] of shape [2,2] of 'w' lies outside its "
               "shape [4,2]");
}

TEST(ShardedCheckpoint, OverlappingOrMissingFlatRanges) {
  Saved saved;
  EXPECT_ERROR(saved.loadWith(2, 1, "flat_range", {3, 7}),
               "rank 0's box at [0,0] of shape [4,2] (flat range [0, 4)) and "
               "rank 1's box at [0,0] of shape [4,2] (flat range [3, 7)) of "
               "'exp_avg.w' overlap");
  EXPECT_ERROR(saved.loadWith(2, 1, "flat_range", {4, 7}),
               "elements [7, 8) of the box at [0,0] of 'exp_avg.w' are in no "
               "shard");
}

TEST(ShardedCheckpoint, EditedRank) {
  Saved saved;
  EXPECT_ERROR(saved.loadWith(0, 1, "rank", 0),
               "a shard of 'w' on rank 0 names the file "
               "'shards/rank00001.safetensors', not "
               "'shards/rank00000.safetensors'");
  saved.editManifest([](json &j) {
    Saved::shard(j, 0, 1)["rank"] = 7;
    Saved::shard(j, 0, 1)["file"] = "shards/rank00007.safetensors";
  });
  EXPECT_ERROR(load(saved.dir),
               "a shard of 'w' on rank 7 lies outside the mesh's 2 ranks");
  // Rank and file edited together: rank 0's file would be claimed twice.
  saved.editManifest([](json &j) {
    Saved::shard(j, 0, 1)["rank"] = 0;
    Saved::shard(j, 0, 1)["file"] = "shards/rank00000.safetensors";
  });
  EXPECT_ERROR(load(saved.dir), "lists two shards of 'w' in '" + saved.version +
                                    "/shards/rank00000.safetensors'");
}

TEST(ShardedCheckpoint, UnlistedTensorInAShardFile) {
  Saved saved;
  ShardedState s;
  float stray = 1;
  std::vector<TensorRef> held = s.mine(1);
  held.push_back({"stray", DType::F32, {1}, &stray});
  rewriteFile(saved.version, "shards/rank00001.safetensors", held);
  EXPECT_ERROR(load(saved.dir), "'" + saved.shard1 +
                                    "' holds 'stray', which no shard in "
                                    "manifest.json claims");
  saved.editManifest([](json &j) {
    j["files"]["../model.safetensors"] = {{"bytes", 8}, {"crc32", 0}};
  });
  EXPECT_ERROR(load(saved.dir), "records '../model.safetensors', which is no "
                                "shard file of the mesh");
}

TEST(ShardedCheckpoint, ShardFileSymlinkedOutside) {
  Saved saved;
  replaceWithLink(saved.shard1, saved.scratch.path("outside.safetensors"));
  EXPECT_ERROR(load(saved.dir), "checkpoint '" + saved.dir + "': '" +
                                    saved.shard1 +
                                    "' is a symbolic link; every file of a "
                                    "checkpoint lies inside its version "
                                    "folder");
}

TEST(ShardedCheckpoint, ShardsFolderSymlinkedOutside) {
  Saved saved;
  std::string shards = saved.version + "/shards";
  replaceWithLink(shards, saved.scratch.path("outside"));
  EXPECT_ERROR(load(saved.dir), "'" + shards + "' is a symbolic link");
}

TEST(ShardedCheckpoint, VersionFolderSymlinkedOutside) {
  Saved saved;
  replaceWithLink(saved.version, saved.scratch.path("outside"));
  EXPECT_ERROR(load(saved.dir), "'" + saved.version + "' is a symbolic link");
}

} // namespace
} // namespace bmrt::test
