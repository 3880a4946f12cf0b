//===- CheckpointFolder.cpp - writing and reading one version -------------===//

#include "CheckpointFolder.h"

#include "CheckpointVersions.h"

#include "bmrt/Error.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <system_error>

#include <unistd.h>

namespace bmrt {

namespace fs = std::filesystem;
using json = nlohmann::json;

//===----------------------------------------------------------------------===//
// Saving
//===----------------------------------------------------------------------===//

SaveNonce SaveNonce::fresh() {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  return {
      int64_t(::getpid()),
      int64_t(
          std::chrono::duration_cast<std::chrono::nanoseconds>(now).count())};
}

std::string SaveNonce::str() const {
  return std::to_string(pid) + "-" + std::to_string(time);
}

VersionSave::VersionSave(const std::string &dir, int64_t step,
                         const SaveNonce &nonce)
    : dir(dir), base(withoutTrailingSlashes(dir)), step(step),
      nonce(nonce.str()),
      tmp(pathIn(base, kTempPrefix + versionName(step) + "-" + this->nonce)) {}

void beginVersionSave(const VersionSave &save) {
  prepareCheckpointFolder(save.dir);
  std::error_code ec;
  fs::create_directory(save.tmp, ec);
  BMRT_CHECK(!ec, "cannot create the checkpoint folder '" + save.tmp +
                      "': " + ec.message());
}

void abandonVersionSave(const VersionSave &save) {
  std::error_code ec;
  fs::remove_all(save.tmp, ec);
}

namespace {

void renameOrFail(const std::string &from, const std::string &to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  BMRT_CHECK(!ec,
             "cannot rename '" + from + "' to '" + to + "': " + ec.message());
}

/// Renames the temporary folder to DIR/step-N. A version of that step
/// already there is another history's (a run that started over, or went on
/// from an older version): it moves aside first, since a rename cannot
/// replace a folder that is not empty, and goes once the new one is in
/// place (a crash in between leaves a leftover the next start removes).
void moveIntoPlace(const VersionSave &save) {
  std::string name = versionName(save.step);
  std::string final = pathIn(save.base, name);
  std::string aside;
  std::error_code ec;
  if (fs::exists(fs::symlink_status(final, ec))) {
    aside = pathIn(save.base, kTempPrefix + std::string("replaced-") + name +
                                  "-" + save.nonce);
    renameOrFail(final, aside);
  }
  fs::rename(save.tmp, final, ec);
  if (ec) {
    std::error_code ignored;
    if (!aside.empty())
      fs::rename(aside, final, ignored);
    BMRT_FAIL("cannot rename '" + save.tmp + "' to '" + final +
              "': " + ec.message());
  }
  syncDirectory(save.base);
  if (!aside.empty())
    fs::remove_all(aside, ec);
}

} // namespace

void publishVersion(const VersionSave &save, const json &manifest,
                    int64_t keep) {
  try {
    // The manifest goes last: a folder without one is never a version.
    writeTextFile(pathIn(save.tmp, kManifest), manifest.dump(2) + "\n");
    syncDirectory(save.tmp);
    moveIntoPlace(save);
  } catch (...) {
    abandonVersionSave(save);
    throw;
  }
  replacePointer(save.base, save.step, save.nonce);
  pruneVersions(save.base, keep, save.step, save.nonce);
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

std::string checkpointLabel(const CheckpointVersion &version) {
  return "checkpoint '" + version.dir + "'";
}

std::string manifestLabel(const CheckpointVersion &version) {
  std::string base = withoutTrailingSlashes(version.dir);
  std::string within = version.folder == base
                           ? std::string()
                           : fs::path(version.folder).filename().string() + "/";
  return checkpointLabel(version) + ": " + within + kManifest;
}

std::map<std::string, FileDigest>
parseFileDigests(const CheckpointVersion &version, const json &manifest) {
  std::map<std::string, FileDigest> files;
  try {
    for (const auto &[name, entry] : manifest.at("files").items()) {
      uint64_t crc = entry.at("crc32");
      BMRT_CHECK(crc <= UINT32_MAX, manifestLabel(version) + ": '" + name +
                                        "' has crc32 " + std::to_string(crc) +
                                        ", which is not a CRC-32");
      files[name] = {entry.at("bytes").get<uint64_t>(), uint32_t(crc)};
    }
  } catch (const json::exception &e) {
    BMRT_FAIL(
        manifestLabel(version) +
        " has no valid \"files\" (sizes and CRCs of its files): " + e.what());
  }
  return files;
}

namespace {

bool isInside(const fs::path &root, const fs::path &path) {
  auto [inRoot, inPath] =
      std::mismatch(root.begin(), root.end(), path.begin(), path.end());
  return inRoot == root.end();
}

[[noreturn]] void refuseLink(const CheckpointVersion &version,
                             const fs::path &path, const std::string &what) {
  BMRT_FAIL(checkpointLabel(version) + ": '" + path.string() + "' " + what +
            "; every file of a checkpoint lies inside its version folder");
}

} // namespace

void checkInsideVersion(const CheckpointVersion &version,
                        const std::string &file) {
  fs::path root(version.folder);
  std::error_code ec;
  // A folder the caller named is theirs to place anywhere; a version a
  // pointer or a step led to must be DIR/step-N itself.
  if (version.folder != withoutTrailingSlashes(version.dir) &&
      fs::is_symlink(fs::symlink_status(root, ec)))
    refuseLink(version, root, "is a symbolic link");
  fs::path at = root;
  for (const fs::path &part : fs::path(file)) {
    at /= part;
    fs::file_status status = fs::symlink_status(at, ec);
    if (!fs::exists(status))
      return; // the reader names the missing file
    if (fs::is_symlink(status))
      refuseLink(version, at, "is a symbolic link");
  }
  fs::path realRoot = fs::canonical(root, ec);
  fs::path real = ec ? fs::path() : fs::canonical(at, ec);
  if (ec || !isInside(realRoot, real))
    refuseLink(version, at, "resolves outside its folder");
}

SafetensorsFile readVersionFile(const CheckpointVersion &version,
                                const std::string &file,
                                const FileDigest &expected) {
  checkInsideVersion(version, file);
  std::string path = pathIn(version.folder, file);
  std::string named = checkpointLabel(version) + ": '" + path + "'";
  std::error_code ec;
  BMRT_CHECK(fs::exists(path, ec), named + " is missing");
  uint64_t bytes = fs::file_size(path, ec);
  BMRT_CHECK(!ec, named + " cannot be read: " + ec.message());
  BMRT_CHECK(bytes == expected.bytes,
             named + " has " + std::to_string(bytes) + " bytes, not the " +
                 std::to_string(expected.bytes) +
                 " the manifest records (the file changed after it was "
                 "written: truncated?)");
  std::string mismatch =
      named + ": checksum mismatch (the file changed after it was written)";
  FileDigest read;
  SafetensorsFile contents;
  try {
    contents = readSafetensors(path, &read);
  } catch (const Error &) {
    // A damaged file often fails to parse first: name the damage, not its
    // symptom.
    BMRT_CHECK(digestOfFile(path) == expected, mismatch);
    throw;
  }
  BMRT_CHECK(read == expected, mismatch);
  return contents;
}

} // namespace bmrt
