//===- Checkpoint.h - checkpoints as immutable versions ---------*- C++ -*-===//
//
// A checkpoint folder DIR holds versions, one per save, and a pointer:
//   latest                 "step-00000300\n": the newest complete version;
//   step-00000300/         one version, never changed once written:
//     manifest.json        format 2: the model's name and hash, the plan,
//                          the step, the data position and RNG state, the
//                          optimizer and its configuration, every tensor's
//                          name, kind, dtype and global shape, and the size
//                          and CRC-32 of every tensor file ("files");
//     model.safetensors    the parameters;
//     optimizer.safetensors  the optimizer state, named "<state>.<param>"
//                          as PyTorch's state_dict does ("exp_avg.w",
//                          "exp_avg_sq.w", "momentum_buffer.w");
//   .lock                  the trainer's lock (CheckpointLock.h).
//
// A save writes into DIR/.tmp-step-N-NONCE, fsyncs every file and the
// manifest last, renames the folder to DIR/step-N, then replaces `latest`
// atomically and deletes versions beyond the newest --keep (never the one
// `latest` names). A crash at any point leaves the previous pointer and
// its version whole, plus a .tmp-* leftover the next trainer removes with
// a line saying so. A reader resolves `latest` once and reads only what
// that version's manifest names, each file checked against its size and
// CRC: it never mixes versions. A pointer naming a missing or incomplete
// version falls back to the newest complete one, with a line on stderr. A
// folder holding manifest.json itself (DIR/step-N named directly, or a
// copy of one) loads as that one version, read-only.
//
// A job over a device mesh writes a sharded version instead: every rank's
// own shards and a manifest of where they lie (ShardedCheckpoint.h).
// loadCheckpoint reads either form and returns global tensors.
//
// The API takes host tensors: the trainer copies device tensors to the
// host and hands them over as TensorRefs.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_CHECKPOINT_CHECKPOINT_H
#define BMRT_CHECKPOINT_CHECKPOINT_H

#include "Safetensors.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bmrt {

/// The manifest's format; a reader refuses any other. Format 2: versions,
/// the size and CRC of every file, shards validated.
inline constexpr int kCheckpointFormat = 2;
/// Versions a save keeps by default (the trainer's --keep).
inline constexpr int64_t kDefaultKeep = 2;

enum class TensorKind : uint8_t { Parameter, OptimizerState };
/// "parameter" / "optimizer_state".
const char *nameOf(TensorKind kind);

/// Everything in the manifest besides the tensor list.
struct CheckpointInfo {
  std::string model;
  /// Whatever identifies the model's structure (the caller computes it); a
  /// checkpoint loads only into a model with the same name and hash.
  std::string modelHash;
  /// Where the model's ONNX file was when it was compiled (bmc export reads
  /// the graph from it); empty if unknown.
  std::string modelPath;
  nlohmann::json plan = nlohmann::json::object();
  /// The last step whose update the parameters include.
  int64_t step = 0;
  /// Where the data source reads next (TokenFile::position) and its RNG's
  /// state (the synthetic tasks').
  int64_t dataPosition = 0;
  uint64_t rngState = 0;
  std::string optimizer;
  nlohmann::json optimizerConfig = nlohmann::json::object();
};

/// Writes version info.step of the checkpoint folder `dir` (see the file
/// comment), creating `dir` if needed, and keeps the newest `keep`
/// versions. Throws bmrt::Error with one line when it cannot (the folder's
/// parent is missing or not writable, the disk is full, `dir` exists but is
/// not a checkpoint folder); the previous version then stays the latest.
void saveCheckpoint(const std::string &dir, const CheckpointInfo &info,
                    const std::vector<TensorRef> &parameters,
                    const std::vector<TensorRef> &optimizerState,
                    int64_t keep = kDefaultKeep);

/// One version of a checkpoint, as a reader resolved it.
struct CheckpointVersion {
  /// The folder as the caller named it (messages name it).
  std::string dir;
  /// The version's folder: DIR/step-N, or DIR itself when it holds a
  /// manifest.
  std::string folder;
  /// N of a folder named step-N (its manifest must say that step); -1 for
  /// a version folder named otherwise.
  int64_t step = -1;
  /// Whether DIR's pointer (or its fallback) chose it: a reader whose
  /// version vanishes may resolve again.
  bool resolved = false;
};

/// Resolves DIR's pointer once: the version it names, or (with a line on
/// stderr) the newest complete one when it names none that is complete;
/// DIR itself when it holds a manifest. Throws a one-line bmrt::Error when
/// there is no version.
CheckpointVersion resolveCheckpoint(const std::string &dir);
/// The version of `step` in `dir` (DIR itself when it holds a manifest),
/// unresolved: what another rank resolved, read as it was resolved.
CheckpointVersion checkpointVersionAt(const std::string &dir, int64_t step);
/// Resolves `dir` and calls `read` with the version. Should the version
/// vanish while `read` reads it (a trainer pruned it: with --keep 1 at its
/// next save; a newer version is complete by then, since pruning follows
/// the pointer), resolves once more and calls `read` again with the newer
/// one; any other error propagates.
void withCheckpointVersion(
    const std::string &dir,
    const std::function<void(const CheckpointVersion &)> &read);

/// A checkpoint read back.
struct Checkpoint {
  /// The version's folder it was read from.
  std::string folder;
  CheckpointInfo info;
  std::vector<HostTensor> parameters, optimizerState;

  /// The tensor of `kind` called `name`, which must have `dtype` and
  /// `shape`; throws a one-line bmrt::Error when it is missing or differs.
  const HostTensor &tensor(TensorKind kind, const std::string &name,
                           DType dtype, const Shape &shape) const;
};

/// Whether `dir` holds a version to load (or a pointer to one).
bool checkpointExists(const std::string &dir);
/// The manifest of a version (what it is of, its step), with no tensor
/// read and no model to match.
CheckpointInfo readCheckpointInfo(const CheckpointVersion &version);
CheckpointInfo readCheckpointInfo(const std::string &dir);

/// Reads and validates a version: every file against its size and CRC,
/// every shard against the others (ShardedCheckpoint.h); throws a one-line
/// bmrt::Error when it is missing or corrupt, or when it is of another
/// model than `model` with hash `modelHash`.
Checkpoint loadCheckpoint(const CheckpointVersion &version,
                          const std::string &model,
                          const std::string &modelHash);
/// The same for the version `dir` resolves to (withCheckpointVersion).
Checkpoint loadCheckpoint(const std::string &dir, const std::string &model,
                          const std::string &modelHash);

} // namespace bmrt

#endif // BMRT_CHECKPOINT_CHECKPOINT_H
