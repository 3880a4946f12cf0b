//===- CheckpointVersions.h - a checkpoint folder's versions ----*- C++ -*-===//
//
// A checkpoint folder holds immutable versions, DIR/step-00000300, and the
// pointer DIR/latest naming the newest complete one (Checkpoint.h has the
// layout). These are the folder's operations on names: what a version is
// called, replacing the pointer, listing and pruning versions, and
// removing what crashed saves left. Everything a save creates before it is
// complete is named ".tmp-...", so leftovers are told from versions by
// name alone and can never be taken for a checkpoint.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_CHECKPOINTVERSIONS_H
#define BMRT_CHECKPOINT_CHECKPOINTVERSIONS_H

#include <cstdint>
#include <string>
#include <vector>

namespace bmrt {

/// The pointer's name in DIR.
inline constexpr const char *kLatest = "latest";
/// What every temporary name in DIR starts with.
inline constexpr const char *kTempPrefix = ".tmp-";
/// The manifest's name in a version.
inline constexpr const char *kManifest = "manifest.json";
/// The lock's name in DIR (CheckpointLock.h).
inline constexpr const char *kLockFile = ".lock";

/// "step-00000300": 8 digits, more from step 100,000,000 on.
std::string versionName(int64_t step);
/// The step of a version's name; false for any other name.
bool parseVersionName(const std::string &name, int64_t &step);

/// `dir` without trailing slashes: "ckpt/" and "ckpt" are one folder.
std::string withoutTrailingSlashes(std::string dir);
/// `dir`/`name` as a string.
std::string pathIn(const std::string &dir, const std::string &name);

/// Whether `folder` holds a manifest directly: it is one version (or a
/// copy of one), read-only.
bool holdsManifest(const std::string &folder);
/// The steps of the complete versions in `dir` (step-N folders holding a
/// manifest), ascending.
std::vector<int64_t> completeVersions(const std::string &dir);

/// Makes `dir` ready to take versions: creates it if it is absent (its
/// parent must exist). Refuses in one line a folder that is one version
/// itself, and one holding neither a pointer nor a version but other
/// things (a user's folder named by mistake is never written into).
void prepareCheckpointFolder(const std::string &dir);

/// Points DIR/latest at the version of `step`: a temporary file, fsynced,
/// renamed over the pointer, and the folder fsynced, so a reader finds
/// the old pointer or the new one, whole. `nonce` names the temporary.
void replacePointer(const std::string &dir, int64_t step,
                    const std::string &nonce);
/// Deletes the complete versions of `dir` other than the `keep` newest by
/// step, never `current` (the one just published). Each is renamed to a
/// temporary name first, so it vanishes at once for a reader (which then
/// re-resolves) and a crash mid-way leaves only a leftover. A version that
/// cannot be removed is reported on stderr, not fatal: the save is done.
void pruneVersions(const std::string &dir, int64_t keep, int64_t current,
                   const std::string &nonce);
/// Takes the version of `step` back after the run found it bad (the loss
/// its weights give is not finite): the pointer goes back to the newest
/// older complete version, then `step` is removed. Returns that older
/// step, or -1 when there is none, and then changes nothing: a bad state
/// is still the only one there is, and the caller says so.
int64_t withdrawVersion(const std::string &dir, int64_t step,
                        const std::string &nonce);
/// Removes the leftovers of saves that did not finish (DIR/.tmp-*), with a
/// line on stderr for each; returns their names. Only the holder of the
/// folder's lock may call it: another trainer's save would be a leftover.
std::vector<std::string> removeCheckpointLeftovers(const std::string &dir);

} // namespace bmrt

#endif // BMRT_CHECKPOINT_CHECKPOINTVERSIONS_H
