//===- CheckpointFolder.h - writing and reading one version -----*- C++ -*-===//
//
// Private to runtime/checkpoint: the steps of saving and loading one
// version that an unsharded checkpoint (Checkpoint.cpp) and a sharded one
// (ShardedCheckpoint.cpp) share. A save writes into DIR/.tmp-step-N-NONCE,
// adds the manifest last, renames the folder to DIR/step-N and then
// replaces the pointer; a load reads only the files the manifest names,
// each checked against its recorded size and CRC, none through a symbolic
// link or outside the version.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_CHECKPOINTFOLDER_H
#define BMRT_CHECKPOINT_CHECKPOINTFOLDER_H

#include "Checkpoint.h"
#include "FileIO.h"

#include <map>

namespace bmrt {

/// What names one save's temporary folder: rank 0's pid and the time its
/// save began. Every rank of a job uses rank 0's (a sharded save shares
/// it), and no other job's save has it, so a rank of a dead job that is
/// still writing never writes into this save's folder.
struct SaveNonce {
  int64_t pid = 0, time = 0;
  static SaveNonce fresh();
  std::string str() const;
};

/// One save of a version in progress; every rank can name its folders.
struct VersionSave {
  VersionSave(const std::string &dir, int64_t step, const SaveNonce &nonce);
  /// As the caller named it (messages name it), and without its slashes.
  std::string dir, base;
  int64_t step;
  std::string nonce;
  /// DIR/.tmp-step-N-NONCE, where the version is written.
  std::string tmp;
};

/// Rank 0, first: prepares DIR (prepareCheckpointFolder) and creates the
/// empty temporary folder.
void beginVersionSave(const VersionSave &save);
/// Removes the temporary folder of a save that failed.
void abandonVersionSave(const VersionSave &save);
/// Writes `manifest` into the temporary folder, syncs it, renames the
/// folder to DIR/step-N (moving aside a version of that step another run
/// left), points DIR/latest at it and prunes to `keep` versions; removes
/// the temporary folder if it fails before the rename.
void publishVersion(const VersionSave &save, const nlohmann::json &manifest,
                    int64_t keep);

/// The manifest (Checkpoint.h's fields), with `tensors`, the size and CRC
/// of every tensor file in `files`, and the fields of `extra`.
nlohmann::json buildManifest(const CheckpointInfo &info, nlohmann::json tensors,
                             const std::map<std::string, FileDigest> &files,
                             const nlohmann::json &extra);

/// "checkpoint 'DIR'": how messages name the checkpoint.
std::string checkpointLabel(const CheckpointVersion &version);
/// "checkpoint 'DIR': step-00000300/manifest.json".
std::string manifestLabel(const CheckpointVersion &version);
/// The size and CRC the manifest records of each file, by file name.
std::map<std::string, FileDigest>
parseFileDigests(const CheckpointVersion &version,
                 const nlohmann::json &manifest);
/// Refuses in one line a `file` of the version reached through a symbolic
/// link (the version folder itself, a folder on the way, the file) or
/// resolving outside the version's folder.
void checkInsideVersion(const CheckpointVersion &version,
                        const std::string &file);
/// Reads the safetensors `file` of the version, once checkInsideVersion
/// passes; refuses it in one line unless its size and CRC are `expected`.
SafetensorsFile readVersionFile(const CheckpointVersion &version,
                                const std::string &file,
                                const FileDigest &expected);

} // namespace bmrt

#endif // BMRT_CHECKPOINT_CHECKPOINTFOLDER_H
