//===- CheckpointVersions.cpp - the versions in a checkpoint folder -------===//

#include "CheckpointVersions.h"

#include "Checkpoint.h"
#include "FileIO.h"

#include "bmrt/Error.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <system_error>

namespace bmrt {

namespace fs = std::filesystem;

std::string versionName(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08" PRId64, step);
  return name;
}

bool parseVersionName(const std::string &name, int64_t &step) {
  const std::string prefix = "step-";
  if (name.compare(0, prefix.size(), prefix) != 0 ||
      name.size() < prefix.size() + 8 || name.size() > prefix.size() + 18)
    return false;
  step = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9')
      return false;
    step = step * 10 + (c - '0');
  }
  // One spelling per step: "step-000000300" is no version of step 300.
  return name == versionName(step);
}

std::string withoutTrailingSlashes(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/')
    dir.pop_back();
  return dir;
}

std::string pathIn(const std::string &dir, const std::string &name) {
  return (fs::path(dir) / name).string();
}

bool holdsManifest(const std::string &folder) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(pathIn(folder, kManifest), ec));
}

namespace {

/// A step-N folder with its manifest: saving renames a version into place
/// only once the manifest is in it. (A link in its place counts, so that
/// reading it refuses it by name rather than skip it.)
bool isCompleteVersion(const std::string &dir, int64_t step) {
  std::string folder = pathIn(dir, versionName(step));
  std::error_code ec;
  return fs::is_directory(folder, ec) && holdsManifest(folder);
}

bool isTemporary(const std::string &name) {
  return name.compare(0, std::string(kTempPrefix).size(), kTempPrefix) == 0;
}

} // namespace

std::vector<int64_t> completeVersions(const std::string &dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, ec)) {
    int64_t step;
    if (parseVersionName(entry.path().filename().string(), step) &&
        isCompleteVersion(dir, step))
      steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

//===----------------------------------------------------------------------===//
// The folder before a save
//===----------------------------------------------------------------------===//

namespace {

/// Whether `dir` is what saves make: a pointer or a version, or only the
/// lock and leftovers (or nothing) before the first save.
bool isCheckpointFolder(const std::string &dir) {
  std::error_code ec;
  bool foreign = false;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    int64_t step;
    if (name == kLatest || parseVersionName(name, step))
      return true;
    foreign = foreign || !(name == kLockFile || isTemporary(name));
  }
  return !ec && !foreign;
}

void checkParent(const std::string &dir, const std::string &base) {
  std::string parent = fs::path(base).parent_path().string();
  if (parent.empty())
    parent = ".";
  std::error_code ec;
  BMRT_CHECK(
      fs::is_directory(parent, ec),
      "cannot save the checkpoint '" + dir + "': '" + parent + "' " +
          (fs::exists(parent, ec) ? "is not a folder" : "does not exist"));
}

} // namespace

void prepareCheckpointFolder(const std::string &dir) {
  std::string base = withoutTrailingSlashes(dir);
  BMRT_CHECK(!base.empty(), "the checkpoint folder name is empty");
  checkParent(dir, base);
  std::error_code ec;
  if (!fs::exists(base, ec)) {
    fs::create_directory(base, ec);
    BMRT_CHECK(!ec, "cannot create the checkpoint folder '" + dir +
                        "': " + ec.message());
    return;
  }
  BMRT_CHECK(fs::is_directory(base, ec),
             "cannot save the checkpoint '" + dir + "': it is not a folder");
  BMRT_CHECK(!holdsManifest(base),
             "cannot save into '" + dir + "': it is one checkpoint version " +
                 "(it holds " + kManifest + "), and versions are read-only; " +
                 "name the folder of versions instead");
  BMRT_CHECK(isCheckpointFolder(base),
             "cannot save the checkpoint '" + dir +
                 "': it exists and is not a checkpoint folder (no '" + kLatest +
                 "', no step-N version, but other files); choose another "
                 "folder");
}

//===----------------------------------------------------------------------===//
// Publishing and pruning
//===----------------------------------------------------------------------===//

void replacePointer(const std::string &dir, int64_t step,
                    const std::string &nonce) {
  std::string tmp = pathIn(dir, kTempPrefix + std::string("latest-") + nonce);
  writeTextFile(tmp, versionName(step) + "\n");
  std::error_code ec;
  fs::rename(tmp, pathIn(dir, kLatest), ec);
  if (ec) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    BMRT_FAIL("cannot replace '" + pathIn(dir, kLatest) + "': " + ec.message());
  }
  syncDirectory(dir);
}

namespace {

/// Removes the version of `step`: renamed to a temporary name first, so
/// it vanishes at once for a reader (which then re-resolves) and a crash
/// mid-way leaves only a leftover. A failure is a line on stderr, not
/// fatal: the caller's work is done.
void removeVersion(const std::string &dir, int64_t step, const char *why,
                   const std::string &nonce) {
  std::string name = versionName(step);
  std::string doomed =
      pathIn(dir, kTempPrefix + std::string(why) + "-" + name + "-" + nonce);
  std::error_code ec;
  fs::rename(pathIn(dir, name), doomed, ec);
  if (!ec)
    fs::remove_all(doomed, ec);
  if (ec)
    std::fprintf(stderr,
                 "checkpoint '%s': cannot remove the %s version "
                 "'%s': %s\n",
                 dir.c_str(), why, name.c_str(), ec.message().c_str());
}

} // namespace

void pruneVersions(const std::string &dir, int64_t keep, int64_t current,
                   const std::string &nonce) {
  std::vector<int64_t> steps = completeVersions(dir);
  if (int64_t(steps.size()) <= keep)
    return;
  steps.resize(steps.size() - size_t(keep));
  for (int64_t step : steps)
    if (step != current)
      removeVersion(dir, step, "pruned", nonce);
}

int64_t withdrawVersion(const std::string &dir, int64_t step,
                        const std::string &nonce) {
  std::string base = withoutTrailingSlashes(dir);
  std::vector<int64_t> steps = completeVersions(base);
  auto older = std::lower_bound(steps.begin(), steps.end(), step);
  if (older == steps.begin())
    return -1;
  int64_t previous = *std::prev(older);
  // The pointer first: a crash between the two leaves the bad version
  // unnamed, never named.
  replacePointer(base, previous, nonce);
  removeVersion(base, step, "withdrawn", nonce);
  return previous;
}

std::vector<std::string> removeCheckpointLeftovers(const std::string &dir) {
  std::string base = withoutTrailingSlashes(dir);
  // Named first, removed after: a folder's listing while it changes may
  // skip entries.
  std::vector<std::string> leftovers, removed;
  std::error_code ec;
  for (const fs::directory_entry &entry : fs::directory_iterator(base, ec))
    if (isTemporary(entry.path().filename().string()))
      leftovers.push_back(entry.path().filename().string());
  for (const std::string &name : leftovers) {
    std::error_code failed;
    fs::remove_all(pathIn(base, name), failed);
    if (failed) {
      std::fprintf(stderr,
                   "checkpoint '%s': cannot remove '%s' left by a "
                   "save that did not finish: %s\n",
                   dir.c_str(), name.c_str(), failed.message().c_str());
      continue;
    }
    std::fprintf(stderr,
                 "checkpoint '%s': removed '%s' left by a save that "
                 "did not finish\n",
                 dir.c_str(), name.c_str());
    removed.push_back(name);
  }
  return removed;
}

//===----------------------------------------------------------------------===//
// Resolving
//===----------------------------------------------------------------------===//

namespace {

/// N of a folder named step-N; -1 for any other name.
int64_t stepOfFolder(const std::string &folder) {
  int64_t step;
  return parseVersionName(fs::path(folder).filename().string(), step) ? step
                                                                      : -1;
}

/// The pointer's text without its newline; none if there is no pointer.
std::optional<std::string> readPointer(const std::string &base) {
  std::string path = pathIn(base, kLatest);
  std::error_code ec;
  if (!fs::exists(path, ec))
    return std::nullopt;
  std::string text = readTextFile(path);
  if (!text.empty() && text.back() == '\n')
    text.pop_back();
  return text;
}

/// Why the pointer does not name a version to read.
std::string pointerProblem(const std::string &base,
                           const std::optional<std::string> &pointer) {
  int64_t step;
  if (!pointer)
    return "there is no '" + std::string(kLatest) + "'";
  std::string named = "'" + std::string(kLatest) + "' names '" + *pointer + "'";
  if (!parseVersionName(*pointer, step))
    return named + ", which is not a version's name";
  std::error_code ec;
  if (!fs::exists(pathIn(base, *pointer), ec))
    return named + ", which is missing";
  return named + ", which is incomplete (no " + kManifest + ")";
}

void checkIsFolder(const std::string &dir, const std::string &base) {
  std::error_code ec;
  BMRT_CHECK(fs::exists(base, ec),
             "there is no checkpoint in '" + dir + "': it does not exist");
  BMRT_CHECK(fs::is_directory(base, ec),
             "there is no checkpoint in '" + dir + "': it is not a folder");
}

} // namespace

CheckpointVersion resolveCheckpoint(const std::string &dir) {
  std::string base = withoutTrailingSlashes(dir);
  checkIsFolder(dir, base);
  if (holdsManifest(base))
    return {dir, base, stepOfFolder(base), false};
  std::optional<std::string> pointer = readPointer(base);
  int64_t step;
  if (pointer && parseVersionName(*pointer, step) &&
      isCompleteVersion(base, step))
    return {dir, pathIn(base, *pointer), step, true};
  // Never a silent different state: the fallback says what it loads.
  std::string problem = pointerProblem(base, pointer);
  std::vector<int64_t> steps = completeVersions(base);
  BMRT_CHECK(!steps.empty(), "there is no checkpoint in '" + dir + "': " +
                                 problem + ", and no version is complete");
  std::string newest = versionName(steps.back());
  std::fprintf(stderr,
               "checkpoint '%s': %s; loading '%s', the newest complete "
               "version\n",
               dir.c_str(), problem.c_str(), newest.c_str());
  return {dir, pathIn(base, newest), steps.back(), true};
}

CheckpointVersion checkpointVersionAt(const std::string &dir, int64_t step) {
  std::string base = withoutTrailingSlashes(dir);
  if (holdsManifest(base))
    return {dir, base, stepOfFolder(base), false};
  return {dir, pathIn(base, versionName(step)), step, false};
}

bool checkpointExists(const std::string &dir) {
  std::string base = withoutTrailingSlashes(dir);
  std::error_code ec;
  return holdsManifest(base) || fs::exists(pathIn(base, kLatest), ec) ||
         !completeVersions(base).empty();
}

} // namespace bmrt
