//===- CheckpointVersionsTest.cpp - versions, pointer, pruning, leftovers -===//

#include "CheckpointVersions.h"
#include "Checkpoint.h"
#include "CheckpointLock.h"

#include "TestStates.h"

#include <filesystem>

#include <unistd.h>

namespace bmrt::test {
namespace {

namespace fs = std::filesystem;

/// A save of `step` whose fc.weight starts with `first`.
State stateAt(int64_t step, float first) {
  State s(step);
  s.w[0] = first;
  return s;
}

TEST(CheckpointVersions, Names) {
  EXPECT_EQ(versionName(300), "step-00000300");
  EXPECT_EQ(versionName(123456789), "step-123456789");
  int64_t step = -1;
  EXPECT_TRUE(parseVersionName("step-00000300", step));
  EXPECT_EQ(step, 300);
  EXPECT_TRUE(parseVersionName("step-123456789", step));
  EXPECT_EQ(step, 123456789);
  for (const char *name : {"step-300", "step-000000300", "step-0000030x",
                           "latest", ".tmp-step-00000300-1-2", "step-"})
    EXPECT_FALSE(parseVersionName(name, step)) << name;
}

TEST(CheckpointVersions, EachSaveIsANewVersion) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  stateAt(10, 1).save(dir);
  std::string first = readBytes(versionOf(dir, 10) + "/model.safetensors");
  stateAt(20, 42).save(dir);
  Checkpoint c = load(dir);
  EXPECT_EQ(c.info.step, 20);
  EXPECT_EQ(firstWeight(c), 42);
  EXPECT_EQ(entriesOf(dir), (std::vector<std::string>{"latest", "step-00000010",
                                                      "step-00000020"}));
  // The older version is untouched.
  EXPECT_EQ(readBytes(versionOf(dir, 10) + "/model.safetensors"), first);
}

TEST(CheckpointVersions, PruningKeepsTheNewest) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  for (int64_t step = 1; step <= 5; ++step)
    State(step).save(dir, /*keep=*/3);
  EXPECT_EQ(completeVersions(dir), (std::vector<int64_t>{3, 4, 5}));
  State(6).save(dir, /*keep=*/1);
  EXPECT_EQ(completeVersions(dir), std::vector<int64_t>{6});
  EXPECT_EQ(entriesOf(dir),
            (std::vector<std::string>{"latest", "step-00000006"}));
}

TEST(CheckpointVersions, PruningNeverDeletesThePointersVersion) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  stateAt(10, 10).save(dir);
  stateAt(20, 20).save(dir);
  // An operator goes back to step 10; the run from there saves step 15,
  // older than the abandoned 20, which is kept as the newest by step.
  writeBytes(dir + "/latest", "step-00000010\n");
  stateAt(15, 15).save(dir, /*keep=*/1);
  EXPECT_EQ(completeVersions(dir), (std::vector<int64_t>{15, 20}));
  EXPECT_EQ(firstWeight(load(dir)), 15);
}

TEST(CheckpointVersions, WithdrawingGoesBackToTheVersionBefore) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  stateAt(1, 1).save(dir);
  stateAt(2, 2).save(dir);
  EXPECT_EQ(withdrawVersion(dir, 2, "7"), 1);
  EXPECT_EQ(entriesOf(dir),
            (std::vector<std::string>{"latest", "step-00000001"}));
  EXPECT_EQ(firstWeight(load(dir)), 1);
  // With nothing older, the only state there is stays.
  EXPECT_EQ(withdrawVersion(dir, 1, "7"), -1);
  EXPECT_EQ(load(dir).info.step, 1);
}

TEST(CheckpointVersions, SavingAStepAgainReplacesItsVersion) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  stateAt(5, 1).save(dir);
  stateAt(5, 2).save(dir);
  EXPECT_EQ(firstWeight(load(dir)), 2);
  EXPECT_EQ(entriesOf(dir),
            (std::vector<std::string>{"latest", "step-00000005"}));
}

TEST(CheckpointVersions, PointerToAMissingVersionFallsBackWithALine) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  stateAt(3, 3).save(dir);
  stateAt(4, 4).save(dir);
  writeBytes(dir + "/latest", "step-00000099\n");
  testing::internal::CaptureStderr();
  Checkpoint c = load(dir);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "checkpoint '" + dir +
                "': 'latest' names 'step-00000099', which is missing; "
                "loading 'step-00000004', the newest complete version\n");
  EXPECT_EQ(c.info.step, 4);
  // An incomplete version, and no pointer at all, fall back alike.
  fs::remove(versionOf(dir, 4) + "/manifest.json");
  writeBytes(dir + "/latest", "step-00000004\n");
  testing::internal::CaptureStderr();
  EXPECT_EQ(load(dir).info.step, 3);
  EXPECT_NE(testing::internal::GetCapturedStderr().find(
                "which is incomplete (no manifest.json); loading "
                "'step-00000003'"),
            std::string::npos);
  fs::remove(dir + "/latest");
  testing::internal::CaptureStderr();
  EXPECT_EQ(load(dir).info.step, 3);
  EXPECT_NE(testing::internal::GetCapturedStderr().find(
                "there is no 'latest'; loading 'step-00000003'"),
            std::string::npos);
}

TEST(CheckpointVersions, LeftoversAreRemovedWithALine) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  State(3).save(dir);
  // What crashed saves leave: a version being written, a pointer being
  // replaced, a version being pruned.
  fs::create_directories(dir + "/.tmp-step-00000004-77-88/shards");
  writeBytes(dir + "/.tmp-step-00000004-77-88/shards/rank00000.safetensors",
             "half");
  writeBytes(dir + "/.tmp-latest-77-88", "step-0000");
  fs::create_directory(dir + "/.tmp-pruned-step-00000001-77-88");
  testing::internal::CaptureStderr();
  std::vector<std::string> removed = removeCheckpointLeftovers(dir);
  std::string lines = testing::internal::GetCapturedStderr();
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{
                         ".tmp-latest-77-88", ".tmp-pruned-step-00000001-77-88",
                         ".tmp-step-00000004-77-88"}));
  EXPECT_NE(lines.find("checkpoint '" + dir +
                       "': removed '.tmp-step-00000004-77-88' left by a save "
                       "that did not finish\n"),
            std::string::npos)
      << lines;
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 3);
  EXPECT_EQ(entriesOf(dir),
            (std::vector<std::string>{"latest", "step-00000003"}));
  EXPECT_EQ(load(dir).info.step, 3);
}

TEST(CheckpointVersions, LeftoversNeverJamTheFolder) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  // A folder holding only what a crashed first save left is a checkpoint
  // folder: the next save goes in.
  fs::create_directories(dir + "/.tmp-step-00000001-5-6");
  writeBytes(dir + "/.lock", "5\n");
  State(2).save(dir);
  EXPECT_EQ(load(dir).info.step, 2);
}

TEST(CheckpointVersions, ResolvedReadNeverMixesVersions) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  stateAt(1, 100).save(dir);
  CheckpointVersion resolved = resolveCheckpoint(dir);
  stateAt(2, 200).save(dir);
  // Read after a newer save: the version resolved, whole.
  Checkpoint c = loadCheckpoint(resolved, "tiny-mlp", "abc123");
  EXPECT_EQ(c.info.step, 1);
  EXPECT_EQ(firstWeight(c), 100);
}

TEST(CheckpointVersions, PrunedWhileReadIsReadAgainWhole) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  stateAt(1, 100).save(dir, /*keep=*/1);
  std::vector<Checkpoint> reads;
  int calls = 0;
  withCheckpointVersion(dir, [&](const CheckpointVersion &version) {
    // The first read races a save with --keep 1, which prunes its version.
    if (calls++ == 0)
      stateAt(2, 200).save(dir, /*keep=*/1);
    reads.push_back(loadCheckpoint(version, "tiny-mlp", "abc123"));
  });
  EXPECT_EQ(calls, 2);
  ASSERT_EQ(reads.size(), 1u);
  EXPECT_EQ(reads[0].info.step, 2);
  EXPECT_EQ(firstWeight(reads[0]), 200);
}

TEST(CheckpointVersions, AVersionNamedDirectlyLoadsAsItself) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  stateAt(1, 1).save(dir);
  stateAt(2, 2).save(dir);
  Checkpoint c = load(versionOf(dir, 1));
  EXPECT_EQ(c.info.step, 1);
  EXPECT_EQ(firstWeight(c), 1);
  // A copy under another name has no step to check against.
  fs::copy(versionOf(dir, 2), scratch.path("copy"),
           fs::copy_options::recursive);
  EXPECT_EQ(load(scratch.path("copy")).info.step, 2);
}

TEST(CheckpointLock, LivesInTheFolderAndNamesTheHolder) {
  ScratchDir scratch;
  std::string dir = scratch.path("ckpt");
  CheckpointLock lock(dir);
  EXPECT_EQ(CheckpointLock::pathOf(dir + "/"), dir + "/.lock");
  EXPECT_EQ(readBytes(dir + "/.lock"), std::to_string(::getpid()) + "\n");
  EXPECT_ERROR(
      CheckpointLock second(dir),
      "the checkpoint '" + dir + "' is in use by another trainer (pid " +
          std::to_string(::getpid()) + ", holding '" + dir + "/.lock')");
  // The holder saves into the folder it locked.
  State().save(dir);
  EXPECT_EQ(load(dir).info.step, 7);
}

TEST(CheckpointLock, RefusesWhatIsNoCheckpointFolder) {
  ScratchDir scratch;
  EXPECT_ERROR(CheckpointLock lock(scratch.path("none/ckpt")),
               "'" + scratch.path("none") + "' does not exist");
  fs::create_directory(scratch.path("work"));
  writeBytes(scratch.path("work/notes.txt"), "keep me");
  EXPECT_ERROR(CheckpointLock lock(scratch.path("work")),
               "it exists and is not a checkpoint folder");
  EXPECT_FALSE(fs::exists(scratch.path("work/.lock")));
}

} // namespace
} // namespace bmrt::test
