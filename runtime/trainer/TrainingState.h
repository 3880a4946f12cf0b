//===- TrainingState.h - what a checkpoint holds ----------------*- C++ -*-===//
//
// The trainer's view of a checkpoint: parameters, optimizer state (AdamW's
// moments or SGD's momentum), the step, the data position and RNG state,
// and which model it belongs to. Saving copies tensors off the device and
// writes them with runtime/checkpoint (a new version each time); loading
// refuses a checkpoint of another model in one line naming both.
//
//===----------------------------------------------------------------------===//

#ifndef BMRT_TRAINER_TRAININGSTATE_H
#define BMRT_TRAINER_TRAININGSTATE_H

#include "runtime/checkpoint/Safetensors.h"
#include "runtime/checkpoint/ShardedCheckpoint.h"

#include <map>

#include "bmrt/Device.h"

#include <nlohmann/json.hpp>

namespace bmrt {

enum class TensorRole { Parameter, FirstMoment, SecondMoment };

/// Where the data stands: the token file's position and the RNG state of
/// the synthetic task (or of the noise the trainer draws).
struct DataState {
  int64_t position = 0;
  uint64_t rngState = 0;
};

struct TrainingState {
  std::string model, modelHash, modelPath, optimizer;
  /// The plan the run was compiled from (its file), recorded in the manifest.
  std::string planFile;
  int64_t step = 0;
  DataState data;
  std::vector<HostTensor> parameters, optimizerState;

  /// Copies `value` (device memory) into the state under `name`.
  void addTensor(Device &device, const std::string &name, TensorRole role,
                 const TensorView &value);
  /// The state's tensor `name` of `role`; throws if it is missing or not
  /// of `dtype` and `shape` (or a view of `shape` and the parameter's
  /// `model` shape, as requireTensor takes it).
  const HostTensor &tensor(const std::string &name, TensorRole role,
                           DType dtype, const Shape &shape,
                           const Shape &model = {}) const;
};

/// "exp_avg.w", "exp_avg_sq.w", "momentum_buffer.w": a parameter's
/// optimizer state as PyTorch names it.
std::string stateName(const std::string &optimizer, TensorRole role,
                      const std::string &param);

/// Writes `state` as a new version of checkpoint folder `dir` (Checkpoint.h),
/// keeping the newest `keep`: the previous version stays the latest until
/// the new one is complete.
void saveTrainingState(const std::string &dir, const TrainingState &state,
                       int64_t keep);
/// The same, sharded (ShardedCheckpoint.h): every rank calls it with the
/// shards it writes in `state`; rank 0 also lists every rank's in
/// `tensors`. `ranks` reaches the other ranks.
void saveShardedTrainingState(const std::string &dir,
                              const TrainingState &state,
                              const std::map<std::string, int> &mesh,
                              const std::vector<ShardedTensor> &tensors,
                              const SaveRanks &ranks, int64_t keep);
/// Reads one version of a checkpoint (resolveCheckpoint on rank 0,
/// checkpointVersionAt on the others); throws if it is missing, corrupt,
/// or of another model than `model` / `modelHash`.
TrainingState loadTrainingState(const CheckpointVersion &version,
                                const std::string &model,
                                const std::string &modelHash);

} // namespace bmrt

#endif // BMRT_TRAINER_TRAININGSTATE_H
