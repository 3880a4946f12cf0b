//===- Checkpoint.h - atomic training checkpoints ---------------*- C++ -*-===//
//
// A checkpoint is a folder:
//   manifest.json          format 1: the model's name and hash, the plan,
//                          the step, the data position and RNG state, the
//                          optimizer and its configuration, and every
//                          tensor's name, kind, dtype and global shape;
//   model.safetensors      the parameters;
//   optimizer.safetensors  the optimizer state, named "<state>.<param>"
//                          as PyTorch's state_dict does ("exp_avg.w",
//                          "exp_avg_sq.w", "momentum_buffer.w").
//
// Saving never leaves a half-written checkpoint where a good one was: the
// files go into DIR.tmp-<pid>, are fsynced with their folder, and only then
// replace DIR (the old one moves to DIR.old until the new one is in place;
// loading falls back to DIR.old if a crash came between the two renames).
//
// A job over a device mesh writes a sharded checkpoint instead: every
// rank's own shards and a manifest of where they lie (ShardedCheckpoint.h).
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
#include <string>
#include <vector>

namespace bmrt {

/// The manifest's format; a reader refuses any other.
inline constexpr int kCheckpointFormat = 1;

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

/// Writes the checkpoint folder `dir` atomically (see the file comment).
/// Throws bmrt::Error with one line when it cannot (the folder's parent is
/// missing or not writable, the disk is full, `dir` exists but is not a
/// checkpoint); the previous checkpoint in `dir` is then kept whole.
void saveCheckpoint(const std::string &dir, const CheckpointInfo &info,
                    const std::vector<TensorRef> &parameters,
                    const std::vector<TensorRef> &optimizerState);

/// A checkpoint read back.
struct Checkpoint {
  /// The folder it was read from: `dir`, or `dir`.old after a crash.
  std::string folder;
  CheckpointInfo info;
  std::vector<HostTensor> parameters, optimizerState;

  /// The tensor of `kind` called `name`, which must have `dtype` and
  /// `shape`; throws a one-line bmrt::Error when it is missing or differs.
  const HostTensor &tensor(TensorKind kind, const std::string &name,
                           DType dtype, const Shape &shape) const;
};

/// Whether `dir` (or its .old fallback) holds a checkpoint to load.
bool checkpointExists(const std::string &dir);
/// The manifest of the checkpoint in `dir` (what it is of, its step), with
/// no tensor read and no model to match.
CheckpointInfo readCheckpointInfo(const std::string &dir);

/// Reads and validates the checkpoint in `dir`; throws a one-line
/// bmrt::Error when it is missing or corrupt, or when it is of another
/// model than `model` with hash `modelHash`.
Checkpoint loadCheckpoint(const std::string &dir, const std::string &model,
                          const std::string &modelHash);

} // namespace bmrt

#endif // BMRT_CHECKPOINT_CHECKPOINT_H
